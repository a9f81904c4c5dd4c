"""Stand-ins of exactly the sglang objects an attention backend touches, for
tests and benchmarks in a process without sglang, and a small decode loop
and CUDA-graph runner that drive a backend as sglang's model runner does.

They follow sglang's main branch after PR #26735 (merged 2026-05-29, the
three-method metadata contract of base_attn_backend.py), with the names,
attributes and call signatures of:

- ForwardMode (model_executor/forward_batch_info.py): the members and
  predicates of main (DRAFT_EXTEND_V2, DLLM_EXTEND, is_extend with
  include_draft_extend_v2, is_decode_or_idle, ...);
- ForwardBatch (same file): forward_mode, batch_size, input_ids,
  req_pool_indices, seq_lens, out_cache_loc, seq_lens_sum, seq_lens_cpu,
  positions, extend_* (device tensors and *_cpu lists), spec_info,
  attn_attend_prefix_cache; no pool references (main removed them: the
  backends take the pools from model_runner); get_max_chunk_capacity()
  (ForwardBatchDeepSeekMHAMixin);
- EagleVerifyInput (speculative/eagle_info.py): draft_token_num,
  custom_mask, positions, spec_input_type;
- RadixAttention (layers/radix_attention.py): tp_q_head_num,
  tp_k_head_num, tp_v_head_num, head_dim, qk_head_dim, v_head_dim,
  scaling, layer_id, logit_cap, sliding_window_size, is_cross_attention,
  k_scale, v_scale, k_scale_float, v_scale_float; forward(q, k, v,
  forward_batch, save_kv_cache=True, **kwargs) reshapes k and v as sglang
  does (k to v_head_dim when k_rope is given) and calls the backend of the
  forward context (get_attn_backend());
- ReqToTokenPool and MLATokenToKVPool (mem_cache): req_to_token [size,
  max_context_len] int32; kv_buffer per layer [size + page_size, 1,
  kv_lora_rank + qk_rope_head_dim] (slot 0's page is the padding slot),
  get_key_buffer(layer_id), get_value_buffer, get_kv_buffer,
  set_kv_buffer(layer, loc, cache_k, cache_v), set_mla_kv_buffer(layer,
  loc, cache_k_nope, cache_k_rope), get_mla_kv_buffer;
- ModelRunner (model_executor/model_runner.py) with model_config
  (context_len, num_attention_heads, kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim, scaling, num_hidden_layers), server_args,
  device, gpu_id, page_size, dtype, kv_cache_dtype, max_total_num_tokens,
  req_to_token_pool, token_to_kv_pool, tp_size, use_mla_backend;
- KVIndexTranslator (mem_cache/kv_index_translator.py): is_translating,
  and bind_and_verify_backends(backends), which sets each backend's
  kv_index_translator at boot as the runner does;
- GraphRunner follows cuda_graph_runner.py's capture_one_batch_size and
  replay_prepare in both protocols: "legacy" (init_forward_metadata_
  capture_cuda_graph before two warm-up runs and the capture;
  init_forward_metadata_replay_cuda_graph before a replay) and "2026"
  (init_forward_metadata_out_graph(fb, in_capture=True); each run calls
  init_forward_metadata_in_graph then the forward, on_after_cuda_graph_
  warmup after each warm-up; init_forward_metadata_out_graph(fb_view)
  before a replay).

sglang's repository was too large to fetch whole here; the files were read
from a code index (SGLANG_FOLLOWED says which). torch is imported when a
stand-in holding tensors is made; ForwardMode needs nothing.
"""

import contextlib
import enum
import math
import random

#: What the stand-ins follow, file by file.
SGLANG_FOLLOWED = {
    "base": "sglang main after PR #26735 (merged 2026-05-29), the 3-method metadata contract",
    "layers/attention/base_attn_backend.py": "main after #26735 (SharedReadEnds, attn_backend_list, forward_metadata)",
    "layers/attention/flashinfer_mla_backend.py": "main after #26735 (pools from model_runner, set_mla_kv_buffer)",
    "model_executor/forward_batch_info.py": "main after #26735 (ForwardBatch without pool refs)",
    "mem_cache MLATokenToKVPool": "main (kv_buffer [size + page_size, 1, 576])",
    "model_executor/cuda_graph_runner.py": "main after #26742 (capture_one_batch_size, replay_prepare)",
    "layers/attention/attention_registry.py": "43681aaa768047065d50fb746c884077a44ed505",
    "srt/plugins/__init__.py": "32c764af5f16beac1afaf71d2d6fcf39a064f304 (entry point group sglang.srt.plugins)",
    "mem_cache/kv_index_translator.py": "main (2026): is_translating, bind_and_verify_backends",
    "speculative/draft_utils.py": "00ac7105db02776e90962fc6bb311d20dffe87ae (DraftBackendFactory)",
    "speculative/eagle_worker.py": "main (2026): draft_forward's steps, assign_draft_cache_locs for topk 1",
    "speculative/eagle_draft_cuda_graph_runner.py": "main (2026): the draft's capture and replay calls",
}

