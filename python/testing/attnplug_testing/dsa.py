"""Stand-ins of sglang's DeepSeek sparse attention (DSA: DeepSeek-V3.2,
GLM-5) as an attention backend meets it, for tests in a process without
sglang, followed at sgl-project/sglang's
python/sglang/srt/layers/attention/dsa_backend.py
0034a3803b33f64633574e5ee2a766e76ecc9b10, dsa/dsa_indexer.py
00d38808c8e941737ed0b6122faf54e1cc56c69a, dsa/dsa_indexer_metadata.py
17b671636231165f1254e5362e2b418029c93b35 and dsa/dsa_topk_backend.py
05b96689d4d12c8d0370edcfb81c6cbb8f0b82fc (SGLANG_FOLLOWED), with their
names:

- DSATokenToKVPool: the latent pool of page size 64, bf16 rows of 576, or
  DeepSeek-V3.2's FP8 rows of 656 bytes (512 e4m3, 4 float32 scales, one
  per 128 values, amax / 448, and the 64 rope values in bf16) stored as
  uint8 and viewed as float8_e4m3fn by get_key_buffer; set_mla_kv_buffer
  quantises; dsa_kv_cache_store_fp8, kv_cache_dim. The indexer's key cache
  is reduced to one float a slot (index_k), which is all Indexer reads.
- TopkTransformMethod, DSAIndexerMetadata (get_seqlens_int32,
  get_page_table_64, get_page_table_1, get_seqlens_expanded,
  topk_transform, force_unfused_topk) and Indexer: the top-k of each query
  token over the keys it sees, in the index space of the metadata (the
  pool's slots with the fused top-k, rows of the batch's ragged keys for
  RAGGED, positions in the request unfused), -1 past its keys.
- TorchDSABackend: sglang's DeepseekSparseAttnBackend in torch (the
  tests' fallback and the indexer's metadata): its DSAMetadata of a batch
  (page_table_1, cache and expanded lengths, page_table_1_flattened,
  topk_indices_offset), set_dsa_prefill_impl's use_mha, the graph hooks of
  both protocols over buffers of fixed address, get_topk_transform_method,
  get_indexer_metadata, and forward_decode/forward_extend as sparse
  attention (and MHA for use_mha) in fp32; TorchDSAMultiStepBackend,
  sglang's DeepseekSparseAttnMultiStepBackend of a draft's steps.
- dsa_runner() and DSALoop: a stand-in ModelRunner of DeepSeek-V3.2
  (index_topk 2048, page size 64) and a decode loop whose forward runs the
  indexer and then each layer as DeepSeek's model does under a backend
  name outside FORWARD_ABSORB_CORE_ATTENTION_BACKENDS (q and k 576 wide,
  topk_indices), or in the split form.

Test code: never installed.
"""

import enum
import os
import types

import torch

from attnplug_testing import standins as st

#: What these stand-ins follow, file by file of sglang.
SGLANG_FOLLOWED = {
    "layers/attention/dsa_backend.py": "0034a3803b33f64633574e5ee2a766e76ecc9b10",
    "layers/attention/dsa/dsa_indexer.py": "00d38808c8e941737ed0b6122faf54e1cc56c69a",
    "layers/attention/dsa/dsa_indexer_metadata.py": "17b671636231165f1254e5362e2b418029c93b35",
    "layers/attention/dsa/dsa_topk_backend.py": "05b96689d4d12c8d0370edcfb81c6cbb8f0b82fc",
    "layers/attention/dsa/quant_k_cache.py": "FlashMLA's FP8 KV layout (656 bytes a token)",
}

INDEX_TOPK = 2048
PAGE_SIZE = 64
ROW_BYTES = 512 + 4 * 4 + 64 * 2  # DeepSeek-V3.2's FP8 latent row
_FP8 = getattr(torch, "float8_e4m3fn", None)


class TopkTransformMethod(enum.IntEnum):
    PAGED = enum.auto()
    RAGGED = enum.auto()


# ---------------------------------------------------------------- the pool


