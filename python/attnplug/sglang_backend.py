"""attnplug.sglang_backend: an sglang attention backend for DeepSeek MLA
whose kernels are a plugin's.

AttnplugMLABackend has the interface of sglang's AttentionBackend
(python/sglang/srt/layers/attention/base_attn_backend.py) and makes the
calls sglang's MLA backends make (flashinfer_mla_backend.py is the one
followed): it reads sglang's KV pool (``token_to_kv_pool.get_key_buffer``,
the latent cache of a layer, [slots, 1, 576]) and page table
(``req_to_token_pool.req_to_token`` indexed by ``req_pool_indices``),
writes new KV where those backends write it (``set_mla_kv_buffer`` for the
split form, ``set_kv_buffer`` for the 576-wide one), and launches the
kernels of the plugin that serves ``kernel_backend`` (the dispatch's
answer: ``attnplug serve`` routes the name) through attnplug.device.

What runs where:

- MLA decode and target-verify (1 to 4 query tokens a request): the
  plugin's MLA decode plan, a graph plan that holds for the batch size
  (shape.max_seq_len: the model's context length in graph mode, a power of
  two above the batch's longest in eager mode), so a decode loop asks the
  server once per batch size and a captured step replays with no RPC and
  no host work: the page table, the lengths and the plan's scheduler are
  built on the device from sglang's tensors, inside the graph;
- MHA prefill without a prefix, and MHA_ONE_SHOT (the keys of each request
  given whole): the plugin's MHA plan, eager;
- everything else (chunked-prefix MHA, absorbed-MLA extend, draft
  batches, an fp8 KV cache), and every case without a plan (no server, no
  device code, a plugin that went away): the fallback, sglang's own backend
  of ``kernel_backend`` when sglang is importable, else TorchMLABackend (a
  bmm-softmax-bmm in torch), with one warning, never an exception in the
  model.

Both CUDA-graph protocols are served: the capture/replay pair
(``init_forward_metadata_capture_cuda_graph``,
``init_forward_metadata_replay_cuda_graph``) and main's since sglang PR
#26735 (``init_forward_metadata_out_graph(fb, in_capture)``,
``init_forward_metadata_in_graph(fb)``, ``on_after_cuda_graph_warmup()``),
with the pools taken from ``model_runner``.

Registration in sglang: register_backend() (the ``attnplug`` name), called
by the ``sglang.srt.plugins`` entry point (sglang_plugin), by
``python -m attnplug.launch`` and by attnplug.sglang.install(...,
attention_backend=True). torch is imported when a backend is made.
"""

import logging
import math
import os
import threading

from attnplug import client as _client
from attnplug.device import _import_torch

__all__ = [
    "AttnplugMLABackend",
    "BACKEND_NAME",
    "TorchMLABackend",
    "create_backend",
    "eager_bound",
    "mla_plan_request",
    "register_backend",
    "sglang_plugin",
]

log = logging.getLogger("attnplug.sglang_backend")

#: The name the backend registers under in sglang (--attention-backend attnplug).
BACKEND_NAME = "attnplug"
#: The variable naming the backend whose plugin runs the kernels (default fa3).
ENV_KERNEL_BACKEND = "ATTNPLUG_KERNEL_BACKEND"
DEFAULT_KERNEL_BACKEND = "fa3"

# The MLA decode kernels' limit on query tokens a request (docs/device.md).
MAX_QUERY_TOKENS = 4
# The smallest bound of an eager plan (eager_bound).
_MIN_EAGER_BOUND = 1024



def _sglang_base():
    try:
        from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
        return AttentionBackend
    except Exception:  # sglang not installed (or not importable here)
        return object


# ---------------------------------------------------------------- shapes