_torch = None


def _t():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


class ForwardMode(enum.IntEnum):
    """sglang's ForwardMode (main)."""

    EXTEND = enum.auto()
    DECODE = enum.auto()
    MIXED = enum.auto()
    IDLE = enum.auto()
    TARGET_VERIFY = enum.auto()
    DRAFT_EXTEND_V2 = enum.auto()
    PREBUILT = enum.auto()
    SPLIT_PREFILL = enum.auto()
    DLLM_EXTEND = enum.auto()

    def is_prefill(self, include_draft_extend_v2=False):
        return self.is_extend(include_draft_extend_v2=include_draft_extend_v2)

    def is_extend(self, include_draft_extend_v2=False):
        return (self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.TARGET_VERIFY,
                         ForwardMode.SPLIT_PREFILL, ForwardMode.DLLM_EXTEND)
                or (include_draft_extend_v2 and self == ForwardMode.DRAFT_EXTEND_V2))

    def is_decode(self):
        return self == ForwardMode.DECODE

    def is_mixed(self):
        return self == ForwardMode.MIXED

    def is_idle(self):
        return self == ForwardMode.IDLE

    def is_decode_or_idle(self):
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_target_verify(self):
        return self == ForwardMode.TARGET_VERIFY

    def is_draft_extend_v2(self):
        return self == ForwardMode.DRAFT_EXTEND_V2

    def is_extend_or_draft_extend_or_mixed(self, include_draft_extend_v2=False):
        return (self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.SPLIT_PREFILL)
                or (include_draft_extend_v2 and self == ForwardMode.DRAFT_EXTEND_V2))

    def is_cuda_graph(self):
        return self in (ForwardMode.DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.IDLE, ForwardMode.DLLM_EXTEND)

    def is_split_prefill(self):
        return self == ForwardMode.SPLIT_PREFILL

    def is_extend_without_speculative(self):
        return self.is_extend() and not self.is_target_verify()

    def is_prebuilt(self):
        return self == ForwardMode.PREBUILT

    def is_dllm_extend(self):
        return self == ForwardMode.DLLM_EXTEND


class EagleVerifyInput:
    """The spec_info of a TARGET_VERIFY batch, as far as attention backends
    read it."""

    def __init__(self, draft_token_num, positions=None, custom_mask=None, spec_input_type="EAGLE_VERIFY"):
        self.draft_token_num = draft_token_num
        self.positions = positions
        self.custom_mask = custom_mask
        self.spec_input_type = spec_input_type
        self.ragged_verify_layout = None


class EagleDraftInput:
    """The spec_info of a draft model's DECODE batch (speculative/
    eagle_info.py), as far as attention backends read it: its presence."""

    def __init__(self, topk_p=None, topk_index=None, hidden_states=None, capture_hidden_mode=None, draft_probs=None):
        self.topk_p = topk_p
        self.topk_index = topk_index
        self.hidden_states = hidden_states
        self.capture_hidden_mode = capture_hidden_mode
        self.draft_probs = draft_probs
        self.dsa_topk_indices = None
        self.spec_input_type = "EAGLE_DRAFT"


class DraftBackendFactory:
    """sglang's DraftBackendFactory (speculative/draft_utils.py at
    00ac7105db02776e90962fc6bb311d20dffe87ae): its two maps of backend
    creators, local to create_decode_backend and create_draft_extend_backend
    and passed to _create_backend, whose entries answer (stamp, backend);
    the backend type is the draft runner's draft_attention_backend, else
    the configured one (here the runner's server_args). The fa3 and triton
    entries make the tests' torch stand-ins of sglang's backends
    (attnplug_testing.torch_mla); made records what each made."""

    def __init__(self, draft_model_runner, topk, speculative_num_steps, seed_dsa_topk_from_draft_extend=False,
                 qsa_profile=None):
        self.draft_model_runner = draft_model_runner
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.seed_dsa_topk_from_draft_extend = seed_dsa_topk_from_draft_extend
        self.qsa_profile = qsa_profile
        self.draft_attn_backend = getattr(draft_model_runner, "draft_attention_backend", None)
        self.made = []

    def _create_backend(self, backend_name, backend_map, error_template, stamps_children=False):
        configured = getattr(self.draft_model_runner.server_args, backend_name)
        backend_type = self.draft_attn_backend or configured
        if backend_type not in backend_map:
            raise ValueError(error_template.format(backend_type=backend_type))
        stamp, backend = backend_map[backend_type]()
        if backend is not None:
            backend.prefill_attention_backend_str = stamp
            backend.decode_attention_backend_str = stamp
            if stamps_children:
                for child in backend.attn_backends:
                    child.prefill_attention_backend_str = stamp
                    child.decode_attention_backend_str = stamp
        return backend

    def create_decode_backend(self):
        if self.speculative_num_steps <= 1:
            return None
        backend_map = {"fa3": self._create_fa3_decode_backend, "triton": self._create_triton_decode_backend}
        return self._create_backend("decode_attention_backend", backend_map,
                                    "EAGLE is not supported in decode attention backend {backend_type}",
                                    stamps_children=True)

    def create_draft_extend_backend(self):
        backend_map = {"fa3": self._create_fa3_prefill_backend, "triton": self._create_triton_prefill_backend}
        return self._create_backend("prefill_attention_backend", backend_map,
                                    "EAGLE is not supported in attention backend {backend_type}")

    def _made(self, name, backend):
        self.made.append((name, backend))
        return name, backend

    def _create_fa3_decode_backend(self):
        from attnplug_testing.torch_mla import TorchMLAMultiStepDraftBackend
        return self._made("fa3", TorchMLAMultiStepDraftBackend(self.draft_model_runner, self.topk,
                                                               self.speculative_num_steps))

    def _create_triton_decode_backend(self):
        from attnplug_testing.torch_mla import TorchMLAMultiStepDraftBackend
        return self._made("triton", TorchMLAMultiStepDraftBackend(self.draft_model_runner, self.topk,
                                                                  self.speculative_num_steps))

    def _create_fa3_prefill_backend(self):
        from attnplug_testing.torch_mla import TorchMLABackend
        return self._made("fa3", TorchMLABackend(self.draft_model_runner, skip_prefill=False))

    def _create_triton_prefill_backend(self):
        from attnplug_testing.torch_mla import TorchMLABackend
        return self._made("triton", TorchMLABackend(self.draft_model_runner, skip_prefill=False))