def quantize_rows(nope, rope):
    """FlashMLA's FP8 rows (uint8 [n, 656]) of nope [n, 512] and rope [n,
    64]: e4m3 values of nope / scale, each scale amax / 448 of its 128
    values (as float32), then rope in bf16."""
    n = nope.shape[0]
    x = nope.float().reshape(n, 4, 128)
    scale = x.abs().amax(-1) / 448.0
    q = torch.where(scale[..., None] > 0, x / scale.clamp(min=1e-30)[..., None], torch.zeros_like(x))
    out = torch.empty(n, ROW_BYTES, dtype=torch.uint8, device=nope.device)
    out[:, :512] = q.reshape(n, 512).to(_FP8).view(torch.uint8)
    out[:, 512:528] = scale.contiguous().view(torch.uint8).reshape(n, 16)
    out[:, 528:] = rope.to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 128)
    return out


def dequantize_rows(rows):
    """float32 [n, 576] of FP8 rows (uint8 or float8_e4m3fn [n, 656])."""
    u8 = rows.reshape(-1, ROW_BYTES)
    if u8.dtype != torch.uint8:
        u8 = u8.view(torch.uint8)
    n = u8.shape[0]
    nope = u8[:, :512].contiguous().view(_FP8).float().reshape(n, 4, 128)
    scale = u8[:, 512:528].contiguous().view(torch.float32).reshape(n, 4, 1)
    rope = u8[:, 528:].contiguous().view(torch.bfloat16).float()
    return torch.cat([(nope * scale).reshape(n, 512), rope], dim=-1)


def latent_rows(cache):
    """float32 [slots, 576] of a layer's latent cache as get_key_buffer
    gives it (bf16 [slots, 1, 576], or FP8 rows [slots, 1, 656])."""
    if cache.shape[-1] == ROW_BYTES:
        return dequantize_rows(cache)
    return cache.reshape(cache.shape[0], -1).float()


class DSATokenToKVPool(st.MLATokenToKVPool):
    """sglang's DSATokenToKVPool: the latent cache of page size 64, bf16 or
    FlashMLA's FP8 rows, and (reduced) the indexer's keys."""

    def __init__(self, size, page_size, kv_lora_rank, dtype, qk_rope_head_dim, layer_num, device,
                 index_head_dim=128, enable_memory_saver=False, kv_cache_dim=None, start_layer=None,
                 end_layer=None):
        assert page_size == PAGE_SIZE, "DSA's pool has pages of 64 on CUDA"
        assert index_head_dim == 128
        super().__init__(size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num, device,
                         start_layer=start_layer, end_layer=end_layer)
        self.dsa_kv_cache_store_fp8 = dtype == _FP8
        self.kv_cache_dim = ROW_BYTES if self.dsa_kv_cache_store_fp8 else kv_lora_rank + qk_rope_head_dim
        if self.dsa_kv_cache_store_fp8:
            self.store_dtype = torch.uint8
            self.kv_buffer = [torch.zeros((size + page_size, 1, ROW_BYTES), dtype=torch.uint8, device=device)
                              for _ in range(layer_num)]
        self.index_k = [torch.zeros(size + page_size, dtype=torch.float32, device=device) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id):
        buf = self.kv_buffer[layer_id - self.start_layer]
        return buf.view(_FP8) if self.dsa_kv_cache_store_fp8 else buf

    def get_value_buffer(self, layer_id):
        return self.get_key_buffer(layer_id)[..., :self.kv_lora_rank]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        assert not self.dsa_kv_cache_store_fp8, "DSA's FP8 pool is written by set_mla_kv_buffer"
        super().set_kv_buffer(layer, loc, cache_k, cache_v)

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        if not self.dsa_kv_cache_store_fp8:
            return super().set_mla_kv_buffer(layer, loc, cache_k_nope, cache_k_rope)
        n = loc.shape[0]
        rows = quantize_rows(cache_k_nope.reshape(n, self.kv_lora_rank), cache_k_rope.reshape(n, self.qk_rope_head_dim))
        self.kv_buffer[layer.layer_id - self.start_layer][loc] = rows.view(n, 1, ROW_BYTES)

    def set_index_k(self, layer_id, loc, values):
        self.index_k[layer_id - self.start_layer][loc] = values.float()


