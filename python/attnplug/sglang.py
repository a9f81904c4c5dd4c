"""attnplug behind sglang's AttentionBackendRegistry.

sglang asks, for every DeepSeek attention layer of every forward pass,
``AttentionBackendRegistry.get_handler(backend)(attn, forward_batch)`` which
AttnForwardMethod to run. install() swaps that registry, in place, for an
AttentionBackendRegistry whose handlers ask a running ``attnplug serve``:

- each handler reads exactly what sglang's handlers read (the forward mode
  and its predicates, extend_prefix_lens_cpu, seq_lens_cpu,
  get_max_chunk_capacity(), the layer's flags, the server args, the
  CUDA-graph state, the DSA backend's use_mha), and only the facts that the
  rules serving its name declare (the server's Describe);
- answers are cached by those facts, so that after warm-up a forward pass
  makes no RPC; a miss asks the server, in one DispatchBatch call with the
  misses of other threads that wait at the same time;
- a hot swap on the server (Watch) drops the cached answers of the names it
  changed, so that the new plugin answers from the next call on;
- when the server cannot be reached, sglang's triton rules answer in
  process, with one warning, and the handler never raises.
"""

import enum
import importlib
import logging
import threading

from attnplug import client as _client
from attnplug._pb import dispatch_pb2

__all__ = [
    "AttentionBackendRegistry",
    "AttnForwardMethod",
    "SglangRuntime",
    "HANDLER_MODULE",
    "install",
    "uninstall",
]

log = logging.getLogger("attnplug.sglang")

#: The sglang module that holds AttentionBackendRegistry and the handlers.
HANDLER_MODULE = "sglang.srt.models.deepseek_common.attention_backend_handler"
_METHODS_MODULE = "sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods"


class _AttnForwardMethodMirror(enum.IntEnum):
    """sglang's AttnForwardMethod, for a process without sglang: the same
    members in the same order."""

    MHA = enum.auto()
    MLA = enum.auto()
    MHA_CHUNKED_KV = enum.auto()
    MHA_ONE_SHOT = enum.auto()
    MLA_FUSED_ROPE_ROCM = enum.auto()
    MLA_FUSED_ROPE_CPU = enum.auto()
    MHA_NPU = enum.auto()
    MLA_NPU = enum.auto()
    DSA_NPU = enum.auto()


def _sglang_methods():
    try:
        return importlib.import_module(_METHODS_MODULE).AttnForwardMethod
    except Exception:  # sglang not installed, or not importable here
        return _AttnForwardMethodMirror


#: sglang's AttnForwardMethod when sglang is importable, else a mirror with
#: the same members.
AttnForwardMethod = _sglang_methods()


def _false(*_):
    return False


def _none():
    return None


class _NoServerArgs:
    enable_deterministic_inference = False


def _default_server_args():
    return _NoServerArgs


def _default_intel_amx(layer):
    return getattr(layer, "use_intel_amx_backend", False)