class ForwardBatch:
    """sglang's ForwardBatch: the fields attention backends read."""

    def __init__(self, forward_mode, batch_size, input_ids, req_pool_indices, seq_lens, out_cache_loc,
                 seq_lens_sum, seq_lens_cpu=None, positions=None, extend_num_tokens=None, extend_seq_lens=None,
                 extend_prefix_lens=None, extend_start_loc=None, extend_prefix_lens_cpu=None,
                 extend_seq_lens_cpu=None, spec_info=None, attn_attend_prefix_cache=None, max_chunk_capacity=131072,
                 **others):
        self.forward_mode = forward_mode
        self.batch_size = batch_size
        self.input_ids = input_ids
        self.req_pool_indices = req_pool_indices
        self.seq_lens = seq_lens
        self.out_cache_loc = out_cache_loc
        self.seq_lens_sum = seq_lens_sum
        self.seq_lens_cpu = seq_lens_cpu
        self.positions = positions
        self.extend_num_tokens = extend_num_tokens
        self.extend_seq_lens = extend_seq_lens
        self.extend_prefix_lens = extend_prefix_lens
        self.extend_start_loc = extend_start_loc
        self.extend_prefix_lens_cpu = extend_prefix_lens_cpu
        self.extend_seq_lens_cpu = extend_seq_lens_cpu
        self.spec_info = spec_info
        self.attn_attend_prefix_cache = attn_attend_prefix_cache
        self.mha_return_lse = None
        # ForwardBatchDeepSeekMHAMixin's chunked prefix: the chunk being
        # attended to and the keys of a request in each chunk.
        self.num_prefix_chunks = None
        self.prefix_chunk_idx = None
        self.prefix_chunk_len = None
        self.attn_dcp_metadata = None
        self.forward_metadata_ready = False
        self._max_chunk_capacity = max_chunk_capacity
        self.__dict__.update(others)

    def get_max_chunk_capacity(self):
        return self._max_chunk_capacity

    def set_prefix_chunk_idx(self, idx):
        self.prefix_chunk_idx = idx

    def set_attn_attend_prefix_cache(self, attn_attend_prefix_cache):
        self.attn_attend_prefix_cache = attn_attend_prefix_cache

    def prepare_chunked_prefix_cache_info(self, device=None):
        """The chunk length and count of the prefixes (sglang's, on the
        host's lengths: get_max_chunk_capacity() // batch_size keys of each
        request a chunk)."""
        if not any(self.extend_prefix_lens_cpu or ()):
            self.num_prefix_chunks = 0
            return
        self.prefix_chunk_idx = -1
        self.prefix_chunk_len = self.get_max_chunk_capacity() // self.batch_size
        self.num_prefix_chunks = -(-max(self.extend_prefix_lens_cpu) // self.prefix_chunk_len)


# The forward context (model_executor/forward_context.py): where
# RadixAttention finds the backend of the current forward.
_CONTEXT = {"attn_backend": None}


class ForwardContext:
    def __init__(self, attn_backend):
        self.attn_backend = attn_backend


@contextlib.contextmanager
def forward_context(ctx):
    old = _CONTEXT["attn_backend"]
    _CONTEXT["attn_backend"] = ctx.attn_backend
    try:
        yield ctx
    finally:
        _CONTEXT["attn_backend"] = old


def get_attn_backend():
    return _CONTEXT["attn_backend"]


class RadixAttention:
    """sglang's RadixAttention layer, as attention backends read it."""

    def __init__(self, num_heads, head_dim, scaling, num_kv_heads, layer_id, logit_cap=0.0, v_head_dim=-1,
                 sliding_window_size=-1, is_cross_attention=False, prefix=""):
        self.tp_q_head_num = num_heads
        self.tp_k_head_num = num_kv_heads
        self.tp_v_head_num = num_kv_heads
        self.head_dim = head_dim
        self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.scaling = scaling
        self.layer_id = layer_id
        self.logit_cap = logit_cap if logit_cap is not None and logit_cap > 0 else 0.0
        self.sliding_window_size = sliding_window_size or -1
        self.is_cross_attention = is_cross_attention
        self.k_scale = None
        self.v_scale = None
        self.k_scale_float = None
        self.v_scale_float = None
        self.attn_type = None

    def forward(self, q, k, v, forward_batch, save_kv_cache=True, **kwargs):
        if k is not None:
            assert v is not None
            if "k_rope" not in kwargs:
                k = k.view(-1, self.tp_k_head_num, self.qk_head_dim)
                v = v.view(-1, self.tp_v_head_num, self.v_head_dim)
            else:
                k = k.view(-1, self.tp_k_head_num, self.v_head_dim)
        return get_attn_backend().forward(q, k, v, self, forward_batch, save_kv_cache, **kwargs)

    __call__ = forward


class ReqToTokenPool:
    """sglang's ReqToTokenPool: req_to_token[request, position] is the KV
    slot of the request's token."""

    def __init__(self, size, max_context_len, device, enable_memory_saver=False):
        torch = _t()
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=device)
        self.free_slots = list(range(size))

    def alloc(self, need_size):
        if need_size > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        return out

    def free(self, free_index):
        self.free_slots.extend([free_index] if isinstance(free_index, int) else list(free_index))