def dsa_runner(heads=16, layers=2, context_len=163840, max_requests=8, max_tokens=32768, device="cuda",
               kv_dtype=None, scaling=0.1352337788608801):
    """A stand-in ModelRunner of DeepSeek-V3.2 (index_topk 2048, page size
    64) over a DSATokenToKVPool of max_tokens."""
    kv_dtype = kv_dtype or torch.bfloat16
    max_tokens = -(-max_tokens // PAGE_SIZE) * PAGE_SIZE
    cfg = st.ModelConfig(context_len=context_len, num_attention_heads=heads, num_hidden_layers=layers,
                         scaling=scaling)
    cfg.index_topk = INDEX_TOPK
    cfg.architectures = ["DeepseekV32ForCausalLM"]
    rtp = st.ReqToTokenPool(max_requests + 1, context_len + 4, device)
    kv = DSATokenToKVPool(max_tokens, PAGE_SIZE, cfg.kv_lora_rank, kv_dtype, cfg.qk_rope_head_dim, layers, device)
    mr = st.ModelRunner(cfg, st.ServerArgs(page_size=PAGE_SIZE, attention_backend="attnplug",
                                           dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="fa3",
                                           dsa_topk_backend="sgl-kernel"),
                        device, PAGE_SIZE, rtp, kv, kv_cache_dtype=kv_dtype)
    return mr


# ---------------------------------------------------------------- the indexer


class DSAIndexerMetadata:
    """sglang's DSAIndexerMetadata: what the indexer reads of a batch (the
    backend's DSAMetadata), and topk_transform, which puts the top-k in
    the backend's index space."""

    def __init__(self, attn_metadata, topk_transform_method, force_unfused_topk=False):
        self.attn_metadata = attn_metadata
        self.topk_transform_method = topk_transform_method
        self.force_unfused_topk = force_unfused_topk
        self.paged_mqa_schedule_metadata = None
        self.paged_mqa_ctx_lens_2d = None

    def get_seqlens_int32(self):
        return self.attn_metadata.cache_seqlens_int32

    def get_page_table_64(self):
        return self.attn_metadata.real_page_table

    def get_page_table_1(self):
        return self.attn_metadata.page_table_1

    def get_seqlens_expanded(self):
        return self.attn_metadata.dsa_seqlens_expanded

    def topk_transform(self, logits, topk, **kwargs):
        """The top-k positions of each row of logits [tokens, width] (row t
        sees the positions below its expanded length), -1 past them, as
        the index space of the metadata: positions (unfused), the pool's
        slots (fused, PAGED) or rows of the ragged keys (fused, RAGGED)."""
        md = self.attn_metadata
        tokens = logits.shape[0]
        lengths = md.dsa_seqlens_expanded[:tokens]
        width = logits.shape[1]
        pos = torch.arange(width, device=logits.device)
        masked = logits.masked_fill(pos[None, :] >= lengths[:, None], float("-inf"))
        k = min(topk, width)
        vals, idx = torch.topk(masked, k, dim=-1)
        idx = torch.where(torch.isinf(vals), -1, idx).to(torch.int32)
        if k < topk:
            idx = torch.cat([idx, idx.new_full((tokens, topk - k), -1)], dim=-1)
        if self.force_unfused_topk:
            return idx
        if self.topk_transform_method == TopkTransformMethod.RAGGED:
            off = md.topk_indices_offset[:tokens, None]
            return torch.where(idx >= 0, idx + off, -1).to(torch.int32)
        rows = md.token_rows[:tokens]
        return torch.where(idx >= 0, md.page_table_1[rows[:, None], idx.clamp(min=0).long()], -1).to(torch.int32)


class Indexer:
    """DeepSeek-V3.2's indexer as far as attention sees it: it asks the
    backend of the forward for its metadata (None: it is off, and returns
    none), stores the new tokens' keys, and returns the top-k of each query
    token, its logits q_t * k_slot (a float each: the stand-in of the FP8
    128-dim keys and DeepGEMM's logits)."""

    def __init__(self, layer_id, index_topk=INDEX_TOPK):
        self.layer_id = layer_id
        self.index_topk = index_topk

    def __call__(self, index_q, index_k, forward_batch, pool, return_indices=True):
        meta = st.get_attn_backend().get_indexer_metadata(self.layer_id, forward_batch)
        if meta is None:
            return None
        pool.set_index_k(self.layer_id, forward_batch.out_cache_loc, index_k)
        if not return_indices:
            return None
        md = meta.attn_metadata
        tokens = index_q.shape[0]
        table = md.page_table_1[md.token_rows[:tokens]].long()
        logits = index_q.float()[:, None] * pool.index_k[self.layer_id][table]
        return meta.topk_transform(logits, self.index_topk)


# ---------------------------------------------------------------- the backend


class TorchDSABackend:
    """sglang's DeepseekSparseAttnBackend in torch: its metadata of a batch
    (the indexer's), its use_mha, its graph hooks, and sparse attention
    over the top-k in its index space (fp32). device_sm is the device's
    compute capability as sglang's get_device_sm gives it (default: the
    GPU's, 90 on the CPU)."""

    def __init__(self, model_runner, skip_prefill=False, device_sm=None, speculative_step_id=None):
        cfg = model_runner.model_config
        # A draft step's decode reads the drafts 0 to speculative_step_id too.
        self.speculative_step_id = speculative_step_id
        self.model_runner = model_runner
        self.device = model_runner.device
        self.dsa_index_topk = int(cfg.index_topk)
        self.real_page_size = int(model_runner.page_size)
        self.kv_lora_rank = int(cfg.kv_lora_rank)
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.dsa_kv_cache_store_fp8 = bool(getattr(self.token_to_kv_pool, "dsa_kv_cache_store_fp8", False))
        args = model_runner.server_args
        self.dsa_prefill_impl = getattr(args, "dsa_prefill_backend", "flashmla_sparse")
        self.dsa_decode_impl = getattr(args, "dsa_decode_backend", "fa3")
        fuse = os.environ.get("SGLANG_DSA_FUSE_TOPK", "1").strip().lower() not in ("0", "false")
        self.use_fused_topk = fuse
        self.hisparse_coordinator = None
        self.speculative_num_draft_tokens = getattr(args, "speculative_num_draft_tokens", None) or 0
        if device_sm is None:
            device_sm = 90
            if str(self.device).startswith("cuda") and torch.cuda.is_available():
                major, minor = torch.cuda.get_device_capability()
                device_sm = major * 10 + minor
        self.device_sm = device_sm
        self.use_mha = False
        self.forward_metadata = None
        self.graph_metadata = {}
        self.graph_state = None
        self.calls = []

    # ------------------------------------------------------------ metadata

    def set_dsa_prefill_impl(self, forward_batch=None):
        """use_mha: an extend without speculation, on SM90 or SM100-class,
        whose longest request is within the dense threshold
        (SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD, default 2048), over
        a bf16 or FP8 pool, its lengths within the chunk capacity."""
        self.use_mha = False
        if forward_batch is None or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            return
        if not forward_batch.forward_mode.is_extend_without_speculative():
            return
        seq = [int(x) for x in forward_batch.seq_lens_cpu.tolist()]
        threshold = int(os.environ.get("SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "2048"))
        dtype_ok = self.token_to_kv_pool.dtype in (torch.bfloat16, _FP8)
        sm_ok = self.device_sm == 90 or 100 <= self.device_sm < 110
        self.use_mha = bool(sm_ok and max(seq) <= threshold and dtype_ok
                            and sum(seq) <= forward_batch.get_max_chunk_capacity())

    def get_topk_transform_method(self, forward_mode):
        if (self.dsa_kv_cache_store_fp8 and self.dsa_prefill_impl in ("flashmla_sparse", "flashmla_sparse_q8")
                and forward_mode == st.ForwardMode.EXTEND):
            return TopkTransformMethod.RAGGED
        return TopkTransformMethod.PAGED

    def get_indexer_metadata(self, layer_id, forward_batch):
        return DSAIndexerMetadata(self.forward_metadata, self.get_topk_transform_method(forward_batch.forward_mode),
                                  force_unfused_topk=not self.use_fused_topk)

    def _lens(self, fb):
        """(kv lengths [bs], query tokens a request (list), prefix lengths)
        of a batch, on the host."""
        mode = fb.forward_mode
        bs = int(fb.batch_size)
        seq = [int(x) for x in fb.seq_lens_cpu[:bs].tolist()]
        if mode.is_decode_or_idle():
            return [s + self._drafts() for s in seq], [1] * bs
        if mode.is_target_verify():
            n = int(fb.spec_info.draft_token_num)
            return [s + n for s in seq], [n] * bs
        return seq, [int(x) for x in fb.extend_seq_lens_cpu]

    def init_forward_metadata(self, forward_batch):
        self.calls.append("eager")
        fb = forward_batch
        self.set_dsa_prefill_impl(fb)
        kv, ql = self._lens(fb)
        dev = fb.seq_lens.device
        width = max(kv)
        md = types.SimpleNamespace(page_size=self.real_page_size)
        rpi = fb.req_pool_indices[:len(kv)].long()
        table = self.req_to_token[rpi, :width]
        expanded, rows = [], []
        per_token = fb.forward_mode.is_target_verify() or fb.forward_mode.is_draft_extend_v2()
        for i, (L, m) in enumerate(zip(kv, ql)):
            expanded.extend(range(L - m + 1, L + 1))
            rows.extend([i] * m)
        md.cache_seqlens_int32 = torch.tensor(kv, dtype=torch.int32, device=dev)
        md.cu_seqlens_k = torch.tensor([0] + list(_cumsum(kv)), dtype=torch.int32, device=dev)
        md.dsa_seqlens_expanded = torch.tensor(expanded, dtype=torch.int32, device=dev)
        md.dsa_cache_seqlens_int32 = md.dsa_seqlens_expanded.clamp(max=self.dsa_index_topk)
        md.dsa_extend_seq_lens_list = list(ql)
        rows_t = torch.tensor(rows, dtype=torch.int64, device=dev)
        if per_token:
            md.page_table_1 = table[rows_t].contiguous()
            md.token_rows = torch.arange(len(rows), device=dev)
        else:
            md.page_table_1 = table.contiguous()
            md.token_rows = rows_t
        md.real_page_table = md.page_table_1[:, ::self.real_page_size] // self.real_page_size
        method = self.get_topk_transform_method(fb.forward_mode)
        prefix = fb.forward_mode.is_extend() and any((fb.extend_prefix_lens_cpu or ()))
        md.page_table_1_flattened = None
        md.topk_indices_offset = None
        mha_fp8 = self.use_mha and self.dsa_kv_cache_store_fp8
        if prefix and (method == TopkTransformMethod.RAGGED or mha_fp8):
            md.page_table_1_flattened = torch.cat([table[i, :L] for i, L in enumerate(kv)]).to(torch.int32)
        if method == TopkTransformMethod.RAGGED:
            md.topk_indices_offset = md.cu_seqlens_k[:-1].long()[rows_t].to(torch.int32)
        fb.using_mha_one_shot_fp8_dequant = mha_fp8
        self.forward_metadata = md

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        dev = self.device
        width = self.req_to_token.shape[1]
        self.graph_state = types.SimpleNamespace(
            cache_seqlens=torch.ones(max_bs, dtype=torch.int32, device=dev),
            expanded=torch.ones(max_num_tokens, dtype=torch.int32, device=dev),
            page_table=torch.zeros(max_num_tokens, width, dtype=torch.int32, device=dev),
            rows=torch.arange(max_num_tokens, device=dev))
        self.graph_metadata = {}

    def _graph_md(self, bs, q, mode):
        """The DSAMetadata of a graph step of bs requests of q tokens: views
        of the graph buffers."""
        g = self.graph_state
        n = bs * q
        md = types.SimpleNamespace(page_size=self.real_page_size)
        md.cache_seqlens_int32 = g.cache_seqlens[:bs]
        md.dsa_seqlens_expanded = g.expanded[:n]
        md.dsa_cache_seqlens_int32 = g.expanded[:n]  # clamped at replay
        md.page_table_1 = g.page_table[:n]
        md.token_rows = g.rows[:n]
        md.real_page_table = md.page_table_1[:, ::self.real_page_size]
        md.dsa_extend_seq_lens_list = [q] * bs
        md.page_table_1_flattened = md.topk_indices_offset = None
        md.q = q
        return md

    def _drafts(self):
        """The draft tokens a draft step's decode reads beside the keys."""
        return 0 if self.speculative_step_id is None else self.speculative_step_id + 1

    def _graph_fill(self, md, bs, req_pool_indices, seq_lens, mode):
        """What a graph step's metadata holds for these lengths, written in
        place (the replay's work of sglang's backend)."""
        q = md.q
        kv = seq_lens[:bs].to(torch.int32) + (q if mode.is_target_verify() else self._drafts())
        md.cache_seqlens_int32.copy_(kv)
        steps = torch.arange(q, device=kv.device, dtype=torch.int32)
        expanded = (kv[:, None] - q + 1 + steps[None, :]).reshape(-1)
        md.dsa_seqlens_expanded.copy_(expanded)
        rows = req_pool_indices[:bs].long().repeat_interleave(q)
        md.page_table_1.copy_(self.req_to_token[rows])

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self.calls.append("capture" if in_capture else "replay")
        fb = forward_batch
        bs = int(fb.batch_size)
        q = int(fb.spec_info.draft_token_num) if fb.forward_mode.is_target_verify() else 1
        self.use_mha = False
        md = self.graph_metadata.get((bs, q))
        if md is None:
            md = self.graph_metadata[(bs, q)] = self._graph_md(bs, q, fb.forward_mode)
        self._graph_fill(md, bs, fb.req_pool_indices, fb.seq_lens, fb.forward_mode)
        self.forward_metadata = md

    def init_forward_metadata_in_graph(self, forward_batch):
        pass

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
                                                 forward_mode, spec_info):
        self.calls.append("capture")
        q = max(1, int(num_tokens) // max(1, int(bs)))
        self.use_mha = False
        md = self.graph_metadata[(int(bs), q)] = self._graph_md(int(bs), q, forward_mode)
        self._graph_fill(md, int(bs), req_pool_indices, seq_lens, forward_mode)
        self.forward_metadata = md

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                forward_mode, spec_info, seq_lens_cpu, out_cache_loc=None):
        self.calls.append("replay")
        q = int(spec_info.draft_token_num) if forward_mode.is_target_verify() else 1
        self.use_mha = False
        md = self.graph_metadata[(int(bs), q)]
        self._graph_fill(md, int(bs), req_pool_indices, seq_lens, forward_mode)
        self.forward_metadata = md

    def on_after_cuda_graph_warmup(self):
        pass

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    # ------------------------------------------------------------ forward

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       topk_indices=None, **kwargs):
        return self._sparse(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, topk_indices)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       topk_indices=None, **kwargs):
        if int(layer.head_dim) != self.kv_lora_rank + 64:
            return self._mha(q, k, v, layer, forward_batch)
        return self._sparse(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, topk_indices)

    def _mha(self, q, k, v, layer, fb):
        heads = layer.tp_q_head_num
        seq, new = self._lens(fb)
        q = q.reshape(-1, heads, layer.head_dim).float()
        out = torch.empty(q.shape[0], heads, layer.v_head_dim, dtype=torch.bfloat16, device=q.device)
        row = key = 0
        for L, m in zip(seq, new):
            s = torch.einsum("thd,khd->htk", q[row:row + m], k[key:key + L].float()) * layer.scaling
            limit = L - m + torch.arange(m, device=q.device)
            s = s.masked_fill(~(torch.arange(L, device=q.device)[None, :] <= limit[:, None])[None], float("-inf"))
            out[row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v[key:key + L].float()).to(out.dtype)
            row, key = row + m, key + L
        return out.reshape(-1, heads * layer.v_head_dim)

    def _sparse(self, q, k, layer, fb, save_kv_cache, q_rope, k_rope, topk):
        rank = self.kv_lora_rank
        heads = layer.tp_q_head_num
        pool = self.token_to_kv_pool
        if save_kv_cache and k is not None:
            if k_rope is None:
                k_rope, k = k[..., rank:], k[..., :rank]
            pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
        tokens = q.shape[0]
        if q_rope is not None:
            qq = torch.cat([q.reshape(tokens, heads, rank), q_rope.reshape(tokens, heads, -1)], dim=-1)
        else:
            qq = q.reshape(tokens, heads, -1)
        slots = self.slots(topk, fb, tokens)
        keys = latent_rows(pool.get_key_buffer(layer.layer_id))
        out = torch.zeros(tokens, heads, rank, dtype=torch.float32, device=q.device)
        for t in range(tokens):
            sl = slots[t]
            sl = sl[sl >= 0].long()
            if sl.numel() == 0:
                continue
            kt = keys[sl]
            s = torch.einsum("hd,kd->hk", qq[t].float(), kt) * layer.scaling
            out[t] = torch.softmax(s, -1) @ kt[:, :rank]
        return out.to(torch.bfloat16).reshape(tokens, heads * rank)

    def slots(self, topk, fb, tokens):
        """The pool's slots of topk, as this backend's forward translates it
        (transform_index_page_table_*, the ragged offsets)."""
        md = self.forward_metadata
        if topk.shape[0] < tokens:
            topk = torch.cat([topk, topk.new_full((tokens - topk.shape[0], topk.shape[1]), -1)])
        method = self.get_topk_transform_method(fb.forward_mode)
        if method == TopkTransformMethod.RAGGED:
            if not self.use_fused_topk:
                topk = torch.where(topk != -1, topk + md.topk_indices_offset[:, None], topk)
            keys = md.page_table_1_flattened
            if keys is None:
                keys = fb.out_cache_loc
            return torch.where(topk >= 0, keys[topk.clamp(min=0).long()].to(torch.int32), -1)
        if self.use_fused_topk:
            return topk
        table = md.page_table_1[md.token_rows[:tokens]]
        return torch.where(topk >= 0, table.gather(1, topk.clamp(min=0).long()), -1)