class SglangRuntime:
    """What sglang's handlers read from the process, besides the layer and
    the batch: each a callable, as sglang's handler module imports it.

    from_module takes them from sglang's handler module itself (the very
    functions sglang's handlers call); the defaults stand for a process
    without sglang: no CUDA graph, no deterministic inference, no DSA or
    two-batch-overlap backend, no prefill context parallelism, not ROCm.
    """

    def __init__(self, *, is_in_tc_piecewise_cuda_graph=_false, is_in_breakable_cuda_graph=_false,
                 get_server_args=_default_server_args, get_attn_backend=_none, TboAttnBackend=None,
                 mla_use_prefill_cp=_false, is_hip=_false, use_intel_amx_backend=_default_intel_amx,
                 AttnForwardMethod=None):
        self.is_in_tc_piecewise_cuda_graph = is_in_tc_piecewise_cuda_graph
        self.is_in_breakable_cuda_graph = is_in_breakable_cuda_graph
        self.get_server_args = get_server_args
        self.get_attn_backend = get_attn_backend
        # isinstance against an empty tuple is always False.
        self.TboAttnBackend = TboAttnBackend if TboAttnBackend is not None else ()
        self.mla_use_prefill_cp = mla_use_prefill_cp
        self.is_hip = is_hip
        self.use_intel_amx_backend = use_intel_amx_backend
        self.AttnForwardMethod = AttnForwardMethod or _sglang_methods()

    @classmethod
    def from_module(cls, module):
        """The runtime that sglang's handler module reads: its imports, by
        the names it gives them (older sglang names where the current ones
        are absent), and its ``_is_hip``, read at every call."""
        g = module.__dict__

        def pick(*names, default):
            for n in names:
                if n in g:
                    return g[n]
            return default

        return cls(
            is_in_tc_piecewise_cuda_graph=pick("is_in_tc_piecewise_cuda_graph", "is_in_piecewise_cuda_graph", default=_false),
            is_in_breakable_cuda_graph=pick("is_in_breakable_cuda_graph", default=_false),
            get_server_args=pick("get_server_args", "get_global_server_args", default=_default_server_args),
            get_attn_backend=pick("get_attn_backend", default=_none),
            TboAttnBackend=pick("TboAttnBackend", default=None),
            mla_use_prefill_cp=pick("mla_use_prefill_cp", default=_false),
            is_hip=lambda: g.get("_is_hip", False),
            use_intel_amx_backend=pick("use_intel_amx_backend", default=_default_intel_amx),
            AttnForwardMethod=pick("AttnForwardMethod", default=None),
        )

    def dsa_use_mha(self, backend):
        """The DSA backend's prefill choice, read as sglang's dsa handler
        reads it: through a two-batch-overlap wrapper to its primary."""
        if isinstance(backend, self.TboAttnBackend):
            backend = backend.primary
        return bool(hasattr(backend, "use_mha") and backend.use_mha)


def _has(obj, name):
    """Calls the predicate name of obj; a predicate obj lacks is false."""
    f = getattr(obj, name, None)
    return bool(f()) if f is not None else False


# The wire's forward modes, and the mode that stands for a forward mode
# attnplug does not know by name, chosen by the predicates sglang's rules
# call: every rule reads the mode through them.
_MODE_VALUES = {name: dispatch_pb2.ForwardMode.Value("FORWARD_MODE_" + name) for name in _client.FORWARD_MODES}


def _classify_mode(m):
    if _has(m, "is_target_verify"):
        return _MODE_VALUES["TARGET_VERIFY"]
    if _has(m, "is_extend_without_speculative"):
        return _MODE_VALUES["EXTEND"]
    if _has(m, "is_decode"):
        return _MODE_VALUES["DECODE"]
    if _has(m, "is_draft_extend_v2"):
        return _MODE_VALUES["DRAFT_EXTEND_V2"]
    return _MODE_VALUES["IDLE"]


class _ModeKeys(dict):
    """Maps a forward mode to its wire value. Enum members (sglang's
    ForwardMode) are remembered; any other object is classified by its
    predicates at every call."""

    def classify(self, m):
        name = getattr(m, "name", None)
        v = _MODE_VALUES.get(name) if isinstance(m, enum.Enum) else None
        if v is None:
            v = _classify_mode(m)
        if isinstance(m, enum.Enum) and len(self) < 256:
            self[m] = v
        return v


# The expression each fact adds to a handler's cache key, written over the
# handler's arguments (attn, fb) and the values of _PRELUDES. Every flag is
# negated so that any truthy value sglang holds (a tensor, an int) keys as
# a bool. None: the fact is the same for every call of this client (the
# DSA backend's choice is always given; compute capability and KV cache
# dtype are not sent).
_FACT_KEYS = {
    "mode": "mk",
    "platform": "not is_hip()",
    "piecewise_cuda_graph": "not piecewise()",
    "breakable_cuda_graph": "not breakable()",
    "deterministic_inference": "not server_args().enable_deterministic_inference",
    "dsa_use_mha": "not dsa_use_mha(backend)",
    "two_batch_overlap": "not isinstance(backend, tbo)",
    "mla_prefill_cp": "not prefill_cp(fb)",
    "disable_chunked_prefix_cache": "not getattr(attn, 'disable_chunked_prefix_cache', False)",
    "flashinfer_mla_disable_ragged": "not getattr(attn, 'flashinfer_mla_disable_ragged', False)",
    "rocm_fused_decode_mla": "not getattr(attn, 'rocm_fused_decode_mla', False)",
    "use_dsa": "not getattr(attn, 'use_dsa', False)",
    "fused_qkv_a_proj_with_mqa": "hasattr(attn, 'fused_qkv_a_proj_with_mqa')",
    "intel_amx": "not intel_amx(attn)",
    "prefix_sum_zero": "not ps == 0",
    "prefix_sum_at_threshold": "not ps >= getattr(attn, 'chunked_prefix_cache_threshold', %d)"
                               % _client.DEFAULT_CHUNKED_PREFIX_CACHE_THRESHOLD,
    "seq_sum_within_capacity": "not ss <= fb.get_max_chunk_capacity()",
    "dsa_use_mha_set": None,
    "dense_dsa_device": None,
    "kv_cache_dense_dtype": None,
}