class MLATokenToKVPool:
    """sglang's MLATokenToKVPool: the latent cache of every layer."""

    def __init__(self, size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num, device,
                 enable_memory_saver=False, start_layer=None, end_layer=None):
        torch = _t()
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.store_dtype = dtype
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        self.layer_num = layer_num
        self.device = device
        self.start_layer = start_layer or 0
        self.end_layer = end_layer or layer_num - 1
        self.layer_transfer_counter = None
        # The padded slot 0 is used for writing dummy outputs from padded tokens.
        self.kv_buffer = [torch.zeros((size + page_size, 1, self.kv_cache_dim), dtype=dtype, device=device)
                          for _ in range(layer_num)]

    def get_key_buffer(self, layer_id):
        return self.kv_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id):
        return self.kv_buffer[layer_id - self.start_layer][..., :self.kv_lora_rank]

    def get_kv_buffer(self, layer_id):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        if cache_k.dtype != self.dtype:
            cache_k = cache_k.to(self.dtype)
        self.kv_buffer[layer.layer_id - self.start_layer][loc] = cache_k.view(-1, 1, self.kv_cache_dim)

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        buf = self.kv_buffer[layer.layer_id - self.start_layer]
        n = loc.shape[0]
        buf[loc, :, :self.kv_lora_rank] = cache_k_nope.reshape(n, 1, self.kv_lora_rank).to(self.dtype)
        buf[loc, :, self.kv_lora_rank:] = cache_k_rope.reshape(n, 1, self.qk_rope_head_dim).to(self.dtype)

    def get_mla_kv_buffer(self, layer, loc, dst_dtype=None):
        buf = self.get_key_buffer(layer.layer_id)[loc]
        dst_dtype = dst_dtype or self.dtype
        return buf[..., :self.kv_lora_rank].to(dst_dtype), buf[..., self.kv_lora_rank:].to(dst_dtype)


class ModelConfig:
    """The model_config fields MLA backends read (DeepSeek-V3's by
    default)."""

    def __init__(self, context_len=4096, num_attention_heads=128, kv_lora_rank=512, qk_nope_head_dim=128,
                 qk_rope_head_dim=64, v_head_dim=128, num_hidden_layers=61, scaling=None):
        self.context_len = context_len
        self.num_attention_heads = num_attention_heads
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.num_hidden_layers = num_hidden_layers
        self.scaling = scaling if scaling is not None else (qk_nope_head_dim + qk_rope_head_dim) ** -0.5
        self.attention_arch = "MLA"
        self.is_encoder_decoder = False


class ServerArgs:
    def __init__(self, attention_backend="attnplug", page_size=1, speculative_num_draft_tokens=None,
                 kv_cache_dtype="auto", **others):
        self.attention_backend = attention_backend
        self.prefill_attention_backend = attention_backend
        self.decode_attention_backend = attention_backend
        self.page_size = page_size
        self.speculative_num_draft_tokens = speculative_num_draft_tokens
        self.speculative_algorithm = None
        self.kv_cache_dtype = kv_cache_dtype
        self.disable_chunked_prefix_cache = False
        self.enable_deterministic_inference = False
        self.__dict__.update(others)