class TorchDSAMultiStepBackend:
    """sglang's DeepseekSparseAttnMultiStepBackend in torch: a
    TorchDSABackend a draft step (speculative_step_id i, reading the drafts
    0 to i), each getting every metadata call of the draft's batch."""

    def __init__(self, model_runner, topk, speculative_num_steps):
        self.topk, self.speculative_num_steps = topk, speculative_num_steps
        self.attn_backends = [TorchDSABackend(model_runner, speculative_step_id=i)
                              for i in range(speculative_num_steps - 1)]

    def init_forward_metadata(self, forward_batch):
        for b in self.attn_backends:
            b.init_forward_metadata(forward_batch)

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        for b in self.attn_backends:
            b.init_cuda_graph_state(max_bs, max_num_tokens)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        for b in self.attn_backends:
            b.init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)

    def init_forward_metadata_in_graph(self, forward_batch):
        pass

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        bs = int(forward_batch.batch_size)
        for b in self.attn_backends:
            b.init_forward_metadata_capture_cuda_graph(bs, bs * self.topk, forward_batch.req_pool_indices,
                                                       forward_batch.seq_lens, None, forward_batch.forward_mode,
                                                       forward_batch.spec_info)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch, bs):
        for b in self.attn_backends:
            b.init_forward_metadata_replay_cuda_graph(bs, forward_batch.req_pool_indices, forward_batch.seq_lens, -1,
                                                      None, forward_batch.forward_mode, forward_batch.spec_info,
                                                      forward_batch.seq_lens_cpu)

    def on_after_cuda_graph_warmup(self):
        pass


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