# What a fact's expression needs computed first.
_FACT_NEEDS = {
    "mode": "mode", "dsa_use_mha": "backend", "two_batch_overlap": "backend",
    "prefix_sum_zero": "ps", "prefix_sum_at_threshold": "ps", "seq_sum_within_capacity": "ss",
}

_PRELUDES = (
    ("mode", ("m = fb.forward_mode", "mk = mode_get(m)", "if mk is None:", "    mk = mode_classify(m)")),
    ("backend", ("backend = attn_backend()",)),
    ("ps", ("p = fb.extend_prefix_lens_cpu", "ps = 0 if p is None else sum(p)")),
    ("ss", ("s = fb.seq_lens_cpu", "ss = 0 if s is None else sum(s)")),
    ("mx", ("s = fb.seq_lens_cpu", "mx = max(s) if s is not None and len(s) else 0")),
)

_HANDLER_HEAD = """\
def factory(cache_get, slow, mode_get, mode_classify, is_hip, piecewise, breakable, server_args,
            attn_backend, dsa_use_mha, tbo, prefill_cp, intel_amx):
    def handle(attn, forward_batch):
        fb = forward_batch
        try:
"""

_HANDLER_TAIL = """\
            m = cache_get(key)
        except Exception as exc:
            return slow(attn, fb, None, exc)
        if m is None:
            return slow(attn, fb, key, None)
        return m
    return handle
"""


# The facts whose value is the same in every request of this client: it
# always gives the DSA backend's choice (dsa_use_mha_set).
_FACT_CONSTANTS = {"dsa_use_mha_set": True}


def _key_parts(reads):
    """The expressions of a key by reads, and the preludes they need; None
    when a fact is one this client does not know."""
    keys, needs = [], set()
    for fact in sorted(reads.facts):
        if fact not in _FACT_KEYS:
            return None
        expr = _FACT_KEYS[fact]
        if expr is not None:
            keys.append(expr)
            needs.add(_FACT_NEEDS.get(fact))
    for c in reads.prefix_sum_at_least:
        keys.append("not ps >= %d" % c)
        needs.add("ps")
    for c in reads.seq_sum_at_most:
        keys.append("not ss <= %d" % c)
        needs.add("ss")
    for c in reads.max_seq_len_at_most:
        keys.append("not mx <= %d" % c)
        needs.add("mx")
    return keys, needs


def _branches(reads, full):
    """The keys a handler chooses between, in order: (test, parts), the
    test an expression that holds where a condition of reads holds, None
    for the branch that keys every other call. A condition that holds in
    every call of this client (_FACT_CONSTANTS) ends the list; one whose
    fact this client cannot test, or whose reads it does not know, is
    left out (the whole reads key those calls, which is correct)."""
    out = []
    for c in reads.conditions:
        parts = _key_parts(c.reads)
        expr = _FACT_KEYS.get(c.when)
        if parts is None or c.reads.conditions:
            continue
        if _FACT_CONSTANTS.get(c.when) is True:
            out.append((None, parts))
            return out
        if c.when in _FACT_CONSTANTS or expr is None or not expr.startswith("not "):
            continue
        out.append((expr[len("not "):], parts))
    out.append((None, full))
    return out


def _prelude_lines(needs, done=frozenset()):
    return [line for need, code in _PRELUDES if need in needs and need not in done for line in code]


def _key_line(keys, tag=None):
    if tag is not None:
        keys = ["%d" % tag] + keys
    return "key = (%s)" % (", ".join(keys) + ("," if len(keys) == 1 else ""))