class ModelRunner:
    """sglang's ModelRunner, as attention backends read it. make() builds
    one for a DeepSeek-like model: heads (per rank), layers, page size,
    context length, the pools sized for max_requests of max_tokens."""

    def __init__(self, model_config, server_args, device, page_size, req_to_token_pool, token_to_kv_pool,
                 dtype=None, kv_cache_dtype=None, tp_size=1, gpu_id=0):
        torch = _t()
        self.model_config = model_config
        self.server_args = server_args
        self.device = device
        self.gpu_id = gpu_id
        self.page_size = page_size
        self.dtype = dtype or torch.bfloat16
        self.kv_cache_dtype = kv_cache_dtype or torch.bfloat16
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool
        self.max_total_num_tokens = int(token_to_kv_pool.size)
        self.tp_size = tp_size
        self.attn_tp_size = tp_size
        self.use_mla_backend = True
        self.is_draft_worker = False
        self.spec_algorithm = None
        self.attn_backend = None

    @classmethod
    def make(cls, heads=16, layers=61, page_size=64, context_len=4096, max_requests=64, max_tokens=None,
             device="cuda", scaling=0.1352337788608801, row_width=None, kv_dtype=None):
        """row_width: the page table's row (req_to_token's second
        dimension; default context_len + 4, as sglang sizes it); kv_dtype:
        the pool's torch dtype (default bfloat16)."""
        torch = _t()
        kv_dtype = kv_dtype or torch.bfloat16
        max_tokens = max_tokens or max_requests * context_len
        max_tokens = -(-max_tokens // page_size) * page_size
        cfg = ModelConfig(context_len=context_len, num_attention_heads=heads, num_hidden_layers=layers,
                          scaling=scaling)
        rtp = ReqToTokenPool(max_requests + 1, row_width or context_len + 4, device)
        kv = MLATokenToKVPool(max_tokens, page_size, kv_dtype, cfg.kv_lora_rank, cfg.qk_rope_head_dim,
                              layers, device)
        return cls(cfg, ServerArgs(page_size=page_size), device, page_size, rtp, kv, kv_cache_dtype=kv_dtype)


class KVIndexTranslator:
    """sglang's KVIndexTranslator as a backend sees it: is_translating
    (true under --enable-unified-memory: req_to_token holds virtual token
    ids), and bind_and_verify_backends, which sets each backend's
    kv_index_translator."""

    def __init__(self, is_translating=False):
        self.is_translating = is_translating

    def bind_and_verify_backends(self, backends):
        for b in backends:
            b.kv_index_translator = self


class PagedAllocator:
    """Hands out KV slots a page at a time, as sglang's paged allocator: a
    request's tokens fill its last page before a new one is taken; pages
    come in a shuffled order (page 0 is the padding slot's, never given)."""

    def __init__(self, num_pages, page_size, seed=0):
        pages = list(range(1, num_pages))
        random.Random(seed).shuffle(pages)
        self.free = pages
        self.page_size = page_size

    def extend(self, last_slot, count):
        """count new slots after last_slot (None: a new request)."""
        out = []
        for _ in range(count):
            if last_slot is not None and (last_slot + 1) % self.page_size != 0:
                last_slot += 1
            else:
                if not self.free:
                    raise RuntimeError("out of KV pages")
                last_slot = self.free.pop() * self.page_size
            out.append(last_slot)
        return out


class DecodeLoop:
    """Requests in sglang's pools and the batches of their steps: start()
    puts their prefixes' latent KV (random, per layer) in the pool and
    their slots in req_to_token; decode_batch() and verify_batch() give the
    ForwardBatch of the next step, its new tokens' slots allocated as
    sglang allocates them; advance() makes the step's tokens part of the
    requests. Layers are RadixAttention layers of DeepSeek's absorbed MLA
    (attn_mqa: heads, 576, num_kv_heads 1, v_head_dim 512)."""

    def __init__(self, model_runner, seed=0):
        torch = _t()
        self.mr = model_runner
        self.cfg = model_runner.model_config
        self.device = model_runner.device
        heads = self.cfg.num_attention_heads // model_runner.tp_size
        dim = self.cfg.kv_lora_rank + self.cfg.qk_rope_head_dim
        self.layers = [RadixAttention(heads, dim, self.cfg.scaling, 1, i, v_head_dim=self.cfg.kv_lora_rank)
                       for i in range(self.cfg.num_hidden_layers)]
        self.mha_layers = [RadixAttention(heads, self.cfg.qk_nope_head_dim + self.cfg.qk_rope_head_dim,
                                          self.cfg.scaling, heads, i, v_head_dim=self.cfg.v_head_dim)
                           for i in range(self.cfg.num_hidden_layers)]
        pool = model_runner.token_to_kv_pool
        self.alloc = PagedAllocator((pool.size + pool.page_size) // pool.page_size, pool.page_size, seed)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.rpi = []
        self.lens = []
        self.last = []
        self.pending = None

    def randn(self, *shape, scale=1.0):
        torch = _t()
        return (torch.randn(*shape, generator=self.gen, device=self.device) * scale).to(torch.bfloat16)

    def start(self, prefix_lens):
        """Requests with these prefixes in the pool (every layer)."""
        torch = _t()
        rtp, pool = self.mr.req_to_token_pool, self.mr.token_to_kv_pool
        for n in prefix_lens:
            r = rtp.alloc(1)[0]
            slots = self.alloc.extend(None, n)
            rtp.req_to_token[r, :n] = torch.tensor(slots, dtype=torch.int32, device=self.device)
            loc = torch.tensor(slots, dtype=torch.int64, device=self.device)
            for layer in range(pool.layer_num):
                pool.kv_buffer[layer][loc] = self.randn(n, 1, pool.kv_cache_dim).to(pool.dtype)
            self.rpi.append(r)
            self.lens.append(n)
            self.last.append(slots[-1] if slots else None)

    def _new_slots(self, count):
        torch = _t()
        rtp = self.mr.req_to_token_pool
        locs = []
        for i, r in enumerate(self.rpi):
            s = self.alloc.extend(self.last[i], count)
            rtp.req_to_token[r, self.lens[i]:self.lens[i] + count] = torch.tensor(s, dtype=torch.int32,
                                                                                   device=self.device)
            locs.extend(s)
            self.last[i] = s[-1]
        return torch.tensor(locs, dtype=torch.int64, device=self.device)

    def decode_batch(self):
        """The DECODE ForwardBatch of the next step: one new token a request
        (seq_lens count it, as sglang's do)."""
        torch = _t()
        bs = len(self.rpi)
        loc = self._new_slots(1)
        lens = [n + 1 for n in self.lens]
        self.pending = 1
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=bs,
            input_ids=torch.zeros(bs, dtype=torch.int64, device=self.device),
            req_pool_indices=torch.tensor(self.rpi, dtype=torch.int64, device=self.device),
            seq_lens=torch.tensor(lens, dtype=torch.int64, device=self.device), out_cache_loc=loc,
            seq_lens_sum=sum(lens), seq_lens_cpu=torch.tensor(lens, dtype=torch.int64),
            positions=torch.tensor(self.lens, dtype=torch.int64, device=self.device))

    def verify_batch(self, n):
        """The TARGET_VERIFY ForwardBatch of n draft tokens a request
        (seq_lens the prefixes, without the drafts, as sglang's)."""
        loc = self._new_slots(n)
        self.pending = n
        return self._unextended(ForwardMode.TARGET_VERIFY, n, loc, [p for n0 in self.lens for p in range(n0, n0 + n)],
                                EagleVerifyInput(n))

    def _unextended(self, mode, n, loc, positions, spec_info):
        """A batch of n query tokens a request whose seq_lens are the
        requests' lengths without them (a verify, a draft)."""
        torch = _t()
        bs = len(self.rpi)
        return ForwardBatch(
            forward_mode=mode, batch_size=bs, input_ids=torch.zeros(bs * n, dtype=torch.int64, device=self.device),
            req_pool_indices=torch.tensor(self.rpi, dtype=torch.int64, device=self.device),
            seq_lens=torch.tensor(self.lens, dtype=torch.int64, device=self.device), out_cache_loc=loc,
            seq_lens_sum=sum(self.lens), seq_lens_cpu=torch.tensor(self.lens, dtype=torch.int64),
            positions=torch.tensor(positions, dtype=torch.int64, device=self.device), spec_info=spec_info)

    def draft_batch(self, steps):
        """The DECODE ForwardBatch of a chain draft (EAGLE's, topk 1) of
        steps tokens a request, as EagleWorker._draft_preprocess_decode
        makes it: the drafts' slots follow each request's keys in
        req_to_token (assign_draft_cache_locs), out_cache_loc holds them
        request by request, seq_lens and positions are the requests'
        lengths without them, spec_info an EagleDraftInput. advance()
        keeps the drafts (as if all were accepted)."""
        loc = self._new_slots(steps)
        self.pending = steps
        return self._unextended(ForwardMode.DECODE, 1, loc, self.lens, EagleDraftInput())

    def draft_forward(self, draft_backend, fb, inputs, steps):
        """The draft steps of fb (draft_batch(steps)) as
        EagleWorker.draft_forward runs them after the draft backend's
        metadata call: step i (of steps - 1) writes the drafts' slots of
        column i, moves positions on and runs the layers on
        draft_backend.attn_backends[i]; inputs[i] are step i's (one set a
        layer). Returns each step's outputs; fb's out_cache_loc and
        positions are restored."""
        bs = int(fb.batch_size)
        loc, pos = fb.out_cache_loc, fb.positions.clone()
        per_step = loc.view(bs, steps).t()
        outs = []
        try:
            for i in range(steps - 1):
                fb.out_cache_loc = per_step[i].contiguous()
                fb.positions.add_(1)
                outs.append(self.forward(draft_backend.attn_backends[i], fb, inputs[i]))
        finally:
            fb.out_cache_loc = loc
            fb.positions.copy_(pos)
        return outs

    def extend_batch(self, new_lens):
        """The EXTEND ForwardBatch of new_lens[i] new tokens for request i
        (a prefill after start(), whose prefixes are the requests')."""
        torch = _t()
        bs = len(self.rpi)
        locs = []
        rtp = self.mr.req_to_token_pool
        for i, (r, m) in enumerate(zip(self.rpi, new_lens)):
            s = self.alloc.extend(self.last[i], m)
            rtp.req_to_token[r, self.lens[i]:self.lens[i] + m] = torch.tensor(s, dtype=torch.int32, device=self.device)
            locs.extend(s)
            self.last[i] = s[-1]
        seq = [n + m for n, m in zip(self.lens, new_lens)]
        self.pending = list(new_lens)
        return ForwardBatch(
            forward_mode=ForwardMode.EXTEND, batch_size=bs,
            input_ids=torch.zeros(sum(new_lens), dtype=torch.int64, device=self.device),
            req_pool_indices=torch.tensor(self.rpi, dtype=torch.int64, device=self.device),
            seq_lens=torch.tensor(seq, dtype=torch.int64, device=self.device),
            out_cache_loc=torch.tensor(locs, dtype=torch.int64, device=self.device),
            seq_lens_sum=sum(seq), seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            extend_num_tokens=sum(new_lens),
            extend_seq_lens=torch.tensor(new_lens, dtype=torch.int32, device=self.device),
            extend_prefix_lens=torch.tensor(self.lens, dtype=torch.int32, device=self.device),
            extend_prefix_lens_cpu=list(self.lens), extend_seq_lens_cpu=list(new_lens))

    def advance(self):
        """The tokens of the last batch become part of the requests."""
        p = self.pending
        if isinstance(p, list):
            self.lens = [n + m for n, m in zip(self.lens, p)]
        else:
            self.lens = [n + p for n in self.lens]
        self.pending = None

    def refresh(self, inputs, rows):
        """New random values in the first rows of each of inputs (lists of
        a layer's inputs, per step), the rest zero: the next replay's."""
        for layer in inputs:
            for t, fresh in zip(layer, self.inputs(rows)):
                t.zero_()
                t[:rows].copy_(fresh)

    def inputs(self, tokens):
        """Random inputs of one layer: q nope [tokens, heads, 512], q rope
        [tokens, heads, 64], the new tokens' k nope [tokens, 1, 512] and k
        rope [tokens, 1, 64]."""
        heads = self.layers[0].tp_q_head_num
        c = self.cfg
        s = 1.0 / math.sqrt(c.kv_lora_rank)
        return (self.randn(tokens, heads, c.kv_lora_rank, scale=s * 8), self.randn(tokens, heads, c.qk_rope_head_dim),
                self.randn(tokens, 1, c.kv_lora_rank), self.randn(tokens, 1, c.qk_rope_head_dim))

    def forward(self, backend, fb, inputs, layers=None, split=True):
        """One forward of the MLA layers (all, or the given ones) through
        backend, as DeepSeek calls its attn_mqa: the split form (q, k nope
        with q_rope, k_rope) or the 576-wide one. inputs[i] are layer i's
        (inputs()). Returns the outputs, [tokens, heads * 512] each."""
        torch = _t()
        outs = []
        with forward_context(ForwardContext(backend)):
            for i, layer in enumerate(layers if layers is not None else self.layers):
                q_nope, q_rope, k_nope, k_rope = inputs[i]
                if split:
                    # q nope as DeepSeek's absorbing bmm leaves it: [tokens,
                    # heads, 512], the transpose of a [heads, tokens, 512].
                    q_out = q_nope.transpose(0, 1).contiguous().transpose(0, 1)
                    outs.append(layer.forward(q_out, k_nope, k_nope, fb, q_rope=q_rope, k_rope=k_rope))
                else:
                    q = torch.cat([q_nope, q_rope], dim=-1)
                    k = torch.cat([k_nope, k_rope], dim=-1)
                    outs.append(layer.forward(q.reshape(q.shape[0], -1), k, k_nope, fb))
        return outs


class GraphRunner:
    """sglang's CudaGraphRunner for one batch size, in either protocol
    ("legacy": before PR #26735; "2026": after it): static input buffers,
    two warm-up runs and a capture of run(fb) (a function of the
    ForwardBatch built from the buffers), then replay(fb) copies a batch
    into the buffers (padding with the backend's fill value), calls the
    backend's replay preparation and replays the graph. The outputs of the
    captured run are the graph's (fixed addresses).

    dry (the default on a CPU device) makes the same calls without a
    graph: the capture is a third run, and a replay runs the captured
    function again (what the graph would replay) after the backend's
    replay preparation.

    draft_steps makes it sglang's EAGLEDraftCudaGraphRunner instead
    (eagle_draft_cuda_graph_runner.py): backend is a multi-step draft
    backend, the batch a chain draft's DECODE (DecodeLoop.draft_batch) with
    draft_steps slots a request; the legacy protocol's calls are the
    container's (init_forward_metadata_capture_cuda_graph(fb),
    init_forward_metadata_replay_cuda_graph(fb, bs)), and the padding
    length its first step's fill value."""

    def __init__(self, backend, bs, mode=ForwardMode.DECODE, q=1, protocol="2026", device="cuda", dry=None,
                 draft_steps=None):
        torch = _t()
        self.backend = backend
        self.bs, self.mode, self.q, self.protocol = bs, mode, q, protocol
        self.dry = (str(device) == "cpu") if dry is None else dry
        self.run_once = None
        self.draft_steps = draft_steps
        n = bs * q
        first = backend.attn_backends[0] if draft_steps else backend
        self.fill = first.get_cuda_graph_seq_len_fill_value()
        self.req_pool_indices = torch.zeros(bs, dtype=torch.int64, device=device)
        self.seq_lens = torch.full((bs,), self.fill, dtype=torch.int64, device=device)
        self.seq_lens_cpu = torch.full((bs,), self.fill, dtype=torch.int64)
        self.out_cache_loc = torch.zeros(n * (draft_steps or 1), dtype=torch.int64, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.graph = None
        self.outputs = None

    def static_batch(self):
        spec = EagleVerifyInput(self.q) if self.mode.is_target_verify() else None
        if self.draft_steps:
            spec = EagleDraftInput()
        return ForwardBatch(forward_mode=self.mode, batch_size=self.bs, input_ids=self.input_ids,
                            req_pool_indices=self.req_pool_indices, seq_lens=self.seq_lens,
                            out_cache_loc=self.out_cache_loc, seq_lens_sum=int(self.seq_lens_cpu.sum()),
                            seq_lens_cpu=self.seq_lens_cpu, positions=self.positions, spec_info=spec)

    def capture(self, run):
        """Captures run(fb) as sglang's capture_one_batch_size does."""
        torch = _t()
        b = self.backend
        fb = self.static_batch()
        self._run = run
        if self.protocol == "legacy" and self.draft_steps:
            b.init_forward_metadata_capture_cuda_graph(fb)

            def run_once():
                return run(fb)
        elif self.protocol == "legacy":
            b.init_forward_metadata_capture_cuda_graph(self.bs, self.bs * self.q, self.req_pool_indices,
                                                       self.seq_lens, None, self.mode, fb.spec_info)

            def run_once():
                return run(fb)
        else:
            b.init_forward_metadata_out_graph(fb, in_capture=True)

            def run_once():
                b.init_forward_metadata_in_graph(fb)
                return run(fb)

        self.run_once = run_once
        # (sglang's draft runner calls the hook where the backend has it.)
        warmed = getattr(b, "on_after_cuda_graph_warmup", None) or (lambda: None)
        if self.dry:
            for _ in range(2):
                run_once()
                if self.protocol != "legacy":
                    warmed()
            self.outputs = run_once()
            return self.outputs
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                torch.cuda.synchronize()
                run_once()
                if self.protocol != "legacy":
                    warmed()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            self.outputs = run_once()
        torch.cuda.synchronize()
        return self.outputs

    def replay(self, fb):
        """Replays the graph for fb (at most bs requests of the captured
        mode): its tensors copied into the buffers first."""
        raw = int(fb.batch_size)
        n = raw * self.q * (self.draft_steps or 1)
        if raw < self.bs:
            self.seq_lens.fill_(self.fill)
            self.seq_lens_cpu.fill_(self.fill)
            self.req_pool_indices.zero_()
            self.out_cache_loc.zero_()
        self.req_pool_indices[:raw].copy_(fb.req_pool_indices)
        self.seq_lens[:raw].copy_(fb.seq_lens)
        self.seq_lens_cpu[:raw].copy_(fb.seq_lens_cpu)
        self.out_cache_loc[:n].copy_(fb.out_cache_loc)
        if fb.positions is not None:
            self.positions[:raw * self.q].copy_(fb.positions)
        view = self.static_batch()
        if self.protocol == "legacy" and self.draft_steps:
            self.backend.init_forward_metadata_replay_cuda_graph(view, self.bs)
        elif self.protocol == "legacy":
            self.backend.init_forward_metadata_replay_cuda_graph(
                self.bs, self.req_pool_indices, self.seq_lens, int(self.seq_lens_cpu.sum()), None, self.mode,
                view.spec_info, self.seq_lens_cpu)
        else:
            self.backend.init_forward_metadata_out_graph(view)
        if self.dry:
            # What the graph would replay: the recorded preparation and layers.
            if self.protocol != "legacy":
                self.backend.init_forward_metadata_in_graph(view)
            outs = self._run(view)
            for o, n in zip(self.outputs, outs):
                o.copy_(n)
            return self.outputs
        self.graph.replay()
        return self.outputs