def pages_per_request(max_seq_len, page_size):
    """The page-table room of one request: ceil(max_seq_len / page_size)."""
    return -(-int(max_seq_len) // int(page_size))


def eager_bound(longest, context_len):
    """The max_seq_len of an eager plan: the smallest power of two at least
    longest (and 1024), at most context_len; so that eager steps of a batch
    size share a handful of plans, each with a page table no larger than
    twice what the batch needs."""
    b = _MIN_EAGER_BOUND
    while b < longest:
        b *= 2
    return max(1, min(b, int(context_len))) if longest <= context_len else int(longest)


def mla_plan_request(kernel_backend, heads, softmax_scale, batch, q_len, page_size, num_pages, max_seq_len,
                     seq_lens=None, head_dim_qk=576, head_dim_v=512, graph=True):
    """The plan request (as Client.plan_kernel takes it, without the device)
    of an MLA decode (q_len 1) or target-verify (q_len 2 to 4) step of
    batch requests: a graph plan bounded by max_seq_len, whose page table
    has room for batch * ceil(max_seq_len / page_size) pages. seq_lens
    (each kept within [q_len, max_seq_len]) default to max_seq_len: such a
    plan does not read them."""
    if seq_lens is None:
        seq_lens = [max_seq_len] * batch
    lens = [min(max(int(n), q_len), int(max_seq_len)) for n in seq_lens]
    return {
        "backend": kernel_backend, "method": "MLA", "dtype": "bf16", "graph": bool(graph),
        "dims": {"heads": int(heads), "head_dim_qk": int(head_dim_qk), "head_dim_v": int(head_dim_v),
                 "softmax_scale": float(softmax_scale)},
        "shape": {"seq_lens": lens, "q_lens": [int(q_len)] * batch, "page_size": int(page_size),
                  "num_pages": int(num_pages), "max_seq_len": int(max_seq_len)},
    }


def mha_plan_request(kernel_backend, method, heads, softmax_scale, seq_lens, q_lens, head_dim_qk, head_dim_v):
    """The plan request of an MHA prefill (method MHA or MHA_ONE_SHOT) of
    requests with seq_lens keys and q_lens new tokens."""
    return {
        "backend": kernel_backend, "method": method, "dtype": "bf16", "graph": False,
        "dims": {"heads": int(heads), "head_dim_qk": int(head_dim_qk), "head_dim_v": int(head_dim_v),
                 "softmax_scale": float(softmax_scale)},
        "shape": {"seq_lens": [int(x) for x in seq_lens], "q_lens": [int(x) for x in q_lens]},
    }


def _ints(v):
    if v is None:
        return None
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [int(x) for x in v]


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


def _capturing(torch):
    """Whether the current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class _NoPlanHere(Exception):
    """The plugin path cannot run this batch; the fallback does."""


# ---------------------------------------------------------------- steps


class _Step:
    """The plugin path of one batch shape: its prepared plan and the
    buffers of fixed address its launches read (the page table, lengths,
    query offsets), which the step's preparation fills on the device."""

    def __init__(self, prepared, bs, q, room, page_size, graph, kv_indptr, kv_indices, seq_lens, qo_indptr, cols):
        self.prepared = prepared
        self.bs, self.q, self.room, self.page_size, self.graph = bs, q, room, page_size, graph
        self.kv_indptr, self.kv_indices, self.seq_lens, self.qo_indptr = kv_indptr, kv_indices, seq_lens, qo_indptr
        self.cols = cols  # the page starts of a row of req_to_token, [room] int64
        self.version = 0  # of the launcher's route when planned

    def tensors(self):
        return {"kv_indptr": self.kv_indptr, "kv_indices": self.kv_indices, "seq_lens": self.seq_lens,
                "qo_indptr": self.qo_indptr}


class _Forward:
    """What the current forward batch runs: the plugin (step) or the
    fallback, whether init_forward_metadata_in_graph prepared its step,
    and which metadata call the fallback got: "eager"
    (init_forward_metadata), "graph" (init_forward_metadata_out_graph, so
    in_graph follows), "legacy" (capture/replay) or None."""

    __slots__ = ("kind", "step", "bs", "q", "prepped", "first_layer", "fallback")

    def __init__(self, kind, step=None, bs=0, q=1, fallback=None):
        self.kind = kind  # "plugin", "fallback", "extend", "idle"
        self.step = step
        self.bs = bs
        self.q = q
        self.prepped = False
        self.first_layer = None
        self.fallback = fallback


_Base = _sglang_base()


class AttnplugMLABackend(_Base):
    """An sglang attention backend for DeepSeek MLA that runs the kernels of
    the plugin serving kernel_backend (default $ATTNPLUG_KERNEL_BACKEND,
    else fa3), asked of the ``attnplug serve`` at address (default
    $ATTNPLUG_ADDRESS, else serve's socket) or through client.

    model_runner is sglang's (or a stand-in's: attnplug.sglang_standins):
    its model_config (context_len, num_attention_heads, kv_lora_rank,
    qk_rope_head_dim, scaling), device, page_size, kv_cache_dtype,
    req_to_token_pool and token_to_kv_pool are read. fallback is the
    backend that runs what the plugin does not (default: sglang's own
    backend of kernel_backend from sglang's attention registry, else
    TorchMLABackend); it gets the metadata calls of the batches it runs.
    launcher (default: an attnplug.device.Launcher made at the first plan)
    is what plans and launches the plugin's kernels.
    Attributes this class does not have are the fallback's (sglang's
    model calls backend-specific ones, such as init_mha_chunk_metadata).

    stats() counts plugin and fallback layer calls, plan requests and
    module loads. Not safe for concurrent use, as sglang's backends."""

    def __init__(self, model_runner, skip_prefill=False, *, kernel_backend=None, address=None, client=None,
                 fallback=None, num_heads=None, timeout=5.0, launcher=None):
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
        cfg = model_runner.model_config
        self.context_len = int(cfg.context_len)
        self.kv_lora_rank = int(cfg.kv_lora_rank)
        self.qk_rope_head_dim = int(cfg.qk_rope_head_dim)
        self.kv_cache_dim = self.kv_lora_rank + self.qk_rope_head_dim
        self.num_heads = int(num_heads or cfg.num_attention_heads // _attention_tp_size(model_runner))
        self.scaling = float(getattr(cfg, "scaling", 1.0 / math.sqrt(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)))
        self.device = torch.device(model_runner.device) if not isinstance(model_runner.device, torch.device) \
            else model_runner.device
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.page_size = int(getattr(model_runner, "page_size", 1) or 1)
        # Pool refs, taken at construction as sglang's backends take them.
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.req_to_token = self.req_to_token_pool.req_to_token
        self.kv_cache_dtype = getattr(model_runner, "kv_cache_dtype", None)
        self.data_type = getattr(model_runner, "dtype", torch.bfloat16)
        self._address = address
        self._client = client
        self._timeout = timeout
        self._launcher = launcher
        self._launcher_error = None
        self._lock = threading.Lock()
        self._warned = set()
        self._down = False
        self._graph = None  # graph buffers (init_cuda_graph_state)
        self._graph_paths = {}  # (bs, q) -> _Forward captured
        self._eager_steps = {}  # (bs, q, bound) -> _Step
        self._mha_refused = {}  # MHA method -> route version the plugin had no plan for it at
        self._refused_now = False
        self._fwd = _Forward("idle")
        self._stats = {"plugin_layers": 0, "fallback_layers": 0, "fallback_batches": 0, "steps_prepared": 0}
        self.fallback = fallback if fallback is not None else self._make_fallback()
        self.forward_metadata = None

    # ------------------------------------------------------------ set-up

    def _make_fallback(self):
        name = self.kernel_backend
        try:
            from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        except Exception:
            ATTENTION_BACKENDS = None
        if ATTENTION_BACKENDS is not None and name in ATTENTION_BACKENDS and name != BACKEND_NAME:
            try:
                return ATTENTION_BACKENDS[name](self.model_runner)
            except Exception as exc:
                log.warning("attnplug: sglang's %s backend cannot be made here (%s: %s); the torch MLA path is "
                            "the fallback", name, type(exc).__name__, exc)
        return TorchMLABackend(self.model_runner)

    def __getattr__(self, name):
        # Only for attributes this class lacks: sglang's model calls some
        # backend-specific ones (init_mha_chunk_metadata, ...).
        if name.startswith("__") or name in ("fallback", "_fwd"):
            raise AttributeError(name)
        fb = self.__dict__.get("fallback")
        if fb is None:
            raise AttributeError(name)
        return getattr(fb, name)

    def stats(self):
        """Counters: plugin_layers and fallback_layers (layer calls each path
        ran), fallback_batches, steps_prepared (batch shapes planned), and
        the launcher's plan_requests, module_fetches and route_changes."""
        out = dict(self._stats)
        lch = self._launcher
        if lch is not None:
            out.update(plan_requests=lch.source.stats["plan_requests"],
                       module_fetches=lch.source.stats["module_fetches"],
                       route_changes=lch.source.stats["route_changes"], module_loads=lch.stats["module_loads"])
        return out

    @property
    def launcher(self):
        """The attnplug.device.Launcher (made at the first plan), or None
        when it cannot be made here."""
        return self._get_launcher()

    def close(self):
        """Stops following the server (the backend runs on, from its plans)."""
        if self._launcher is not None:
            self._launcher.close()

    def _get_launcher(self):
        if self._launcher is not None or self._launcher_error is not None:
            return self._launcher
        with self._lock:
            if self._launcher is None and self._launcher_error is None:
                try:
                    from attnplug.device import Launcher
                    cl = self._client or _client.Client(self._address, timeout=self._timeout)
                    self._client = cl
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

    def _plugin_ok(self):
        torch = self._torch
        pool_dtype = getattr(self.token_to_kv_pool, "dtype", torch.bfloat16)
        return ((self.device.type == "cuda" or self._launcher is not None)
                and self.kv_cache_dim == 576 and self.kv_lora_rank == 512
                and pool_dtype == torch.bfloat16
                and self.kv_cache_dtype in (None, torch.bfloat16, "auto", "bf16", "bfloat16"))

    def _plan(self, request, what, keep=True):
        """The Prepared plan of request, or None with one warning (per
        outage, or per kind of batch and reason)."""
        lch = self._get_launcher()
        if lch is None:
            return None
        from attnplug.client import NoPlan, ServerError, ServerUnavailable
        try:
            p = lch.plan(request, keep=keep)
        except ServerUnavailable as exc:
            if not self._down:
                self._down = True
                log.warning("attnplug: the server is unreachable (%s); the fallback runs the batches no kept plan "
                            "answers until it is back", exc)
            return None
        except NoPlan as exc:
            self._refused_now = True
            self._warn(("noplan", what.split(" of batch")[0], lch.source.version), "attnplug: no plan of %s for %s "
                       "(%s); the fallback runs such batches", self.kernel_backend, what, exc)
            return None
        except ServerError as exc:
            self._warn(("refused", what), "attnplug: the server refused the plan of %s for %s (%s); the fallback "
                       "runs such batches", self.kernel_backend, what, exc)
            return None
        except Exception as exc:  # a module that does not load, a plan that does not bind
            self._warn(("plan", what, type(exc).__name__), "attnplug: the plan of %s for %s failed here (%s: %s); "
                       "the fallback runs such batches", self.kernel_backend, what, type(exc).__name__, exc)
            return None
        if self._down:
            self._down = False
            log.warning("attnplug: the server answers again; the plugin's kernels run new batch shapes again")
        return p

    def _num_pages(self):
        rows = self.token_to_kv_pool.get_key_buffer(self._first_pool_layer()).shape[0]
        return rows // self.page_size if rows % self.page_size == 0 else None

    def _first_pool_layer(self):
        return int(getattr(self.token_to_kv_pool, "start_layer", 0) or 0)

    def _mla_step(self, bs, q, graph, bound, seq_lens=None):
        """The _Step of an MLA batch of bs requests of q query tokens with
        lengths up to bound: graph steps use the buffers of
        init_cuda_graph_state, eager ones their own. None when the plugin
        has no plan for it."""
        torch = self._torch
        if not self._plugin_ok() or q > MAX_QUERY_TOKENS:
            return None
        num_pages = self._num_pages()
        if num_pages is None:
            return None
        key = (bs, q, bound)
        lch = self._launcher
        st = self._eager_steps.get(key) if not graph else None
        if st is not None and lch is not None and st.version == lch.source.version:
            return st
        req = mla_plan_request(self.kernel_backend, self.num_heads, self.scaling, bs, q, self.page_size, num_pages,
                               bound, seq_lens, head_dim_qk=self.kv_cache_dim, head_dim_v=self.kv_lora_rank)
        what = "MLA %s of batch %d" % ("decode" if q == 1 else "target-verify with %d tokens" % q, bs)
        prepared = self._plan(req, what)
        if prepared is None:
            return None
        room = pages_per_request(bound, self.page_size)
        dev = self.device
        i32 = torch.int32
        if graph:
            g = self._graph
            kv_indptr = g["kv_indptr"][:bs + 1]
            kv_indices = g["kv_indices"][:bs * room]
            seq = g["seq_lens"][:bs]
            qo = self._graph_qo(q)[:bs + 1]
            cols = g["cols"]
        else:
            kv_indptr = torch.arange(0, (bs + 1) * room, room, dtype=i32, device=dev)
            kv_indices = torch.zeros(bs * room, dtype=i32, device=dev)
            seq = torch.zeros(bs, dtype=i32, device=dev)
            qo = torch.arange(0, (bs + 1) * q, q, dtype=i32, device=dev)
            cols = torch.arange(room, dtype=torch.int64, device=dev) * self.page_size
        st = _Step(prepared, bs, q, room, self.page_size, graph, kv_indptr, kv_indices, seq, qo, cols)
        st.version = self._launcher.source.version
        if not graph:
            if len(self._eager_steps) > 256:
                self._eager_steps.clear()
            self._eager_steps[key] = st
        self._stats["steps_prepared"] += 1
        return st

    def _graph_qo(self, q):
        g = self._graph
        qo = g["qo"].get(q)
        if qo is None:
            qo = self._torch.arange(0, (g["max_bs"] + 1) * q, q, dtype=self._torch.int32, device=self.device)
            g["qo"][q] = qo
        return qo

    # ------------------------------------------------------------ metadata

    def init_forward_metadata(self, forward_batch):
        """The eager entry: init_forward_metadata_out_graph and
        init_forward_metadata_in_graph of this batch (the fallback gets its
        own init_forward_metadata when it runs the batch)."""
        self._out_graph(forward_batch, in_capture=False, eager=True)
        self.init_forward_metadata_in_graph(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        """Per-step preparation outside a graph (sglang main since PR
        #26735): at capture (in_capture), the plan of the batch size; at
        replay, nothing on the host for a captured plugin step."""
        self._out_graph(forward_batch, in_capture=in_capture, eager=False)

    def _out_graph(self, fb, in_capture, eager):
        mode = fb.forward_mode
        bs = int(fb.batch_size)
        if mode.is_idle():
            self._fwd = _Forward("idle", bs=bs)
            return
        if (mode.is_decode() or mode.is_target_verify()) and not self.skip_decode(fb):
            q = _query_tokens(fb, bs)
            if not eager and not in_capture:
                captured = self._graph_paths.get((bs, q))
                if captured is not None:  # a replay: the graph prepares the step
                    self._fwd = _Forward(captured.kind, captured.step, bs, q)
                    if captured.kind == "fallback":
                        self._fallback_metadata(fb, eager=False, in_capture=False)
                    self.forward_metadata = self._fwd
                    return
            if in_capture or (not eager and self._graph is not None and bs <= self._graph["max_bs"]):
                self._ensure_graph_state(bs)
                st = self._mla_step(bs, q, True, self.context_len)
            else:
                lens = _ints(getattr(fb, "seq_lens_cpu", None))
                longest = (max(lens) if lens else self.context_len) + (q if mode.is_target_verify() else 0)
                st = self._mla_step(bs, q, False, eager_bound(longest, self.context_len), lens)
            if st is not None:
                self._fwd = _Forward("plugin", st, bs, q)
            else:
                self._fwd = _Forward("fallback", None, bs, q)
                self._stats["fallback_batches"] += 1
                self._fallback_metadata(fb, eager, in_capture)
            if in_capture:
                self._graph_paths[(bs, q)] = self._fwd
            self.forward_metadata = self._fwd
            return
        # Extend batches (and draft decode): the fallback's metadata always
        # (it runs what the plugin does not), the plugin's MHA plan at the
        # layer.
        self._fwd = _Forward("extend", None, bs, 1)
        self._fallback_metadata(fb, eager, in_capture)
        self.forward_metadata = self._fwd

    def skip_decode(self, fb):
        """Whether a decode batch is one the plugin path leaves to the
        fallback: a draft model's decode (its spec_info carries the page
        table of the draft tokens)."""
        return fb.forward_mode.is_decode() and getattr(fb, "spec_info", None) is not None

    def _fallback_metadata(self, fb, eager, in_capture):
        if eager:
            self.fallback.init_forward_metadata(fb)
            self._fwd.fallback = "eager"
        else:
            self.fallback.init_forward_metadata_out_graph(fb, in_capture=in_capture)
            self._fwd.fallback = "graph"

    def init_forward_metadata_in_graph(self, forward_batch):
        """The graph-recordable preparation of a step (inside the capture;
        replayed by the graph): the page table and the lengths in the
        step's buffers, then the plan's scheduler."""
        f = self._fwd
        if f.kind == "plugin":
            self._prep(f, forward_batch)
            f.prepped = True
        elif f.fallback == "graph":
            hook = getattr(self.fallback, "init_forward_metadata_in_graph", None)
            if hook is not None:
                hook(forward_batch)

    def _prep(self, f, fb):
        torch = self._torch
        st = f.step
        bs = st.bs
        seq = fb.seq_lens[:bs]
        if fb.forward_mode.is_target_verify():
            st.seq_lens.copy_(seq + st.q)
        else:
            st.seq_lens.copy_(seq)
        rpi = fb.req_pool_indices[:bs].long()
        slots = self.req_to_token[rpi[:, None], st.cols[None, :]]
        if st.page_size > 1:
            slots = torch.div(slots, st.page_size, rounding_mode="floor")
        st.kv_indices.view(bs, st.room).copy_(slots)
        st.prepared.launch_batch({"seq_lens": st.seq_lens, "qo_indptr": st.qo_indptr,
                                  "kv_indptr": st.kv_indptr, "kv_indices": st.kv_indices})

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        """Buffers of fixed address for graph steps of up to max_bs
        requests: the page table (max_bs * ceil(context_len / page_size)),
        the lengths, the query and page offsets; and the fallback's."""
        self._graph = None
        self._graph_paths = {}
        self._alloc_graph(int(max_bs))
        try:
            self.fallback.init_cuda_graph_state(max_bs, max_num_tokens, *args, **kwargs)
        except NotImplementedError:
            pass

    def _alloc_graph(self, max_bs):
        torch = self._torch
        room = pages_per_request(self.context_len, self.page_size)
        i32, dev = torch.int32, self.device
        self._graph = {
            "max_bs": max_bs, "room": room,
            "kv_indptr": torch.arange(0, (max_bs + 1) * room, room, dtype=i32, device=dev),
            "kv_indices": torch.zeros(max_bs * room, dtype=i32, device=dev),
            "seq_lens": torch.ones(max_bs, dtype=i32, device=dev),
            "cols": torch.arange(room, dtype=torch.int64, device=dev) * self.page_size,
            "qo": {},
        }
        n = max_bs * MAX_QUERY_TOKENS * self.num_heads
        buf = self.__dict__.get("_lse_buf")
        if buf is None or buf.numel() < n:
            self._lse_buf = torch.empty(n, dtype=torch.float32, device=dev)

    def _ensure_graph_state(self, bs):
        if self._graph is None or bs > self._graph["max_bs"]:
            self._alloc_graph(max(bs, self._graph["max_bs"] if self._graph else 0))

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
                                                 forward_mode, spec_info, *args, **kwargs):
        """Capture of a graph step (sglang before PR #26735): the plan of
        the batch size; the page table, lengths and scheduler are built in
        the captured forward, from the runner's tensors."""
        bs = int(bs)
        q = max(1, int(num_tokens) // max(1, bs))
        draft = forward_mode.is_decode() and spec_info is not None
        if (forward_mode.is_decode() or forward_mode.is_target_verify()) and not draft:
            self._ensure_graph_state(bs)
            st = self._mla_step(bs, q, True, self.context_len)
            if st is not None:
                self._fwd = _Forward("plugin", st, bs, q)
                self._graph_paths[(bs, q)] = self._fwd
                self.forward_metadata = self._fwd
                return
        self._fwd = _Forward("fallback", None, bs, q, fallback="legacy")
        self._graph_paths[(bs, q)] = self._fwd
        self._stats["fallback_batches"] += 1
        self.forward_metadata = self._fwd
        self.fallback.init_forward_metadata_capture_cuda_graph(bs, num_tokens, req_pool_indices, seq_lens,
                                                               encoder_lens, forward_mode, spec_info, *args, **kwargs)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                forward_mode, spec_info, seq_lens_cpu=None, *args, **kwargs):
        """Replay of a graph step (sglang before PR #26735): nothing on the
        host for a plugin step (the graph rebuilds the page table from the
        runner's tensors); the fallback's replay for a fallback step."""
        bs = int(bs)
        q = 1
        if forward_mode.is_target_verify():
            q = int(getattr(spec_info, "draft_token_num", 0) or 0)
            if not q:
                qs = [qq for (b, qq) in self._graph_paths if b == bs and qq > 1]
                q = qs[0] if qs else 1
        captured = self._graph_paths.get((bs, q))
        if captured is not None and captured.kind == "plugin":
            self._fwd = _Forward("plugin", captured.step, bs, q)
            self.forward_metadata = self._fwd
            return
        self._fwd = _Forward("fallback", None, bs, q, fallback="legacy")
        self.forward_metadata = self._fwd
        self.fallback.init_forward_metadata_replay_cuda_graph(bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                              encoder_lens, forward_mode, spec_info, seq_lens_cpu,
                                                              *args, **kwargs)

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
        return self.fallback.get_verify_buffers_to_fill_after_draft()

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        return self.fallback.update_verify_buffers_to_fill_after_draft(spec_info, cuda_graph_bs)

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
        f = self._fwd
        if f.kind == "plugin" and self._layer_fits(layer):
            try:
                return self._run_mla(f, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope)
            except _NoPlanHere:
                pass
            except Exception as exc:
                self._warn(("launch", type(exc).__name__), "attnplug: the plugin's kernel failed on a decode batch "
                           "(%s: %s); the fallback runs it", type(exc).__name__, exc)
        return self._fallback_call("forward_decode", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                                   kwargs)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                       **kwargs):
        """An extend batch of one layer: target-verify through the MLA plan,
        MHA prefill without a prefix and MHA_ONE_SHOT through the MHA plan;
        the rest through the fallback."""
        f = self._fwd
        mode = forward_batch.forward_mode
        try:
            if f.kind == "plugin" and mode.is_target_verify() and self._layer_fits(layer):
                return self._run_mla(f, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope)
            if f.kind == "extend" and not self._is_mla_layer(layer) and q_rope is None and k_rope is None:
                out = self._run_mha(q, k, v, layer, forward_batch, save_kv_cache)
                if out is not None:
                    return out
        except _NoPlanHere:
            pass
        except Exception as exc:
            self._warn(("launch-extend", type(exc).__name__), "attnplug: the plugin's kernel failed on an extend "
                       "batch (%s: %s); the fallback runs it", type(exc).__name__, exc)
        return self._fallback_call("forward_extend", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                                   kwargs)

    def _fallback_call(self, which, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        f = self._fwd
        if f.fallback is None:
            # The plugin path could not run a batch it was planned for: the
            # fallback's metadata, now (eager batches only reach this).
            self.fallback.init_forward_metadata(fb)
            f.fallback = "eager"
        self._stats["fallback_layers"] += 1
        extra = dict(kwargs)
        if q_rope is not None:
            extra["q_rope"] = q_rope
        if k_rope is not None:
            extra["k_rope"] = k_rope
        return getattr(self.fallback, which)(q, k, v, layer, fb, save_kv_cache=save_kv_cache, **extra)

    def _is_mla_layer(self, layer):
        return int(layer.head_dim) == self.kv_cache_dim and int(layer.v_head_dim) == self.kv_lora_rank

    def _layer_fits(self, layer):
        """Whether layer is one the step's plan runs (its heads, head dims
        and softmax scale); a layer that is not is said once."""
        why = None
        if not self._is_mla_layer(layer):
            why = "head dims %s/%s" % (layer.head_dim, layer.v_head_dim)
        elif int(layer.tp_q_head_num) != self.num_heads:
            why = "%d heads where the plan has %d" % (layer.tp_q_head_num, self.num_heads)
        elif abs(float(layer.scaling) - self.scaling) > 1e-6 * self.scaling:
            why = "softmax scale %r where the plan has %r" % (layer.scaling, self.scaling)
        elif getattr(layer, "logit_cap", 0):
            why = "a logit cap"
        if why is not None:
            self._warn(("layer", why), "attnplug: layer %s has %s; the fallback runs it", layer.layer_id, why)
        return why is None

    def _save_kv(self, layer, fb, k, v, k_rope, save_kv_cache):
        if save_kv_cache and k is not None:
            if k_rope is not None:
                self.token_to_kv_pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
            else:
                self.token_to_kv_pool.set_kv_buffer(layer, fb.out_cache_loc, k, v)

    def _run_mla(self, f, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope):
        torch = self._torch
        st = f.step
        heads = self.num_heads
        tokens = st.bs * st.q
        if q.shape[0] != tokens:
            raise _NoPlanHere()
        self._save_kv(layer, fb, k, v, k_rope, save_kv_cache)
        if not f.prepped:
            # No init_forward_metadata_in_graph (a capture/replay runner):
            # the forward prepares its step at its first layer, every time
            # (each warm-up run and the captured one).
            if f.first_layer is None:
                f.first_layer = layer.layer_id
            if layer.layer_id == f.first_layer:
                self._prep(f, fb)
        if q_rope is not None:
            # DeepSeek's q nope is the transpose of a bmm: not contiguous.
            qq = torch.cat([q.reshape(tokens, heads, self.kv_lora_rank),
                            q_rope.reshape(tokens, heads, self.qk_rope_head_dim)], dim=-1)
        else:
            qq = q.reshape(tokens, heads, self.kv_cache_dim)
            if not qq.is_contiguous():
                qq = qq.contiguous()
        if qq.dtype != torch.bfloat16:
            qq = qq.to(torch.bfloat16)
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id).view(-1, self.page_size, self.kv_cache_dim)
        out = torch.empty(tokens, heads, self.kv_lora_rank, dtype=torch.bfloat16, device=qq.device)
        lse = self._lse(tokens, heads)
        t = st.tensors()
        t.update(q=qq, kv_cache=kv, out=out, lse=lse)
        st.prepared.launch_layer(t)
        self._stats["plugin_layers"] += 1
        return out.view(tokens, heads * self.kv_lora_rank).to(q.dtype)

    def _lse(self, tokens, heads):
        # One scratch buffer for the LSE every layer writes and none reads.
        buf = self.__dict__.get("_lse_buf")
        if buf is None or buf.numel() < tokens * heads:
            g = self._graph
            n = max(tokens * heads, (g["max_bs"] * MAX_QUERY_TOKENS * heads) if g is not None else 0)
            if buf is not None and _capturing(self._torch):
                raise _NoPlanHere()  # a new buffer now would be the graph's own
            buf = self._torch.empty(n, dtype=self._torch.float32, device=self.device)
            self._lse_buf = buf
        return buf[:tokens * heads].view(tokens, heads)

    def _run_mha(self, q, k, v, layer, fb, save_kv_cache):
        torch = self._torch
        if _capturing(torch) or not self._plugin_ok():
            return None
        if save_kv_cache and k is not None:
            return None  # the pool holds the latent cache; the model writes it (DeepSeek's MHA path)
        prefix = _ints(getattr(fb, "extend_prefix_lens_cpu", None))
        new = _ints(getattr(fb, "extend_seq_lens_cpu", None))
        seq = _ints(getattr(fb, "seq_lens_cpu", None))
        if new is None or seq is None or getattr(fb, "attn_attend_prefix_cache", None):
            return None
        heads = int(layer.tp_q_head_num)
        if int(layer.tp_k_head_num) != heads:
            return None
        dqk, dv = int(layer.head_dim), int(layer.v_head_dim)
        tokens = sum(new)
        if q.shape[0] != tokens:
            return None
        # The keys of each request whole (MHA_ONE_SHOT's layout; without a
        # prefix, the new tokens themselves), else the new tokens over
        # themselves (MHA's): the first method the plugin plans.
        methods = []
        if k.shape[0] == sum(seq):
            methods.append(("MHA_ONE_SHOT", seq))
        if k.shape[0] == tokens and not any(prefix or ()):
            methods.append(("MHA", new))
        prepared = None
        version = self._launcher.source.version if self._launcher is not None else None
        for method, keys in methods:
            if self._mha_refused.get(method) == version and version is not None:
                continue
            req = mha_plan_request(self.kernel_backend, method, heads, float(layer.scaling), keys, new, dqk, dv)
            self._refused_now = False
            prepared = self._plan(req, "%s prefill" % method, keep=False)
            if prepared is not None:
                break
            if self._refused_now and self._launcher is not None:
                self._mha_refused[method] = self._launcher.source.version
        if prepared is None:
            return None
        bf = torch.bfloat16
        t = {"q": q.reshape(tokens, heads, dqk).to(bf).contiguous(),
             "k": k.reshape(-1, heads, dqk).to(bf).contiguous(),
             "v": v.reshape(-1, heads, dv).to(bf).contiguous(),
             "out": torch.empty(tokens, heads, dv, dtype=bf, device=q.device),
             "lse": torch.empty(tokens, heads, dtype=torch.float32, device=q.device)}
        prepared.launch(t)
        self._stats["plugin_layers"] += 1
        return t["out"].view(tokens, heads * dv).to(q.dtype)


# ---------------------------------------------------------------- torch


class TorchMLABackend(_Base):
    """The fallback where sglang's own backends are not importable: MLA
    decode, target-verify and extend over sglang's pools as a
    bmm-softmax-bmm in torch (fp32), and MHA prefill by torch's SDPA per
    request. Graph steps read the runner's tensors on the device, over page
    tables as long as the model's context (correct, and slow); eager steps
    as long as the batch's longest."""

    def __init__(self, model_runner, *args, **kwargs):
        if _Base is not object:
            try:
                super().__init__()
            except TypeError:
                pass
        torch = _import_torch()
        self._torch = torch
        cfg = model_runner.model_config
        self.context_len = int(cfg.context_len)
        self.kv_lora_rank = int(cfg.kv_lora_rank)
        self.kv_cache_dim = self.kv_lora_rank + int(cfg.qk_rope_head_dim)
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.graph = False
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.graph = False

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self.graph = True

    def init_forward_metadata_in_graph(self, forward_batch):
        pass

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        pass

    def init_forward_metadata_capture_cuda_graph(self, *args, **kwargs):
        self.graph = True

    def init_forward_metadata_replay_cuda_graph(self, *args, **kwargs):
        self.graph = True

    def on_after_cuda_graph_warmup(self):
        pass

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def get_verify_buffers_to_fill_after_draft(self):
        return [None, None]

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        pass

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        mode = forward_batch.forward_mode
        if mode.is_idle():
            return q.new_empty(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)
        if mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def _save(self, layer, fb, k, v, k_rope, save_kv_cache):
        if save_kv_cache and k is not None:
            if k_rope is not None:
                self.token_to_kv_pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
            else:
                self.token_to_kv_pool.set_kv_buffer(layer, fb.out_cache_loc, k, v)

    def _q576(self, q, q_rope, heads):
        torch = self._torch
        if q_rope is not None:
            return torch.cat([q.reshape(-1, heads, self.kv_lora_rank), q_rope.reshape(-1, heads, q_rope.shape[-1])],
                             dim=-1)
        return q.reshape(-1, heads, self.kv_cache_dim)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        self._save(layer, forward_batch, k, v, k_rope, save_kv_cache)
        heads = int(layer.tp_q_head_num)
        qq = self._q576(q, q_rope, heads)
        bs = int(forward_batch.batch_size)
        n = qq.shape[0] // max(1, bs)
        out = self.mla_uniform(qq, layer, forward_batch, bs, n, extra=0)
        return out.reshape(qq.shape[0], heads * self.kv_lora_rank).to(q.dtype)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        fb = forward_batch
        heads = int(layer.tp_q_head_num)
        if int(layer.head_dim) == self.kv_cache_dim and int(layer.v_head_dim) == self.kv_lora_rank:
            self._save(layer, fb, k, v, k_rope, save_kv_cache)
            qq = self._q576(q, q_rope, heads)
            bs = int(fb.batch_size)
            if fb.forward_mode.is_target_verify():
                n = qq.shape[0] // max(1, bs)
                out = self.mla_uniform(qq, layer, fb, bs, n, extra=n)
            else:
                out = self.mla_ragged(qq, layer, fb)
            return out.reshape(qq.shape[0], heads * self.kv_lora_rank).to(q.dtype)
        return self.mha(q, k, v, layer, fb)

    def mla_uniform(self, q, layer, fb, bs, n, extra):
        """MLA over the pool for bs requests of n query tokens each (decode,
        target-verify): request i's keys are its first seq_lens[i] + extra
        slots of req_to_token, its query t sees those up to length - n + t."""
        torch = self._torch
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id).reshape(-1, self.kv_cache_dim)
        lens = fb.seq_lens[:bs].to(torch.int64) + extra
        if self.graph or _capturing(torch):
            width = self.req_to_token.shape[1]
        else:
            width = int(lens.max().item()) if bs else 1
        width = max(1, min(width, self.req_to_token.shape[1]))
        slots = self.req_to_token[fb.req_pool_indices[:bs].long(), :width].long()
        keys = kv[slots].float()  # [bs, width, 576]
        qf = q.reshape(bs, n, -1, self.kv_cache_dim).float()
        s = torch.einsum("bthd,bkd->bthk", qf, keys) * float(layer.scaling)
        pos = torch.arange(width, device=q.device)
        limit = lens[:, None] - n + torch.arange(n, device=q.device)[None, :]  # [bs, n]
        mask = pos[None, None, :] <= limit[:, :, None]
        s = s.masked_fill(~mask[:, :, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out = torch.einsum("bthk,bkd->bthd", p, keys[..., :self.kv_lora_rank])
        return out.reshape(bs * n, -1, self.kv_lora_rank)

    def mla_ragged(self, q, layer, fb):
        """MLA over the pool for an extend batch (eager): request i has
        extend_seq_lens[i] new tokens at the end of its seq_lens[i] keys."""
        torch = self._torch
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id).reshape(-1, self.kv_cache_dim)
        seq = _ints(fb.seq_lens_cpu if getattr(fb, "seq_lens_cpu", None) is not None else fb.seq_lens)
        new = _ints(fb.extend_seq_lens_cpu if getattr(fb, "extend_seq_lens_cpu", None) is not None
                    else fb.extend_seq_lens)
        rpi = _ints(fb.req_pool_indices)
        out = torch.empty(q.shape[0], q.shape[1], self.kv_lora_rank, dtype=torch.float32, device=q.device)
        row = 0
        for i, (L, m) in enumerate(zip(seq, new)):
            keys = kv[self.req_to_token[rpi[i], :L].long()].float()
            qi = q[row:row + m].float()
            s = torch.einsum("thd,kd->thk", qi, keys) * float(layer.scaling)
            limit = L - m + torch.arange(m, device=q.device)
            mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
            s = s.masked_fill(~mask[:, None, :], float("-inf"))
            out[row:row + m] = torch.einsum("thk,kd->thd", torch.softmax(s, -1), keys[:, :self.kv_lora_rank])
            row += m
        return out

    def mha(self, q, k, v, layer, fb):
        """Causal MHA per request over the keys given: the new tokens only
        (no prefix) or each request's whole keys (MHA_ONE_SHOT)."""
        torch = self._torch
        heads, dqk, dv = int(layer.tp_q_head_num), int(layer.head_dim), int(layer.v_head_dim)
        new = _ints(fb.extend_seq_lens_cpu if getattr(fb, "extend_seq_lens_cpu", None) is not None
                    else fb.extend_seq_lens)
        seq = _ints(fb.seq_lens_cpu if getattr(fb, "seq_lens_cpu", None) is not None else fb.seq_lens)
        q3 = q.reshape(-1, heads, dqk)
        k3 = k.reshape(-1, int(layer.tp_k_head_num), dqk)
        v3 = v.reshape(-1, int(layer.tp_v_head_num), dv)
        keys = new if k3.shape[0] == sum(new) else seq
        out = torch.empty(q3.shape[0], heads, dv, dtype=q.dtype, device=q.device)
        row = key = 0
        for m, L in zip(new, keys):
            qi = q3[row:row + m].float().transpose(0, 1)
            ki = k3[key:key + L].float().transpose(0, 1)
            vi = v3[key:key + L].float().transpose(0, 1)
            s = torch.matmul(qi, ki.transpose(-1, -2)) * float(layer.scaling)
            limit = L - m + torch.arange(m, device=q.device)
            mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
            s = s.masked_fill(~mask[None], float("-inf"))
            out[row:row + m] = torch.matmul(torch.softmax(s, -1), vi).transpose(0, 1).to(q.dtype)
            row += m
            key += L
        return out.reshape(-1, heads * dv)


# ---------------------------------------------------------------- registration


def create_backend(model_runner, *args, **kwargs):
    """The factory sglang's attention registry calls with its model
    runner: an AttnplugMLABackend (its kernel backend from
    $ATTNPLUG_KERNEL_BACKEND, else fa3)."""
    return AttnplugMLABackend(model_runner, *args, **kwargs)


def _dispatch_handler(kernel_backend, registry_cls):
    """A DeepSeek dispatch handler for the attnplug name: the handler of
    the kernel backend's name at call time (attnplug's drop-in when
    installed, else sglang's own), so that the model chooses the forward
    methods that backend's rules choose."""

    def handle_attention_attnplug(attn, forward_batch):
        return registry_cls.get_handler(kernel_backend)(attn, forward_batch)

    return handle_attention_attnplug


def register_backend(name=BACKEND_NAME, kernel_backend=None):
    """Makes ``--attention-backend NAME`` (default attnplug) an sglang
    choice that builds an AttnplugMLABackend, through the mechanism the
    installed sglang has, and returns which ("attention_registry",
    "model_runner") or None where none is found (or sglang is absent):

    1. sglang since PR #10629 (2025-09): ``register_attention_backend`` of
       sglang.srt.layers.attention.attention_registry, and the name added
       to ``ATTENTION_BACKEND_CHOICES`` of sglang.srt.server_args
       (``add_attention_backend_choices`` where it exists);
    2. older sglang: ModelRunner._get_attention_backend_from_str is wrapped
       to build the backend for NAME.

    Where sglang keeps lists of the backends that run MLA models and the
    chunked prefix cache (MLA_ATTENTION_BACKENDS and
    CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS of model_runner or
    server_args, in the releases that check them), NAME joins the first,
    and the second where kernel_backend is in it (the fallback runs the
    chunked prefix). It also registers a DeepSeek dispatch handler for NAME
    in sglang's AttentionBackendRegistry, which answers as kernel_backend's
    rules. Safe to call again; never raises."""
    kernel = kernel_backend or os.environ.get(ENV_KERNEL_BACKEND) or DEFAULT_KERNEL_BACKEND
    how = None
    try:
        from sglang.srt.layers.attention import attention_registry as ar
        if name not in ar.ATTENTION_BACKENDS:
            ar.register_attention_backend(name)(create_backend)
        how = "attention_registry"
    except ImportError:
        how = _wrap_model_runner(name)
    except Exception as exc:
        log.warning("attnplug: registering the %s attention backend failed (%s: %s)", name, type(exc).__name__, exc)
    try:
        from sglang.srt import server_args as sa
        choices = getattr(sa, "ATTENTION_BACKEND_CHOICES", None)
        if choices is not None and name not in choices:
            add = getattr(sa, "add_attention_backend_choices", None)
            if add is not None:
                add([name])
            else:
                choices.append(name)
    except Exception:
        pass
    _join_backend_lists(name, kernel)
    try:
        from attnplug import sglang as aps
        mod = __import__(aps.HANDLER_MODULE, fromlist=["AttentionBackendRegistry"])
        reg = mod.AttentionBackendRegistry
        handlers = getattr(reg, "_handlers", {})
        if name not in handlers and (getattr(reg, "_attnplug_registry", None) is None
                                     or name not in reg._attnplug_registry._local):
            reg.register(name, _dispatch_handler(kernel, reg))
    except Exception:
        pass
    return how


def _join_backend_lists(name, kernel):
    lists = (("MLA_ATTENTION_BACKENDS", "add_mla_attention_backend", True),
             ("CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS", "add_chunked_prefix_cache_attention_backend", False))
    for modname in ("sglang.srt.model_executor.model_runner", "sglang.srt.server_args"):
        try:
            mod = __import__(modname, fromlist=["_"])
        except Exception:
            continue
        for list_name, adder, always in lists:
            names = getattr(mod, list_name, None)
            if not isinstance(names, list) or name in names or not (always or kernel in names):
                continue
            add = getattr(mod, adder, None)
            try:
                add(name) if add is not None else names.append(name)
            except Exception:
                pass


def _wrap_model_runner(name):
    try:
        from sglang.srt.model_executor import model_runner as mr
    except Exception:
        return None
    cls = mr.ModelRunner
    orig = cls.__dict__.get("_get_attention_backend_from_str")
    if orig is None:
        return None
    names = getattr(orig, "_attnplug_names", None)
    if names is not None:
        names.add(name)
        return "model_runner"
    names = {name}

    def _get_attention_backend_from_str(self, backend_str, *args, **kwargs):
        if backend_str in names:
            return create_backend(self)
        return orig(self, backend_str, *args, **kwargs)

    _get_attention_backend_from_str._attnplug_names = names
    cls._get_attention_backend_from_str = _get_attention_backend_from_str
    return "model_runner"


def sglang_plugin():
    """The ``sglang.srt.plugins`` entry point (sglang's plugin framework,
    since PR #21388, 2026-04: load_plugins() calls it in every process):
    registers the attnplug attention backend. Never raises."""
    try:
        register_backend()
    except Exception as exc:  # never into sglang's start
        log.warning("attnplug: the sglang plugin did not register its backend (%s: %s)", type(exc).__name__, exc)