def handler_source(reads):
    """The source of a factory of handlers that key answers by reads (a
    client.Reads): each reads what the facts need, and nothing else; or
    None when a fact is one this client does not know, whose answers are
    then never cached.

    Where reads hold conditions (client.ReadsCondition), the handler tests
    them first, in order, and keys a call where one holds by that
    condition's reads alone, with the condition's number in the key; a
    condition that always holds for this client (the DSA backend's choice,
    which it always gives) leaves a handler that keys every call by that
    condition's reads, and computes nothing else."""
    full = _key_parts(reads)
    if full is None:
        return None
    branches = _branches(reads, full)
    if len(branches) == 1:
        keys, needs = branches[0][1]
        lines = _prelude_lines(needs) + [_key_line(keys)]
        return _HANDLER_HEAD + "".join(" " * 12 + line + "\n" for line in lines) + _HANDLER_TAIL
    tested = {_FACT_NEEDS.get(c.when) for c in reads.conditions}
    tested = {n for n in tested if n is not None}
    lines = [(12, line) for line in _prelude_lines(tested)]
    for i, (test, (keys, needs)) in enumerate(branches):
        head = "else:" if test is None else ("if %s:" if i == 0 else "elif %s:") % test
        lines.append((12, head))
        lines += [(16, line) for line in _prelude_lines(needs, tested) + [_key_line(keys, i)]]
    return _HANDLER_HEAD + "".join(" " * n + line + "\n" for n, line in lines) + _HANDLER_TAIL


# The most answers one name keeps; past it, new keys are asked every time
# (as the server's own cache does).
_CACHE_LIMIT = 4096


class _Slot:
    """One backend name's handler, cache and route at one description."""

    __slots__ = ("name", "route", "generation", "cache", "handle", "retired")

    def __init__(self, name, route, generation):
        self.name = name
        self.route = route
        self.generation = generation
        self.cache = {}
        self.handle = None
        self.retired = False

    def keeps(self, answer):
        """Whether answer is the rules' own for its key (see
        DescribeResponse in the .proto): from this slot's generation and
        route."""
        r = self.route
        return (r is not None and r.cacheable and answer.generation == self.generation
                and answer.handler == r.handler and answer.plugin == r.plugin
                and bool(answer.fallback) == bool(r.fallback))


class _Waiter:
    __slots__ = ("request", "answer", "error", "done")

    def __init__(self, request):
        self.request = request
        self.answer = None
        self.error = None
        self.done = threading.Event()