# ---------------------------------------------------------------- the model


class DSALoop(st.DecodeLoop):
    """A DecodeLoop of DeepSeek-V3.2: start() writes the prefixes through
    the pool's set_mla_kv_buffer (quantised where the pool is FP8) and
    their indexer keys; forward() runs each layer's indexer, then the layer
    as DeepSeek's model does (sglang's dispatch decides MLA or, for
    use_mha, MHA_ONE_SHOT, which forward_mha() runs)."""

    def __init__(self, model_runner, seed=0):
        super().__init__(model_runner, seed)
        for layer in self.layers:
            layer.use_dsa = True
        self.indexers = [Indexer(i, int(self.cfg.index_topk)) for i in range(len(self.layers))]
        self.topk = {}  # layer -> the topk_indices of the last forward
        self.forwards = []  # each forward's topk_indices by layer (a draft's steps: one a step)

    def start(self, prefix_lens):
        pool = self.mr.token_to_kv_pool
        rtp = self.mr.req_to_token_pool
        for n in prefix_lens:
            r = rtp.alloc(1)[0]
            slots = self.alloc.extend(None, n)
            if n:
                rtp.req_to_token[r, :n] = torch.tensor(slots, dtype=torch.int32, device=self.device)
                loc = torch.tensor(slots, dtype=torch.int64, device=self.device)
                for layer in self.layers:
                    pool.set_mla_kv_buffer(layer, loc, self.randn(n, 1, self.cfg.kv_lora_rank),
                                           self.randn(n, 1, self.cfg.qk_rope_head_dim))
                    pool.set_index_k(layer.layer_id, loc, torch.randn(n, generator=self.gen, device=self.device))
            self.rpi.append(r)
            self.lens.append(n)
            self.last.append(slots[-1] if slots else None)

    def forward(self, backend, fb, inputs, layers=None, split=False):
        """One forward of the MLA layers through backend with each layer's
        indexer first: the 576-wide call DeepSeek makes under a backend
        name outside FORWARD_ABSORB_CORE_ATTENTION_BACKENDS (split: the
        split one). The index query of a token is its q rope's first value,
        the index key of a new token its k nope's first."""
        outs = []
        pool = self.mr.token_to_kv_pool
        self.forwards.append({})
        with st.forward_context(st.ForwardContext(backend)):
            for i, layer in enumerate(layers if layers is not None else self.layers):
                q_nope, q_rope, k_nope, k_rope = inputs[i]
                topk = self.indexers[layer.layer_id](q_rope[:, 0, 0], k_nope[:, 0, 0], fb, pool)
                self.topk[layer.layer_id] = self.forwards[-1][layer.layer_id] = topk
                kw = {} if topk is None else {"topk_indices": topk}
                if split:
                    q_out = q_nope.transpose(0, 1).contiguous().transpose(0, 1)
                    outs.append(layer.forward(q_out, k_nope, k_nope, fb, q_rope=q_rope, k_rope=k_rope, **kw))
                else:
                    q = torch.cat([q_nope, q_rope], dim=-1)
                    k = torch.cat([k_nope, k_rope], dim=-1)
                    outs.append(layer.forward(q.reshape(q.shape[0], -1), k, k_nope, fb, **kw))
        return outs

    def forward_mha(self, backend, fb, layer_id, q, k, v, index_k):
        """An MHA layer of a short prefill (use_mha: MHA_ONE_SHOT) as
        DeepSeek runs it: the indexer stores the new tokens' keys and
        returns no top-k; the layer gets each request's keys whole."""
        pool = self.mr.token_to_kv_pool
        with st.forward_context(st.ForwardContext(backend)):
            got = self.indexers[layer_id](None, index_k, fb, pool, return_indices=False)
            assert got is None
            heads = q.shape[1]
            return self.mha_layers[layer_id].forward(q.reshape(q.shape[0], heads * q.shape[2]), k, v, fb,
                                                     save_kv_cache=False)


def reference(keys, slots, q, scale):
    """float64 sparse MLA: query token t over the slots slots[t] (>= 0) of
    keys [slots, 576] (float32 latent rows; values their first 512
    columns). q [tokens, heads, 576]."""
    out = torch.zeros(q.shape[0], q.shape[1], 512, dtype=torch.float64, device=q.device)
    for t in range(q.shape[0]):
        sl = slots[t]
        sl = sl[sl >= 0].long()
        kt = keys[sl].double()
        s = torch.einsum("hd,kd->hk", q[t].double(), kt) * scale
        out[t] = torch.softmax(s, -1) @ kt[:, :512]
    return out
