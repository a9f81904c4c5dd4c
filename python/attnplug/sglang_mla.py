"""attnplug.sglang_mla: the sglang attention backend for DeepSeek MLA whose
kernels are a plugin's (AttnplugMLABackend), and its multi-step draft
backend (AttnplugMLAMultiStepDraftBackend). attnplug.sglang_backend
registers them in sglang and exports them; attnplug.sglang_dsa extends
AttnplugMLABackend for DeepSeek sparse attention.

AttnplugMLABackend is a thin adapter, as sglang's own flashinfer_mla and
flashmla backends are: per forward batch it says what sglang knows of the
batch (the model's dims on this rank, the KV pool and page table, the
batch's mode, size and query tokens: a step) and gets the step's plan,
which attnplug serve makes (Client.plan_step: the plan request, its bound
on the lengths and its key are made once, in Go) and checks; per layer it
binds sglang's tensors and launches the plugin's kernels (attnplug.device).
It reads sglang's KV pool (``token_to_kv_pool.get_key_buffer``, the latent
cache of a layer, [slots, 1, 576], in bf16 or viewed as fp8_e4m3) and page
table (``req_to_token_pool.req_to_token`` by ``req_pool_indices``), and
writes new KV where sglang's MLA backends write it (``set_mla_kv_buffer``,
``set_kv_buffer``). What runs where: attnplug.sglang_backend's docstring,
and docs/python.md's table of every DeepSeek path.
"""

import logging
import os
import threading

from attnplug import _sglang
from attnplug import client as _client
from attnplug.device import _import_torch

__all__ = [
    "AttnplugMLABackend",
    "AttnplugMLAMultiStepDraftBackend",
    "BACKEND_NAME",
    "FallbackRefused",
    "PATHS",
]

log = logging.getLogger("attnplug.sglang_backend")

#: The name the backend registers under in sglang (--attention-backend attnplug).
BACKEND_NAME = "attnplug"
#: The variable naming the backend whose plugin runs the kernels (default fa3).
ENV_KERNEL_BACKEND = "ATTNPLUG_KERNEL_BACKEND"
DEFAULT_KERNEL_BACKEND = "fa3"
#: The variable that makes the backend strict: "1" refuses the fallback.
ENV_STRICT = "ATTNPLUG_STRICT"
#: The variable naming sglang's backend that is the fallback (default: the
#: kernel backend's name): for a kernel backend sglang has no backend of,
#: such as a vendor's.
ENV_FALLBACK_BACKEND = "ATTNPLUG_FALLBACK_BACKEND"

#: The paths stats() counts layers by: decode, target verify, absorbed-MLA
#: extend, a draft model's batches (decode and draft extend), MHA prefill
#: (MHA, MHA_ONE_SHOT and the new tokens of MHA_CHUNKED_KV) and the prefix
#: chunks of MHA_CHUNKED_KV.
PATHS = ("decode", "verify", "extend", "draft", "prefill", "chunked_prefix")

_LONE_DRAFT = ("a draft model's decode outside attnplug's multi-step draft backend (its spec_info holds the "
               "draft tokens, which this backend does not know)")

# The counters of stats() that are the launcher's (shared by a draft's
# steps), not a backend's own.
_LAUNCHER_STATS = frozenset(("plan_requests", "module_fetches", "route_changes", "module_loads", "images_loaded"))

# sglang's backend-specific calls the model makes on the attention backend
# that this class leaves to its fallback (the fallback runs those batches).
_FORWARDED = frozenset(("init_mha_chunk_metadata",))


class FallbackRefused(RuntimeError):
    """A layer the plugin's kernels could not run, raised by a strict
    backend (ATTNPLUG_STRICT=1, or strict=True) instead of running the
    fallback: path is one of PATHS, reason says why."""

    def __init__(self, path, reason):
        super().__init__("attnplug: the %s path would run the fallback: %s" % (path, reason))
        self.path = path
        self.reason = reason


_Base = _sglang.backend_base()


def _ints(v):
    if v is None:
        return None
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [int(x) for x in v]