class AttentionBackendRegistry:
    """A drop-in for sglang's AttentionBackendRegistry whose handlers ask
    the ``attnplug serve`` at address (see client.Client).

    get_handler(name) returns a handler taking sglang's (attn,
    forward_batch) and returning an AttnForwardMethod member of
    runtime.AttnForwardMethod; register(name, func) makes func the handler
    of name, ahead of the server. runtime (a SglangRuntime) is what the
    handlers read from the process; default: sglang's handler module when
    sglang is importable, else SglangRuntime().

    The registry connects at once and waits up to timeout seconds for the
    server's description; until it has one, and whenever the server is
    unreachable, handlers answer by the triton rules in process. It follows
    the server's reloads from a background thread. Safe for concurrent use;
    close() ends the thread and the connection.
    """

    def __init__(self, address=None, *, runtime=None, timeout=2.0, client=None):
        if runtime is None:
            try:
                runtime = SglangRuntime.from_module(importlib.import_module(HANDLER_MODULE))
            except Exception:
                runtime = SglangRuntime()
        self.runtime = runtime
        self._client = client or _client.Client(address, timeout=timeout)
        self._members = {m.name: m for m in runtime.AttnForwardMethod}
        self._modes = _ModeKeys()
        self._lock = threading.Lock()
        self._handles = {}  # name -> handler function: the hot path
        self._slots = {}  # name -> _Slot
        self._local = {}  # name -> a handler registered here
        self._desc = None
        self._down = False
        self._legacy = False  # a server without Describe and Watch
        self._closed = threading.Event()
        self._described = threading.Event()
        self._warned = set()
        self._pending = []
        self._inflight = False
        self._watch = None
        # Counters, read by stats().
        self._rpcs = 0
        self._rpc_requests = 0
        self._local_answers = 0
        self._thread = threading.Thread(target=self._follow, name="attnplug-watch", daemon=True)
        self._thread.start()
        if not self._described.wait(timeout):
            self._set_down("no description from %s within %.1fs" % (self._client.address, timeout))

    # The surface of sglang's registry.

    def register(self, backend_name, handler_func):
        """Makes handler_func the handler of backend_name, ahead of the
        server (as sglang's register does)."""
        with self._lock:
            self._local[backend_name] = handler_func
            self._handles[backend_name] = handler_func

    def get_handler(self, backend_name):
        """The handler of backend_name: a registered one, else one that asks
        the server (any name: one nobody serves gets the triton rules)."""
        h = self._handles.get(backend_name)
        if h is None:
            h = self._slot(backend_name).handle
        return h

    # Life.

    def close(self):
        """Stops following the server and closes the connection."""
        self._closed.set()
        w = self._watch
        if w is not None:
            w.cancel()
        self._client.close()
        self._thread.join(timeout=5)

    def stats(self):
        """Counters: rpcs (calls to the server), rpc_requests (requests in
        them), local_answers (answered by the triton rules in process),
        generation (of the description in use, 0 without one), connected."""
        d = self._desc
        return {"rpcs": self._rpcs, "rpc_requests": self._rpc_requests, "local_answers": self._local_answers,
                "generation": d.generation if d else 0, "connected": not self._down}

    @property
    def client(self):
        """The client.Client the registry asks."""
        return self._client

    # Handlers.

    def _slot(self, name):
        with self._lock:
            s = self._slots.get(name)
            if s is None:
                s = self._new_slot(name)
                if name not in self._local:
                    self._handles[name] = s.handle
            return s

    def _new_slot(self, name):
        """Builds the slot of name from the description in use; _lock
        held."""
        d = self._desc
        route = d.route(name) if d is not None and isinstance(name, str) else None
        s = _Slot(name, route, d.generation if d is not None else 0)
        src = handler_source(route.reads) if route is not None and route.cacheable else None
        if src is None:
            # Nothing to key by: every call goes to the server.
            src = handler_source(_client.Reads())
            s.cache = _NeverCache()
        ns = {}
        exec(compile(src, "<attnplug handler %s>" % name, "exec"), ns)
        rt = self.runtime

        def slow(attn, fb, key, exc, slot=s):
            return self._slow(slot, attn, fb, key, exc)

        s.handle = ns["factory"](
            s.cache.get, slow, self._modes.get, self._modes.classify, rt.is_hip,
            rt.is_in_tc_piecewise_cuda_graph, rt.is_in_breakable_cuda_graph, rt.get_server_args,
            rt.get_attn_backend, rt.dsa_use_mha, rt.TboAttnBackend, rt.mla_use_prefill_cp,
            rt.use_intel_amx_backend)
        self._slots[name] = s
        return s

    def _slow(self, slot, attn, fb, key, exc):
        """A call that the cache did not answer. Never raises."""
        try:
            if exc is not None:
                self._warn_once(("read", slot.name, type(exc).__name__),
                                "reading the layer, batch or runtime of %r failed (%s: %s); the triton rules answer",
                                slot.name, type(exc).__name__, exc)
                return self._triton(attn, fb)
            if slot.retired:
                return self.get_handler(slot.name)(attn, fb)
            if self._down:
                return self._triton(attn, fb)
            answer = self._ask(self._request(slot.name, attn, fb))
            if answer is None:
                return self._triton(attn, fb)
            if answer.error:
                self._warn_once(("answer", slot.name), "the server could not decide a request for %r (%s); "
                                "the triton rules answer such requests", slot.name, answer.error)
                return self._triton(attn, fb)
            member = self._members[answer.method]
            if key is not None and slot.keeps(answer) and len(slot.cache) < _CACHE_LIMIT and not slot.retired:
                slot.cache[key] = member
            return member
        except Exception as err:  # never into the forward pass
            self._warn_once(("internal", type(err).__name__), "attnplug handler failed (%s: %s); the triton rules answer",
                            type(err).__name__, err)
            try:
                return self._triton(attn, fb)
            except Exception:
                return self._members["MLA"]

    def _triton(self, attn, fb):
        """sglang's triton rules, in process."""
        self._local_answers += 1
        return self._members[triton_method(self.runtime, attn, fb)]

    # The server.

    def _request(self, name, attn, fb):
        """The wire request for one handler call."""
        rt = self.runtime
        r = dispatch_pb2.Request(backend=name)
        b = r.batch
        m = fb.forward_mode
        b.forward_mode = self._modes.get(m) or self._modes.classify(m)
        p = fb.extend_prefix_lens_cpu
        if p is not None:
            b.extend_prefix_lens.extend(_ints(p))
            b.extend_prefix_lens_known = True
        s = fb.seq_lens_cpu
        if s is not None:
            b.seq_lens.extend(_ints(s))
            b.seq_lens_known = True
        b.max_chunk_capacity = int(fb.get_max_chunk_capacity())
        b.mla_prefill_cp = bool(rt.mla_use_prefill_cp(fb))
        lay = r.layer
        # sglang compares sum(prefix) >= threshold, so a negative threshold
        # decides as 0 does; the server refuses negative thresholds.
        lay.chunked_prefix_cache_threshold = max(0, int(getattr(attn, "chunked_prefix_cache_threshold",
                                                                _client.DEFAULT_CHUNKED_PREFIX_CACHE_THRESHOLD)))
        lay.disable_chunked_prefix_cache = bool(getattr(attn, "disable_chunked_prefix_cache", False))
        lay.flashinfer_mla_disable_ragged = bool(getattr(attn, "flashinfer_mla_disable_ragged", False))
        lay.rocm_fused_decode_mla = bool(getattr(attn, "rocm_fused_decode_mla", False))
        lay.use_dsa = bool(getattr(attn, "use_dsa", False))
        lay.fused_qkv_a_proj_with_mqa = hasattr(attn, "fused_qkv_a_proj_with_mqa")
        lay.intel_amx = bool(rt.use_intel_amx_backend(attn))
        run = r.runtime
        d = self._desc
        if rt.is_hip():
            run.platform = dispatch_pb2.PLATFORM_HIP
        elif d is not None and d.platform == "hip":
            run.platform = dispatch_pb2.PLATFORM_CUDA  # sglang's rules read "not ROCm"
        run.piecewise_cuda_graph = bool(rt.is_in_tc_piecewise_cuda_graph())
        run.breakable_cuda_graph = bool(rt.is_in_breakable_cuda_graph())
        run.deterministic_inference = bool(rt.get_server_args().enable_deterministic_inference)
        backend = rt.get_attn_backend()
        run.two_batch_overlap = isinstance(backend, rt.TboAttnBackend)
        run.dsa_use_mha = rt.dsa_use_mha(backend)
        run.dsa_use_mha_set = True
        return r

    def _ask(self, request):
        """The server's answer to request, sent with the requests of the
        other threads that miss meanwhile; None when the server cannot be
        reached (it is then marked down)."""
        w = _Waiter(request)
        with self._lock:
            self._pending.append(w)
            lead = not self._inflight
            if lead:
                self._inflight = True
        if lead:
            self._lead()
        elif not w.done.wait(self._client.timeout * 2 + 1):
            return None
        if w.error is not None:
            self._set_down(str(w.error))
            return None
        return w.answer

    def _lead(self):
        """Sends the pending requests until none is left."""
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._inflight = False
                    return
            try:
                self._rpcs += 1
                self._rpc_requests += len(batch)
                answers = self._client.dispatch_protos([w.request for w in batch])
                for w, a in zip(batch, answers):
                    w.answer = a
            except Exception as err:
                for w in batch:
                    w.error = err
            for w in batch:
                w.done.set()

    def _follow(self):
        """Follows the server's description (the watch thread)."""
        backoff = 0.05
        while not self._closed.is_set():
            try:
                self._watch = self._client.watch()
                for d in self._watch:
                    self._apply(d)
                    backoff = 0.05
            except _client.ServerUnavailable as err:
                if self._closed.is_set():
                    return
                self._set_down(str(err))
            except _client.ServerError as err:
                if err.code is not None and err.code.name == "UNIMPLEMENTED":
                    self._legacy_server()
                    return
                self._set_down(str(err))
            except ValueError as err:  # the channel was closed under us
                if self._closed.is_set():
                    return
                self._set_down(str(err))
            self._closed.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def _apply(self, desc):
        """Switches to a new description: the names whose route changed get
        a new handler, and their old one forgets its answers."""
        with self._lock:
            self._desc = desc
            for name, s in list(self._slots.items()):
                if s.route is not None and desc.route(name) == s.route:
                    s.generation = desc.generation
                    continue
                s.retired = True
                s.cache.clear()
                ns = self._new_slot(name)
                if name not in self._local:
                    self._handles[name] = ns.handle
            was_down = self._down
            self._down = False
        if was_down:
            log.warning("attnplug server %s answering again (generation %d); its answers replace the triton rules",
                        self._client.address, desc.generation)
        self._described.set()

    def _legacy_server(self):
        self._warn_once(("legacy",), "attnplug server %s has no Describe/Watch (older than this client): "
                        "every handler call asks it", self._client.address)
        with self._lock:
            self._legacy = True
            self._down = False
        self._described.set()

    def _set_down(self, why):
        """Marks the server unreachable: one warning per outage; the caches
        go, since a hot swap would go unseen."""
        with self._lock:
            if self._down or self._closed.is_set():
                return
            self._down = True
            for s in self._slots.values():
                s.cache.clear()
        log.warning("attnplug server unreachable (%s); sglang's triton rules answer in process until it is back", why)

    def _warn_once(self, key, msg, *args):
        if key in self._warned or len(self._warned) > 1024:
            return
        self._warned.add(key)
        log.warning(msg, *args)