def _capturing(torch):
    """Whether the current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _attention_tp_size(model_runner):
    for get in (_dp_attention_tp_size, _parallel_attn_tp_size):
        try:
            n = get()
            if n:
                return int(n)
        except Exception:
            pass
    return int(getattr(model_runner, "attn_tp_size", 0) or getattr(model_runner, "tp_size", 1) or 1)


def _dp_attention_tp_size():
    from sglang.srt.layers.dp_attention import get_attention_tp_size
    return get_attention_tp_size()


def _parallel_attn_tp_size():
    from sglang.srt.runtime_context import get_parallel
    return get_parallel().attn_tp_size


def _query_tokens(forward_batch, bs):
    """Query tokens a request of a decode (1) or target-verify batch."""
    if forward_batch.forward_mode.is_target_verify():
        spec = getattr(forward_batch, "spec_info", None)
        n = getattr(spec, "draft_token_num", None)
        if n:
            return int(n)
        ids = getattr(forward_batch, "input_ids", None)
        if ids is not None and bs:
            return int(ids.shape[0]) // bs
        pos = getattr(forward_batch, "positions", None)
        if pos is not None and bs:
            return int(pos.shape[0]) // bs
    return 1


def _mode_name(mode):
    """The wire's name of sglang's forward mode (its predicates decide for
    one that is no enum member)."""
    name = getattr(mode, "name", None)
    if name in _sglang.FORWARD_MODE_NAMES:
        return name
    for pred, n in (("is_target_verify", "TARGET_VERIFY"), ("is_draft_extend_v2", "DRAFT_EXTEND_V2"),
                    ("is_decode", "DECODE"), ("is_idle", "IDLE")):
        f = getattr(mode, pred, None)
        if f is not None and f():
            return n
    return "EXTEND"


class _Facts:
    """What the backend reads of sglang once, at construction: the model's
    attention dims on this rank, the KV pool and the page table, as a step
    names them (Client.plan_step)."""

    def __init__(self, model_runner, num_heads, torch):
        cfg = model_runner.model_config
        self.kv_lora_rank = int(cfg.kv_lora_rank)
        self.qk_rope_head_dim = int(cfg.qk_rope_head_dim)
        self.qk_nope_head_dim = int(getattr(cfg, "qk_nope_head_dim", 128))
        self.v_head_dim = int(getattr(cfg, "v_head_dim", 128))
        self.kv_cache_dim = self.kv_lora_rank + self.qk_rope_head_dim
        self.heads = int(num_heads or cfg.num_attention_heads // _attention_tp_size(model_runner))
        self.scaling = float(getattr(cfg, "scaling", (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5))
        self.index_topk = int(getattr(cfg, "index_topk", 0) or 0)
        self.context_len = int(cfg.context_len)
        self.page_size = int(getattr(model_runner, "page_size", 1) or 1)
        pool = model_runner.token_to_kv_pool
        self.pool = pool
        self.first_layer = int(getattr(pool, "start_layer", 0) or 0)
        self.slots = int(pool.get_key_buffer(self.first_layer).shape[0])
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.row_width = int(self.req_to_token.shape[1])
        self.max_tokens = int(getattr(model_runner, "max_total_num_tokens", 0) or getattr(pool, "size", 0) or self.slots)
        # The pool's dtype (sglang's kv_cache_dtype: an fp8 pool stores
        # bytes and hands a view of its fp8 dtype, as get_key_buffer does).
        dt = getattr(pool, "dtype", torch.bfloat16)
        fp8 = getattr(torch, "float8_e4m3fn", None)
        self.kv_dtype = {torch.bfloat16: "bf16", fp8: "fp8_e4m3"}.get(dt) if dt is not None else None
        self.pool_dtype = dt

    def unsupported(self, sparse=False):
        """Why the plugin's MLA kernels (sparse: the sparse ones) cannot
        read this pool, or None."""
        if self.kv_cache_dim != 576 or self.kv_lora_rank != 512:
            return "an MLA cache of %d (kv_lora_rank %d): the kernels read 576 (512 + 64)" % (self.kv_cache_dim, self.kv_lora_rank)
        if self.index_topk and not sparse:
            return ("DeepSeek sparse attention (index_topk %d): a dense MLA backend, where create_backend makes "
                    "AttnplugDSABackend" % self.index_topk)
        if self.kv_dtype is None:
            return "a KV pool of %s: the kernels read bf16 and fp8_e4m3" % self.pool_dtype
        if self.slots % self.page_size:
            return "a pool of %d slots, not a whole number of pages of %d" % (self.slots, self.page_size)
        return None

    def step(self, mode, method, batch):
        """The step of a batch (a dict as Client.plan_step takes it,
        without backend and device). An MLA step offers its queries split,
        as DeepSeek's layers pass them (q nope, q_rope): the plan takes
        them so where the kernel does (_Base._queries)."""
        return {
            "mode": mode, "method": method, "query_split": method == "MLA",
            "model": {"heads": self.heads, "kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim,
                      "qk_nope_head_dim": self.qk_nope_head_dim, "v_head_dim": self.v_head_dim,
                      "softmax_scale": self.scaling, "index_topk": self.index_topk},
            "pool": {"page_size": self.page_size, "slots": self.slots, "max_tokens": self.max_tokens,
                     "row_width": self.row_width, "context_len": self.context_len, "kv_dtype": self.kv_dtype or ""},
            "batch": batch,
        }


class _Tables:
    """The page table, lengths and query offsets an MLA step's launches
    read, in buffers of fixed address: kv_indptr [bs + 1], kv_indices [bs *
    room], seq_lens [bs], qo_indptr [bs + 1], and cols, the page starts of a
    row of req_to_token. A graph step's are views of the graph buffers
    (init_cuda_graph_state), an eager step's its own."""

    __slots__ = ("kv_indptr", "kv_indices", "seq_lens", "qo_indptr", "cols", "room")

    def __init__(self, torch, device, bs, room, page_size, base=None):
        i32 = torch.int32
        self.room = room
        if base is None:
            self.kv_indptr = torch.arange(0, (bs + 1) * room, room, dtype=i32, device=device)
            self.kv_indices = torch.zeros(bs * room, dtype=i32, device=device)
            self.seq_lens = torch.ones(bs, dtype=i32, device=device)
            self.qo_indptr = torch.zeros(bs + 1, dtype=i32, device=device)
            self.cols = torch.arange(room, dtype=torch.int64, device=device) * page_size
        else:
            self.kv_indptr, self.kv_indices = base.kv_indptr[:bs + 1], base.kv_indices[:bs * room]
            self.seq_lens, self.qo_indptr, self.cols = base.seq_lens[:bs], base.qo_indptr[:bs + 1], base.cols

    def tensors(self):
        return {"kv_indptr": self.kv_indptr, "kv_indices": self.kv_indices, "seq_lens": self.seq_lens,
                "qo_indptr": self.qo_indptr}


class _Forward:
    """What the current forward batch runs: its path, the plugin's prepared
    step (and its tables) or why the fallback runs it, whether
    init_forward_metadata_in_graph prepared the step, and which metadata
    call the fallback got ("eager", "graph", "legacy" or None)."""

    __slots__ = ("path", "kind", "prepared", "tables", "bs", "q", "q_lens", "why", "prepped", "first_layer", "fallback",
                 "bound", "space", "mha")

    def __init__(self, path, kind, bs=0, q=1, why=None):
        self.path, self.kind, self.bs, self.q, self.why = path, kind, bs, q, why
        self.prepared = self.tables = self.q_lens = self.bound = self.space = self.mha = None
        self.prepped = False
        self.first_layer = None
        self.fallback = None


class AttnplugMLABackend(_Base):
    """An sglang attention backend for DeepSeek MLA that runs the kernels of
    the plugin serving kernel_backend (default $ATTNPLUG_KERNEL_BACKEND,
    else fa3), asked of the ``attnplug serve`` at address (default
    $ATTNPLUG_ADDRESS, else serve's socket) or through client.

    model_runner is sglang's: its model_config (context_len,
    num_attention_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
    v_head_dim, scaling, index_topk), device, page_size,
    max_total_num_tokens, req_to_token_pool and token_to_kv_pool are read.
    fallback is the backend that runs what the plugin does not (default:
    sglang's own backend of $ATTNPLUG_FALLBACK_BACKEND, else of
    kernel_backend, from sglang's attention registry); it gets the metadata
    calls of the batches it runs. launcher
    (default: an attnplug.device.Launcher made at the first plan) plans and
    launches the plugin's kernels. strict (default $ATTNPLUG_STRICT == "1")
    raises FallbackRefused where a layer would run the fallback.
    speculative_step_id makes it step i of a multi-step draft backend (its
    DECODE batches are draft steps reading the drafts 0 to i), and
    launcher_owner another backend whose launcher it uses (both set by
    AttnplugMLAMultiStepDraftBackend).

    stats() counts, per path, the layers the plugin ran and those the
    fallback ran, with the last reason. Not safe for concurrent use, as
    sglang's backends."""

    # sglang's backend contract (main, 2026; _sglang.SGLANG_FOLLOWED), each
    # as it applies here:
    # - no path reads seq_lens_cpu or seq_lens_sum: MLA steps are planned
    #   for their shape, the lengths read on the device; the MHA paths read
    #   extend_*_cpu, which sglang keeps;
    needs_cpu_seq_lens = False
    # - eager extend metadata is per batch, not preallocated per request;
    extend_dummy_seqs_capped_by_req_pool = False
    # - no breakable-CUDA-graph capture of metadata: a replay prepares its
    #   step as any replay does;
    use_captured_forward_metadata_for_breakable_cuda_graph = False
    supports_ragged_verify_graph = False
    supports_full_cuda_graph_chunked_prefix = False
    # - the runner's KVIndexTranslator, bound at boot (None until then); a
    #   translating one (--enable-unified-memory) leaves req_to_token's ids
    #   virtual, which the plugin's page table cannot take: the fallback
    #   runs, counted;
    kv_index_translator = None
    reads_kv_index_table = False
    attn_backend_list = None
    # Whether its MLA layers are sparse (AttnplugDSABackend).
    _sparse = False

    def __init__(self, model_runner, skip_prefill=False, *, kernel_backend=None, address=None, client=None,
                 fallback=None, num_heads=None, timeout=5.0, launcher=None, strict=None, speculative_step_id=None,
                 launcher_owner=None):
        if _Base is not object:
            try:
                super().__init__()
            except TypeError:
                pass
        torch = _import_torch()
        self._torch = torch
        self.model_runner = model_runner
        self.skip_prefill = skip_prefill
        self.kernel_backend = kernel_backend or os.environ.get(ENV_KERNEL_BACKEND) or DEFAULT_KERNEL_BACKEND
        self.strict = (os.environ.get(ENV_STRICT) == "1") if strict is None else bool(strict)
        self.facts = _Facts(model_runner, num_heads, torch)
        self.device = torch.device(model_runner.device) if not isinstance(model_runner.device, torch.device) \
            else model_runner.device
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        # Pool refs, taken at construction as sglang's backends take them.
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.req_to_token = self.req_to_token_pool.req_to_token
        self.data_type = getattr(model_runner, "dtype", torch.bfloat16)
        self.kv_cache_dtype = getattr(model_runner, "kv_cache_dtype", None)
        self._address, self._client, self._timeout = address, client, timeout
        self._owns_client = False
        self._launcher = launcher
        self._launcher_error = None
        self._launcher_owner = launcher_owner
        # A step of a multi-step draft (AttnplugMLAMultiStepDraftBackend):
        # its decode reads the requests' keys and the draft tokens 0 to
        # speculative_step_id, and the container makes the fallback's
        # metadata calls.
        self.speculative_step_id = None if speculative_step_id is None else int(speculative_step_id)
        self._draft = None
        self._lock = threading.Lock()
        self._warned = set()
        self._down = False
        self._max_bs = 0
        self._graph_tables = {}  # (room, q) -> _Tables of init_cuda_graph_state's max_bs
        self._graph_paths = {}  # (bs, q) -> _Forward captured
        self._eager_tables = {}  # (bs, room) -> _Tables
        self._scratch = {}  # name -> a buffer every layer writes and none reads
        self._views = {}  # (name, shape) -> a view of a scratch buffer
        self._kv_views = {}  # layer id -> (the pool's buffer, its view as the plan binds it)
        self._fits = {}  # layer -> _layer_fits' answer (a layer's dims are set when it is made)
        self._counts = {p: {"plugin": 0, "fallback": 0, "last_reason": ""} for p in PATHS}
        self._extra = {"steps_prepared": 0, "refused_at_capture": 0, "fp8_layers": 0}
        self._fwd = _Forward("decode", "idle")
        self.fallback = fallback if fallback is not None else self._make_fallback()
        self.forward_metadata = None

    # ------------------------------------------------------------ set-up

    def _make_fallback(self):
        name = os.environ.get(ENV_FALLBACK_BACKEND) or self.kernel_backend
        try:
            from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        except Exception:
            return None
        if name not in ATTENTION_BACKENDS and os.environ.get(ENV_FALLBACK_BACKEND):
            log.warning("attnplug: %s=%s is not one of sglang's attention backends; the plugin's kernels run "
                        "every batch they can, and the others are refused", ENV_FALLBACK_BACKEND, name)
        if name in ATTENTION_BACKENDS and name != BACKEND_NAME:
            try:
                return ATTENTION_BACKENDS[name](self.model_runner)
            except Exception as exc:
                log.warning("attnplug: sglang's %s backend cannot be made here (%s: %s); the plugin's kernels run "
                            "every batch they can, and the others are refused", name, type(exc).__name__, exc)
        return None

    def __getattr__(self, name):
        # Only sglang's backend-specific calls of the batches the fallback
        # runs (the model's chunked-prefix preparation); anything else this
        # class lacks is an AttributeError, never the fallback's.
        fb = self.__dict__.get("fallback")
        if name in _FORWARDED and fb is not None:
            return getattr(fb, name)
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

    def stats(self):
        """The counters: per path (PATHS), the layers the plugin ran
        ("plugin"), those the fallback ran ("fallback") and the last reason
        a layer of it fell back; steps_prepared (batch shapes planned),
        refused_at_capture (CUDA-graph captures whose step the plugin has no
        plan for), fp8_layers (plugin layers over an FP8 cache), and the launcher's plan_requests,
        module_fetches, route_changes, module_loads (module sets taken) and images_loaded (images
        it loaded; one another Launcher of the process loaded is shared); plugin_layers and
        fallback_layers add up the paths."""
        out = {"paths": {p: dict(c) for p, c in self._counts.items()}}
        out.update(self._extra)
        out["plugin_layers"] = sum(c["plugin"] for c in self._counts.values())
        out["fallback_layers"] = sum(c["fallback"] for c in self._counts.values())
        lch = self._launcher
        if lch is not None:
            out.update(plan_requests=lch.source.stats["plan_requests"], module_fetches=lch.source.stats["module_fetches"],
                       route_changes=lch.source.stats["route_changes"], module_loads=lch.stats["module_loads"],
                       images_loaded=lch.stats["images_loaded"])
        return out

    @property
    def launcher(self):
        """The attnplug.device.Launcher (made at the first plan), or None
        when it cannot be made here."""
        return self._get_launcher()

    def close(self):
        """Stops following the server (the backend runs on, from its
        plans), and closes the client it made (not one it was given)."""
        if self._launcher is not None:
            self._launcher.close()
        if self._owns_client and self._client is not None:
            self._client.close()

    def _get_launcher(self):
        if self._launcher_owner is not None:
            return self._launcher_owner._get_launcher()
        if self._launcher is not None or self._launcher_error is not None:
            return self._launcher
        with self._lock:
            if self._launcher is None and self._launcher_error is None:
                try:
                    from attnplug.device import Launcher
                    cl = self._client
                    if cl is None:
                        cl = self._client = _client.Client(self._address, timeout=self._timeout)
                        self._owns_client = True
                    ordinal = self.device.index if self.device.type == "cuda" else None
                    self._launcher = Launcher(cl, self.kernel_backend, ordinal)
                except Exception as exc:
                    self._launcher_error = exc
                    self._warn(("launcher",), "attnplug: no launcher for %s's kernels here (%s: %s); the fallback "
                               "runs every batch", self.kernel_backend, type(exc).__name__, exc)
        return self._launcher

    def _warn(self, key, msg, *args):
        if key in self._warned or len(self._warned) > 256:
            return
        self._warned.add(key)
        log.warning(msg, *args)

    def shared_read_ends(self, fm):
        """Where this backend's reads of the scheduler's shared tensors
        (req_to_token, seq_lens, req_pool_indices) end: a decode or verify
        step copies them into its own buffers in
        init_forward_metadata_in_graph (IN_REPLAY); the other modes read
        them during the forward (UNKNOWN, sglang's conservative default)."""
        ends = _sglang.shared_read_ends()
        if ends is None:
            return None
        if fm.is_decode() or fm.is_target_verify():
            return ends.IN_REPLAY
        return ends.UNKNOWN

    def draft_extend_metadata_captured_in_graph(self):
        return False

    # ------------------------------------------------------------ plans

    def _why_not(self):
        """Why no layer of this backend can run the plugin's kernels, or
        None."""
        t = self.kv_index_translator
        if t is not None and getattr(t, "is_translating", False):
            return "the KV pool is unified (--enable-unified-memory): req_to_token holds virtual token ids"
        if self.device.type != "cuda" and self._launcher is None:
            return "the device is %s, not CUDA" % self.device.type
        return self.facts.unsupported(sparse=self._sparse)

    def _step(self, path, mode, method, batch, keep=True):
        """The Prepared plan of a step, or (None, why)."""
        why = self._why_not()
        if why is not None:
            return None, why
        lch = self._get_launcher()
        if lch is None:
            return None, "no launcher: %s" % self._launcher_error
        from attnplug.client import NoPlan, ServerError, ServerUnavailable
        try:
            p = lch.step(self.facts.step(mode, method, batch), keep=keep)
        except ServerUnavailable as exc:
            if not self._down:
                self._down = True
                log.warning("attnplug: the server is unreachable (%s); the fallback runs the batches no kept plan "
                            "answers until it is back", exc)
            return None, "the server is unreachable: %s" % exc
        except NoPlan as exc:
            return None, "no plan: %s" % exc
        except ServerError as exc:
            return None, "the server refused the step: %s" % exc
        except Exception as exc:  # a module that does not load, a plan that does not bind
            return None, "the plan failed here: %s: %s" % (type(exc).__name__, exc)
        if self._down:
            self._down = False
            log.warning("attnplug: the server answers again; the plugin's kernels run new batch shapes again")
        return p, None

    def _tables(self, prepared, bs, graph, q=1):
        """The step's buffers: a graph's are views of buffers of fixed
        address kept by the page table's room and the query tokens a
        request (its qo_indptr is written once, at capture: graphs of other
        query counts keep their own)."""
        room = int(prepared.pages_per_request)
        if graph:
            base = self._graph_tables.get((room, q))
            if base is None or self._max_bs < bs:
                self._max_bs = max(self._max_bs, bs)
                base = _Tables(self._torch, self.device, self._max_bs, room, self.facts.page_size)
                self._graph_tables[(room, q)] = base
            return _Tables(self._torch, self.device, bs, room, self.facts.page_size, base)
        key = (bs, room)
        t = self._eager_tables.get(key)
        if t is None:
            if len(self._eager_tables) > 64:
                self._eager_tables.clear()
            t = _Tables(self._torch, self.device, bs, room, self.facts.page_size)
            self._eager_tables[key] = t
        return t

    def _plan_mla(self, path, fb, bs, q, graph, q_lens=None):
        """The _Forward of an MLA batch (decode, verify: q query tokens a
        request; extend: q_lens): the plugin's, or the fallback's with why."""
        mode = _mode_name(fb.forward_mode)
        batch = {"size": bs, "graph": True}
        if q_lens is not None:
            batch["q_lens"] = list(q_lens)
        else:
            batch["query_tokens"] = q
        # An extend's plan is of its query lengths, seldom seen twice: its
        # Prepared (workspace, metadata) lives with the batch, not kept.
        prepared, why = self._step(path, mode, "MLA", batch, keep=q_lens is None)
        f = _Forward(path, "plugin" if prepared is not None else "fallback", bs, q, why)
        if prepared is not None:
            f.prepared, f.q_lens = prepared, q_lens
            f.tables = self._tables(prepared, bs, graph, q)
            if q_lens is None:
                qo = self._torch.arange(0, (bs + 1) * q, q, dtype=self._torch.int32, device=self.device)
                f.tables.qo_indptr.copy_(qo)
            self._extra["steps_prepared"] += 1
        return f

    # ------------------------------------------------------------ metadata

    def init_forward_metadata(self, forward_batch):
        """The eager entry: init_forward_metadata_out_graph and
        init_forward_metadata_in_graph of this batch (the fallback gets its
        own init_forward_metadata when it runs the batch)."""
        self._out_graph(forward_batch, in_capture=False, eager=True)
        self.init_forward_metadata_in_graph(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        """Per-step preparation outside a graph (sglang main since PR
        #26735): at capture (in_capture), the plan of the batch shape; at
        replay, nothing on the host for a captured plugin step."""
        self._out_graph(forward_batch, in_capture=in_capture, eager=False)

    def _out_graph(self, fb, in_capture, eager):
        mode = fb.forward_mode
        bs = int(fb.batch_size)
        if mode.is_idle():
            self._fwd = _Forward("decode", "idle", bs)
            return
        if self._lone_draft(mode, getattr(fb, "spec_info", None)):
            self._fwd = _Forward("draft", "fallback", bs, why=_LONE_DRAFT)
        elif mode.is_decode() or mode.is_target_verify():
            q = _query_tokens(fb, bs)
            path = self._decode_path(mode)
            if not eager and not in_capture:
                captured = self._graph_paths.get((bs, q))
                if captured is not None:  # a replay: the graph prepares the step
                    self._fwd = captured
                    if captured.kind == "fallback":
                        self._fallback_metadata(fb, eager=False, in_capture=False)
                    self.forward_metadata = self._fwd
                    return
            graph = in_capture or (not eager and bs <= self._max_bs)
            self._fwd = self._plan_mla(path, fb, bs, q, graph)
            if in_capture:
                self._graph_paths[(bs, q)] = self._fwd
                if self._fwd.kind == "fallback":
                    self._refused_at_capture(self._fwd)
        else:
            path = "draft" if mode.is_draft_extend_v2() else "extend"
            self._fwd = _Forward(path, "extend", bs)
            new = _ints(getattr(fb, "extend_seq_lens_cpu", None))
            if new is not None and len(new) == bs and not _capturing(self._torch):
                f = self._plan_mla(path, fb, bs, 1, False, q_lens=new)
                self._fwd.prepared, self._fwd.tables, self._fwd.q_lens, self._fwd.why = f.prepared, f.tables, new, f.why
        if self._fwd.kind != "plugin":
            self._fallback_metadata(fb, eager, in_capture)
        self.forward_metadata = self._fwd

    def _refused_at_capture(self, f):
        self._extra["refused_at_capture"] += 1
        self._warn(("capture", f.path, f.why), "attnplug: the captured %s step of batch %d has no plan of %s (%s); "
                   "its replays run the fallback", f.path, f.bs, self.kernel_backend, f.why)
        if self.strict:
            raise FallbackRefused(f.path, "captured step of batch %d: %s" % (f.bs, f.why))

    def _lone_draft(self, mode, spec_info):
        """Whether a batch is a draft model's decode this backend cannot
        run: one outside a multi-step draft backend, whose draft tokens it
        does not know."""
        return self.speculative_step_id is None and mode.is_decode() and spec_info is not None

    def _decode_path(self, mode):
        if mode.is_target_verify():
            return "verify"
        return "decode" if self.speculative_step_id is None else "draft"

    def _fallback_metadata(self, fb, eager, in_capture):
        fallback = self.fallback
        if fallback is None or self._draft is not None:  # a draft step's: its container's
            return
        if eager:
            fallback.init_forward_metadata(fb)
            self._fwd.fallback = "eager"
        else:
            fallback.init_forward_metadata_out_graph(fb, in_capture=in_capture)
            self._fwd.fallback = "graph"

    def init_forward_metadata_in_graph(self, forward_batch):
        """The graph-recordable preparation of a step (inside the capture;
        replayed by the graph): the page table, the lengths and the query
        offsets in the step's buffers, then the plan's scheduler."""
        f = self._fwd
        if f.prepared is not None and self.speculative_step_id is None:
            # (A draft step prepares at its first layer: the steps of a
            # draft share their plan's scheduler buffers, and the container
            # prepares every step before the first runs.)
            try:
                self._prep(f, forward_batch)
                f.prepped = True
            except Exception as exc:
                self._prep_failed(f, forward_batch, exc)
        if f.fallback == "graph" and self._draft is None:
            hook = getattr(self.fallback, "init_forward_metadata_in_graph", None)
            if hook is not None:
                hook(forward_batch)

    def _prep_failed(self, f, fb, exc):
        """A step whose preparation (its tables, its scheduler) failed:
        refused loudly in a capture, else the fallback's, with the reason
        its layers count."""
        why = "the plugin's step preparation failed: %s: %s" % (type(exc).__name__, exc)
        if _capturing(self._torch):
            self._counts[f.path]["last_reason"] = why
            self._extra["refused_at_capture"] += 1
            raise FallbackRefused(f.path, "captured step of batch %d: %s" % (f.bs, why))
        f.prepared, f.kind, f.why = None, "fallback", why
        self._fallback_metadata(fb, eager=True, in_capture=False)

    def _prep(self, f, fb):
        torch = self._torch
        t = f.tables
        bs = f.bs
        seq = fb.seq_lens[:bs]
        if fb.forward_mode.is_target_verify():
            t.seq_lens.copy_(seq + f.q)
        elif self.speculative_step_id is not None:
            # sglang's draft tokens of a chain (topk 1) follow the requests'
            # keys in req_to_token (assign_draft_cache_locs); step i reads
            # drafts 0 to i (generate_draft_decode_kv_indices).
            t.seq_lens.copy_(seq + (self.speculative_step_id + 1))
        else:
            t.seq_lens.copy_(seq)
        if f.q_lens is not None:
            t.qo_indptr[1:].copy_(torch.cumsum(fb.extend_seq_lens[:bs], 0))
        rpi = fb.req_pool_indices[:bs].long()
        slots = self.req_to_token[rpi[:, None], t.cols[None, :]]
        if self.facts.page_size > 1:
            slots = torch.div(slots, self.facts.page_size, rounding_mode="floor")
        t.kv_indices.view(bs, t.room).copy_(slots)
        f.prepared.launch_batch(t.tensors())

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        """Buffers of fixed address for graph steps of up to max_bs requests
        (the page tables are made at the first plan, sized by the room it
        holds for); and the fallback's."""
        self._graph_tables = {}
        self._graph_paths = {}
        self._max_bs = int(max_bs)
        if self.fallback is not None and self._draft is None:
            try:
                self.fallback.init_cuda_graph_state(max_bs, max_num_tokens, *args, **kwargs)
            except NotImplementedError:
                pass

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
                                                 forward_mode, spec_info, *args, **kwargs):
        """Capture of a graph step (sglang before PR #26735): the plan of
        the batch shape; the page table, lengths and scheduler are built in
        the captured forward, from the runner's tensors."""
        bs = int(bs)
        q = max(1, int(num_tokens) // max(1, bs))
        lone = self._lone_draft(forward_mode, spec_info)
        path = "draft" if lone else self._decode_path(forward_mode)

        class _Batch:  # what _plan_mla reads of the batch
            pass
        fb = _Batch()
        fb.forward_mode = forward_mode
        if (forward_mode.is_decode() or forward_mode.is_target_verify()) and not lone:
            self._max_bs = max(self._max_bs, bs)
            f = self._plan_mla(path, fb, bs, q, True)
        else:
            f = _Forward(path, "fallback", bs, q, why=_LONE_DRAFT)
        self._graph_paths[(bs, q)] = self._fwd = f
        self.forward_metadata = f
        if f.kind == "plugin":
            return
        f.fallback = "legacy"
        self._refused_at_capture(f)
        if self.fallback is not None and self._draft is None:
            self.fallback.init_forward_metadata_capture_cuda_graph(bs, num_tokens, req_pool_indices, seq_lens,
                                                                   encoder_lens, forward_mode, spec_info, *args, **kwargs)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                forward_mode, spec_info, seq_lens_cpu=None, *args, **kwargs):
        """Replay of a graph step (sglang before PR #26735): nothing on the
        host for a plugin step (the graph rebuilds the page table from the
        runner's tensors); the fallback's replay for a fallback step."""
        bs = int(bs)
        q = self._replay_q(bs, forward_mode, spec_info)
        captured = self._graph_paths.get((bs, q))
        if captured is not None and captured.kind == "plugin":
            self._fwd = captured
            self.forward_metadata = captured
            return
        path = self._decode_path(forward_mode)
        self._fwd = captured or _Forward(path, "fallback", bs, q, why="a batch size no graph was captured for")
        self._fwd.fallback = "legacy"
        self.forward_metadata = self._fwd
        if self.fallback is not None and self._draft is None:
            self.fallback.init_forward_metadata_replay_cuda_graph(bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                                  encoder_lens, forward_mode, spec_info, seq_lens_cpu,
                                                                  *args, **kwargs)

    def _replay_q(self, bs, mode, spec_info):
        """The query tokens a request of a legacy replay of batch size bs:
        1 for a decode; a verify's draft_token_num, else those of the
        verify graph captured for bs."""
        if not mode.is_target_verify():
            return 1
        q = int(getattr(spec_info, "draft_token_num", 0) or 0)
        if not q:
            qs = [qq for (b, qq) in self._graph_paths if b == bs and qq > 1]
            q = qs[0] if qs else 1
        return q

    def on_after_cuda_graph_warmup(self):
        """Between the warm-up runs and the capture (sglang main): the next
        forward prepares its step again, so that the capture records it."""
        self._fwd.prepped = False
        self._fwd.first_layer = None
        hook = getattr(self.fallback, "on_after_cuda_graph_warmup", None)
        if hook is not None:
            hook()

    def get_cuda_graph_seq_len_fill_value(self):
        """The length of the padding requests of a graph batch: 1, as
        sglang's MLA backends (a request reads at least its one key)."""
        return 1

    def get_verify_buffers_to_fill_after_draft(self):
        if self.fallback is None:
            return [None, None]
        return self.fallback.get_verify_buffers_to_fill_after_draft()

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        if self.fallback is not None:
            self.fallback.update_verify_buffers_to_fill_after_draft(spec_info, cuda_graph_bs)

    def get_indexer_metadata(self, layer_id, forward_batch):
        return None

    def support_triton(self):
        return True

    # ------------------------------------------------------------ forward

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        """Runs one attention layer, as sglang's AttentionBackend.forward:
        idle batches give an empty output, decode ones forward_decode, the
        others forward_extend."""
        mode = forward_batch.forward_mode
        if mode.is_idle():
            return q.new_empty(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)
        if mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       **kwargs):
        """MLA decode of one layer: q [tokens, heads * 512] (or [tokens,
        heads, 512]) with q_rope [tokens, heads, 64] and k [tokens, 1, 512]
        with k_rope [tokens, 1, 64] (DeepSeek's split form), or q 576 wide
        and k [tokens, 1, 576] with v its first 512 columns. Returns
        [tokens, heads * 512]."""
        return self._mla_layer("forward_decode", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, kwargs)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       **kwargs):
        """An extend batch of one layer: target-verify and absorbed-MLA
        extend through the MLA plan; MHA prefill without a prefix,
        MHA_ONE_SHOT and the new tokens of MHA_CHUNKED_KV through the MHA
        plan; the rest through the fallback."""
        if not self._is_mla_layer(layer):
            return self._mha_layer(q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, kwargs)
        return self._mla_layer("forward_extend", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, kwargs)

    def _mla_layer(self, which, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        """An MLA layer through the step's plan (_run_mla), else the
        fallback's which, counted."""
        f = self._fwd
        why = f.why
        if f.prepared is not None:
            why = self._layer_why(layer, kwargs)
            if why is None:
                try:
                    return self._run_mla(f, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs)
                except Exception as exc:
                    why = "the plugin's kernel failed: %s: %s" % (type(exc).__name__, exc)
        return self._fall_back(f.path, why, which, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs)

    def _layer_why(self, layer, kwargs):
        """Why the step's plan cannot run layer with the call's other
        arguments, or None."""
        return self._layer_fits(layer)

    def _mha_layer(self, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        """An MHA layer of an extend batch: the plugin's MHA plans
        (_run_mha), else the fallback, counted."""
        path = "chunked_prefix" if getattr(fb, "attn_attend_prefix_cache", None) else "prefill"
        try:
            path, out, why = self._run_mha(q, k, v, layer, fb, save_kv_cache)
            if out is not None:
                return out
        except Exception as exc:
            why = "the plugin's kernel failed: %s: %s" % (type(exc).__name__, exc)
        return self._fall_back(path, why, "forward_extend", q, k, v, layer, fb, save_kv_cache, q_rope, k_rope,
                               kwargs)

    def _fall_back(self, path, why, which, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        c = self._counts[path]
        c["last_reason"] = why or "unknown"
        if self.strict:
            raise FallbackRefused(path, c["last_reason"])
        if self.fallback is None:
            raise FallbackRefused(path, "%s, and there is no fallback (sglang's %s backend could not be made)"
                                  % (c["last_reason"], self.kernel_backend))
        f = self._fwd
        if f.fallback is None and _capturing(self._torch):
            # A captured plugin step whose layer cannot run the plugin's
            # kernel: the fallback's metadata made now would be the
            # capture's, replayed stale at every step. Refused loudly.
            self._extra["refused_at_capture"] += 1
            raise FallbackRefused(path, "a layer of a captured step of batch %d: %s" % (f.bs, c["last_reason"]))
        self._warn(("fallback", path, why), "attnplug: the fallback runs %s layers: %s", path, why)
        if f.fallback is None:
            # The plugin path could not run a batch it was planned for: the
            # fallback's metadata, now (eager batches only reach this); a
            # draft step's is its container's, for every step.
            if self._draft is not None:
                self._draft._fallback_eager(fb)
            else:
                self.fallback.init_forward_metadata(fb)
            f.fallback = "eager"
        c["fallback"] += 1
        extra = dict(kwargs)
        if q_rope is not None:
            extra["q_rope"] = q_rope
        if k_rope is not None:
            extra["k_rope"] = k_rope
        return getattr(self.fallback, which)(q, k, v, layer, fb, save_kv_cache=save_kv_cache, **extra)

    def _is_mla_layer(self, layer):
        return int(layer.head_dim) == self.facts.kv_cache_dim and int(layer.v_head_dim) == self.facts.kv_lora_rank

    def _layer_fits(self, layer):
        """Why layer is not one the step's plan runs (its heads, head dims
        and softmax scale), or None; found once a layer (sglang sets them
        when it makes the layer)."""
        why = self._fits.get(layer, self)
        if why is self:
            why = self._fits[layer] = self._layer_fits_now(layer)
        return why

    def _layer_fits_now(self, layer):
        facts = self.facts
        if not self._is_mla_layer(layer):
            return "head dims %s/%s" % (layer.head_dim, layer.v_head_dim)
        if int(layer.tp_q_head_num) != facts.heads:
            return "%d heads where the plan has %d" % (layer.tp_q_head_num, facts.heads)
        if abs(float(layer.scaling) - facts.scaling) > 1e-6 * facts.scaling:
            return "softmax scale %r where the plan has %r" % (layer.scaling, facts.scaling)
        if getattr(layer, "logit_cap", 0):
            return "a logit cap"
        return None

    def _save_kv(self, layer, fb, k, v, k_rope, save_kv_cache):
        if save_kv_cache and k is not None:
            if k_rope is not None:
                self.token_to_kv_pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
            else:
                self.token_to_kv_pool.set_kv_buffer(layer, fb.out_cache_loc, k, v)

    def _run_mla(self, f, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        torch, facts = self._torch, self.facts
        heads = facts.heads
        tokens = int(q.shape[0])
        self._save_kv(layer, fb, k, v, k_rope, save_kv_cache)
        if not f.prepped:
            # No init_forward_metadata_in_graph (a capture/replay runner):
            # the forward prepares its step at its first layer, every time
            # (each warm-up run and the captured one).
            if f.first_layer is None:
                f.first_layer = layer.layer_id
            if layer.layer_id == f.first_layer:
                self._prep(f, fb)
        kv = self._kv_view(layer.layer_id)
        out = torch.empty(tokens, heads, facts.kv_lora_rank, dtype=torch.bfloat16, device=kv.device)
        t = f.bound
        if t is None:  # the step's tensors, then each layer's in the same dict
            t = f.bound = f.tables.tensors()
        self._queries(t, f.prepared, q, q_rope, tokens)
        t["kv_cache"], t["out"] = kv, out
        t["lse"] = self._buffer("lse", (tokens, heads), torch.float32)
        if facts.kv_dtype == "fp8_e4m3":
            t["kv_scale"] = self._kv_scale(layer)
            self._extra["fp8_layers"] += 1
        f.prepared.launch_layer(t)
        self._counts[f.path]["plugin"] += 1
        out = out.view(tokens, heads * facts.kv_lora_rank)
        return out if out.dtype == q.dtype else out.to(q.dtype)

    def _kv_view(self, layer_id):
        """The layer's cache as the plan binds it, [pages, page_size,
        row] (row: the pool's, 576 elements, or a DSA pool's 656 bytes):
        the view made once for each buffer the pool hands (a bf16 pool
        hands the same tensor at every call; an FP8 one a view of its own
        each time, which gets a view each time)."""
        buf = self.token_to_kv_pool.get_key_buffer(layer_id)
        kept = self._kv_views.get(layer_id)
        if kept is not None and kept[0] is buf:
            return kept[1]
        kv = buf.view(-1, self.facts.page_size, buf.shape[-1])
        self._kv_views[layer_id] = (buf, kv)
        return kv

    def _queries(self, t, prepared, q, q_rope, tokens):
        """Puts the layer's queries in t as prepared's MLA plan binds them:
        where it takes them split, q_nope [tokens, heads, 512] and q_rope
        [tokens, heads, 64], views of DeepSeek's split form (q nope, the
        transpose of the absorbing bmm, and q_rope) or of the 576-wide one,
        with no copy; else one contiguous q (_query)."""
        if not prepared.declares("q_nope"):
            t["q"] = self._query(q, q_rope, tokens)
            return
        facts = self.facts
        heads, rank = facts.heads, facts.kv_lora_rank
        if q_rope is not None:
            # DeepSeek's are [tokens, heads, 512] and [tokens, heads, 64]
            # already (bound as they are: the plan checks their shapes).
            nope = q if q.dim() == 3 else q.reshape(tokens, heads, rank)
            rope = q_rope if q_rope.dim() == 3 else q_rope.reshape(tokens, heads, facts.qk_rope_head_dim)
        else:
            whole = q.reshape(tokens, heads, facts.kv_cache_dim)
            nope, rope = whole[..., :rank], whole[..., rank:]
        bf = self._torch.bfloat16
        t["q_nope"] = nope if nope.dtype == bf else nope.to(bf)
        t["q_rope"] = rope if rope.dtype == bf else rope.to(bf)

    def _query(self, q, q_rope, tokens):
        """The layer's queries as a plan of whole queries binds them:
        [tokens, heads, 576] bf16, contiguous, from DeepSeek's split form
        (q nope, and q_rope) or the 576-wide one."""
        torch, facts = self._torch, self.facts
        heads = facts.heads
        if q_rope is not None:
            # DeepSeek's q nope is the transpose of a bmm: not contiguous.
            qq = torch.cat([q.reshape(tokens, heads, facts.kv_lora_rank),
                            q_rope.reshape(tokens, heads, facts.qk_rope_head_dim)], dim=-1)
        else:
            qq = q.reshape(tokens, heads, facts.kv_cache_dim)
            if not qq.is_contiguous():
                qq = qq.contiguous()
        return qq if qq.dtype == torch.bfloat16 else qq.to(torch.bfloat16)

    def _kv_scale(self, layer):
        """The layer's KV scale as the FP8 plan binds it: a float32 tensor
        of one value, layer.k_scale (sglang's pool stores the plain cast,
        1.0, where the checkpoint gives none)."""
        s = getattr(layer, "k_scale", None)
        torch = self._torch
        if isinstance(s, torch.Tensor) and s.numel() == 1 and s.dtype == torch.float32 and s.device == self.device:
            return s.reshape(1)
        key = ("kv_scale", float(s) if s is not None else 1.0)
        buf = self._scratch.get(key)
        if buf is None:
            buf = torch.full((1,), key[1], dtype=torch.float32, device=self.device)
            self._scratch[key] = buf
        return buf

    def _buffer(self, name, shape, dtype):
        """A scratch buffer every layer writes and none reads (the LSE of
        the decode), of at least shape, allocated outside captures; its
        view of each shape is kept, so that a layer allocates nothing."""
        view = self._views.get((name, shape))
        if view is not None:
            return view
        torch = self._torch
        n = 1
        for d in shape:
            n *= d
        buf = self._scratch.get(name)
        if buf is None or buf.numel() < n:
            if _capturing(torch) and buf is not None:
                raise RuntimeError("a larger %s buffer during a capture" % name)
            rows = max(n, self._max_bs * 8 * self.facts.heads)
            buf = torch.empty(rows, dtype=dtype, device=self.device)
            self._scratch[name] = buf
            self._views = {k: v for k, v in self._views.items() if k[0] != name}
        view = self._views[(name, shape)] = buf[:n].view(*shape)
        return view

    def _mha_step(self, path, method, batch):
        """The (Prepared, why) of an MHA pass of the extend batch: made at
        its first layer, kept with the batch for the others (not kept past
        it: its lengths are the batch's)."""
        f = self._fwd
        key = (method, tuple(batch["seq_lens"]), tuple(batch["q_lens"]))
        if f.mha is None:
            f.mha = {}
        got = f.mha.get(key)
        if got is None:
            got = f.mha[key] = self._step(path, "EXTEND", method, batch, keep=False)
        return got

    def _run_mha(self, q, k, v, layer, fb, save_kv_cache):
        """(path, output or None, why) of an MHA layer of an extend batch:
        the plugin's MHA plan for MHA (the new tokens over themselves),
        MHA_ONE_SHOT (each request's keys whole) and the new tokens of
        MHA_CHUNKED_KV (returning their LSE too); its prefix-chunk plan for
        the prefix chunks of MHA_CHUNKED_KV (attn_attend_prefix_cache:
        the output and LSE of the chunk, which sglang's model merges)."""
        torch = self._torch
        chunk = bool(getattr(fb, "attn_attend_prefix_cache", None))
        path = "chunked_prefix" if chunk else "prefill"
        if _capturing(torch):
            return path, None, "an MHA prefill inside a CUDA graph (piecewise): not served by the plugin yet"
        if save_kv_cache and k is not None:
            return path, None, "an MHA layer that writes the cache (the latent pool is written by the model)"
        prefix = _ints(getattr(fb, "extend_prefix_lens_cpu", None))
        new = _ints(getattr(fb, "extend_seq_lens_cpu", None))
        if new is None:
            return path, None, "no extend_seq_lens_cpu"
        heads = int(layer.tp_q_head_num)
        if int(layer.tp_k_head_num) != heads:
            return path, None, "%d key heads for %d query heads" % (layer.tp_k_head_num, heads)
        tokens = sum(new)
        if q.shape[0] != tokens:
            return path, None, "%d query rows for %d new tokens" % (q.shape[0], tokens)
        if chunk:
            keys, why = _chunk_keys(fb, prefix, len(new))
            if why is not None:
                return path, None, why
            if k.shape[0] != sum(keys):
                return path, None, "%d key rows for the %d keys of prefix chunk %d" % (k.shape[0], sum(keys), fb.prefix_chunk_idx)
            batch = {"size": len(new), "seq_lens": keys, "q_lens": new, "prefix_chunk": True}
            prepared, why = self._mha_step(path, "MHA_CHUNKED_KV", batch)
        else:
            seq = [p + n for p, n in zip(prefix or [0] * len(new), new)]
            if k.shape[0] == sum(seq):
                keys = seq  # MHA_ONE_SHOT: the prefix and the new tokens; MHA: the new tokens
            elif k.shape[0] == tokens:
                keys = new  # the new tokens of MHA_CHUNKED_KV
            else:
                return path, None, "%d key rows, neither the new tokens (%d) nor every key (%d)" % (k.shape[0], tokens, sum(seq))
            # Each is one causal pass of every request's queries over the
            # keys given, which is the plan of MHA_ONE_SHOT (a plugin's
            # MHA_CHUNKED_KV plan also runs the prefix chunks, which sglang
            # gives in calls of their own).
            batch = {"size": len(new), "seq_lens": keys, "q_lens": new}
            prepared, why = self._mha_step(path, "MHA_ONE_SHOT", batch)
        if prepared is None:
            return path, None, why
        dqk, dv = int(layer.head_dim), int(layer.v_head_dim)
        bf = torch.bfloat16
        t = {"q": q.reshape(tokens, heads, dqk).to(bf).contiguous(),
             "k": k.reshape(-1, heads, dqk).to(bf).contiguous(),
             "v": v.reshape(-1, heads, dv).to(bf).contiguous(),
             "out": torch.empty(tokens, heads, dv, dtype=bf, device=q.device),
             "lse": torch.empty(tokens, heads, dtype=torch.float32, device=q.device)}
        prepared.launch(t)
        self._counts[path]["plugin"] += 1
        out = t["out"].view(tokens, heads * dv).to(q.dtype)
        if chunk or getattr(fb, "mha_return_lse", None):
            return path, (out, t["lse"]), None
        return path, out, None


def _chunk_keys(fb, prefix, bs):
    """([keys of each request in the batch's current prefix chunk], None),
    as sglang cuts the prefixes (ForwardBatchDeepSeekMHAMixin: chunk c of a
    request is its prefix keys [c*prefix_chunk_len, min((c+1)*prefix_chunk_len,
    prefix))), from the lengths on the host; or (None, why)."""
    idx, size = getattr(fb, "prefix_chunk_idx", None), getattr(fb, "prefix_chunk_len", None)
    if prefix is None or len(prefix) != bs:
        return None, "no extend_prefix_lens_cpu for the prefix chunks"
    if not isinstance(idx, int) or not isinstance(size, int) or idx < 0 or size < 1:
        return None, "no prefix chunk (prefix_chunk_idx %r, prefix_chunk_len %r)" % (idx, size)
    return [max(0, min(p, (idx + 1) * size) - idx * size) for p in prefix], None


class AttnplugMLAMultiStepDraftBackend:
    """sglang's multi-step draft backend for attnplug (what
    DraftBackendFactory makes for a draft model's DECODE, as
    FlashMLAMultiStepDraftBackend for flashmla): attn_backends holds one
    AttnplugMLABackend a draft step (speculative_num_steps - 1 of them, as
    sglang's), step i reading each request's keys and its draft tokens 0
    to i, which sglang puts after the keys in req_to_token for a chain
    (topk 1). The steps share one launcher and one plan of the batch shape
    (each prepares its lengths and the plan's scheduler at its first
    layer, so that no step overwrites another's), eager and in the draft's
    CUDA graphs of both protocols.

    fallback is sglang's multi-step draft backend that runs the batches the
    plugin has no plan for (DraftBackendFactory makes the one of the
    fallback's name); step i falls back to its step i, and the metadata
    calls of such a batch go to it whole. kernel_backend, address, client,
    strict and timeout are as AttnplugMLABackend's. topk must be 1: a tree
    of drafts (topk > 1) puts each branch's tokens elsewhere, which
    DraftBackendFactory leaves to sglang's own backend (register_backend)."""

    # Read by sglang's decide_needs_cpu_seq_lens: no step reads the host's
    # lengths.
    needs_cpu_seq_lens = False
    # The backend of each step.
    step_class = AttnplugMLABackend

    def __init__(self, model_runner, topk, speculative_num_steps, *, fallback=None, **kwargs):
        topk, steps = int(topk), int(speculative_num_steps)
        if topk != 1:
            raise ValueError("AttnplugMLAMultiStepDraftBackend: topk %d: the plugin's draft decode runs chains of "
                             "drafts (--speculative-eagle-topk 1)" % topk)
        if steps < 2:
            raise ValueError("AttnplugMLAMultiStepDraftBackend: speculative_num_steps %d: a multi-step draft has "
                             "at least 2 steps" % steps)
        self.topk, self.speculative_num_steps = topk, steps
        self.model_runner = model_runner
        self.fallback = fallback
        kids = getattr(fallback, "attn_backends", None) or []
        self.attn_backends = []
        for i in range(steps - 1):
            owner = self.attn_backends[0] if self.attn_backends else None
            b = self.step_class(model_runner, skip_prefill=True, speculative_step_id=i, launcher_owner=owner,
                                fallback=kids[i] if i < len(kids) else None, **kwargs)
            b._draft = self
            self.attn_backends.append(b)
        self._fallback_called = None  # the batch whose fallback metadata was made (eager)

    def _steps(self, call):
        for b in self.attn_backends:
            call(b)
        return any(b._fwd.kind == "fallback" for b in self.attn_backends)

    def init_forward_metadata(self, forward_batch):
        """An eager draft batch: each step's plan; the fallback's metadata
        where a step has none."""
        self._fallback_called = None
        if self._steps(lambda b: b._out_graph(forward_batch, in_capture=False, eager=True)):
            self._fallback_eager(forward_batch)

    def _fallback_eager(self, forward_batch):
        if self.fallback is not None and self._fallback_called is not forward_batch:
            self.fallback.init_forward_metadata(forward_batch)
            self._fallback_called = forward_batch
        for b in self.attn_backends:
            b._fwd.fallback = "eager"

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        for b in self.attn_backends:
            b.init_cuda_graph_state(max_bs, max_num_tokens)
        if self.fallback is not None:
            self.fallback.init_cuda_graph_state(max_bs, max_num_tokens, *args, **kwargs)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        """Outside the draft's graph (sglang main): at capture, each step's
        plan of the batch shape; at replay, nothing on the host for plugin
        steps."""
        if self._steps(lambda b: b._out_graph(forward_batch, in_capture=in_capture, eager=False)) \
                and self.fallback is not None:
            self.fallback.init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
            for b in self.attn_backends:
                b._fwd.fallback = "graph"

    def init_forward_metadata_in_graph(self, forward_batch):
        """Inside the draft's graph: nothing for plugin steps (each prepares
        at its first layer); the fallback's for a fallback batch."""
        if any(b._fwd.fallback == "graph" for b in self.attn_backends):
            hook = getattr(self.fallback, "init_forward_metadata_in_graph", None)
            if hook is not None:
                hook(forward_batch)

    def on_after_cuda_graph_warmup(self):
        for b in self.attn_backends:
            b.on_after_cuda_graph_warmup()

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        """Capture of the draft's graph (sglang before PR #26735)."""
        if self._capture_steps(forward_batch) and self.fallback is not None:
            self.fallback.init_forward_metadata_capture_cuda_graph(forward_batch)

    def _capture_steps(self, forward_batch):
        """Each step's capture; whether one has no plan."""
        bs = int(forward_batch.batch_size)

        def capture(b):
            b.init_forward_metadata_capture_cuda_graph(bs, bs * self.topk, forward_batch.req_pool_indices,
                                                       forward_batch.seq_lens, None, forward_batch.forward_mode,
                                                       forward_batch.spec_info)
        return self._steps(capture)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch, bs):
        """Replay of the draft's graph (sglang before PR #26735)."""
        if self._replay_steps(forward_batch, bs) and self.fallback is not None:
            self.fallback.init_forward_metadata_replay_cuda_graph(forward_batch, bs)

    def _replay_steps(self, forward_batch, bs):
        """Each step's replay preparation; whether one has no plan."""

        def replay(b):
            b.init_forward_metadata_replay_cuda_graph(bs, forward_batch.req_pool_indices, forward_batch.seq_lens, -1,
                                                      None, forward_batch.forward_mode, forward_batch.spec_info,
                                                      getattr(forward_batch, "seq_lens_cpu", None))
        return self._steps(replay)

    def stats(self):
        """The steps' counters added up (AttnplugMLABackend.stats; the
        launcher's are the shared launcher's)."""
        per = [b.stats() for b in self.attn_backends]
        out = dict(per[0])
        out["paths"] = {p: {"plugin": sum(s["paths"][p]["plugin"] for s in per),
                            "fallback": sum(s["paths"][p]["fallback"] for s in per),
                            "last_reason": next((s["paths"][p]["last_reason"] for s in per
                                                 if s["paths"][p]["last_reason"]), "")} for p in PATHS}
        for k, v in per[0].items():
            if k != "paths" and k not in _LAUNCHER_STATS and isinstance(v, (int, float)):
                out[k] = sum(s[k] for s in per)
        return out

    def close(self):
        for b in self.attn_backends:
            b.close()