class _NeverCache(dict):
    """The cache of a name whose answers must not be cached."""

    def __setitem__(self, key, value):
        pass


def _ints(v):
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [int(x) for x in v]


def triton_method(runtime, attn, fb):
    """The name of the AttnForwardMethod that sglang's triton rules choose,
    reading what they read:

    1. inside a piecewise CUDA graph: MLA;
    2. with deterministic inference: the MLA subtype;
    3. an extend batch without speculation whose prefix lengths sum to 0
       (or are not known): MHA;
    4. anything else: the MLA subtype.

    The MLA subtype: on ROCm, MLA_FUSED_ROPE_ROCM for a decode batch of a
    layer with rocm_fused_decode_mla, else MLA; elsewhere
    MLA_FUSED_ROPE_CPU for a layer with the fused q/kv-a projection on the
    Intel AMX backend, else MLA.
    """
    if runtime.is_in_tc_piecewise_cuda_graph():
        return "MLA"
    if not runtime.get_server_args().enable_deterministic_inference:
        prefix = fb.extend_prefix_lens_cpu
        if fb.forward_mode.is_extend_without_speculative() and (prefix is None or sum(prefix) == 0):
            return "MHA"
    if runtime.is_hip():
        if getattr(attn, "rocm_fused_decode_mla", False) and fb.forward_mode.is_decode():
            return "MLA_FUSED_ROPE_ROCM"
        return "MLA"
    if hasattr(attn, "fused_qkv_a_proj_with_mqa") and runtime.use_intel_amx_backend(attn):
        return "MLA_FUSED_ROPE_CPU"
    return "MLA"


def _handler_module(module):
    return module if module is not None else importlib.import_module(HANDLER_MODULE)


def install(address=None, *, module=None, timeout=2.0, registry=None):
    """Swaps the AttentionBackendRegistry of sglang's handler module (module,
    default: imported by name) in place: its get_handler and register now
    go to an attnplug AttentionBackendRegistry (registry, default: one
    connected to address that reads the module's runtime), for every module
    that imported the class. Returns that registry. Installing again
    replaces the registry installed before."""
    mod = _handler_module(module)
    cls = mod.AttentionBackendRegistry
    if "_attnplug_saved" in cls.__dict__:
        uninstall(mod)
    reg = registry or AttentionBackendRegistry(address, runtime=SglangRuntime.from_module(mod), timeout=timeout)
    saved = {k: cls.__dict__[k] for k in ("register", "get_handler") if k in cls.__dict__}
    original_register = cls.register

    def register(backend_name, handler_func):
        original_register(backend_name, handler_func)  # uninstall keeps it
        reg.register(backend_name, handler_func)

    cls._attnplug_saved = saved
    cls._attnplug_registry = reg
    cls.register = staticmethod(register)
    cls.get_handler = staticmethod(reg.get_handler)
    log.info("sglang's AttentionBackendRegistry now asks attnplug at %s", reg.client.address)
    return reg


def uninstall(module=None):
    """Gives sglang its own registry back (with whatever was registered in
    the meantime) and closes the attnplug registry that install() put in.
    Does nothing when none is installed."""
    mod = _handler_module(module)
    cls = mod.AttentionBackendRegistry
    saved = cls.__dict__.get("_attnplug_saved")
    if saved is None:
        return
    reg = cls.__dict__["_attnplug_registry"]
    for k in ("register", "get_handler"):
        if k in saved:
            setattr(cls, k, saved[k])
        else:
            delattr(cls, k)
    del cls._attnplug_saved
    del cls._attnplug_registry
    reg.close()
