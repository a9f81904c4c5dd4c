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
- when the server cannot be reached, sglang's own handler of the name
  (install() hands them) or else its triton rules answer in process, with
  one warning, and the handler never raises.
"""

import enum
import importlib
import logging
import threading

from attnplug import _sglang
from attnplug import client as _client
from attnplug._pb import dispatch_pb2

__all__ = [
    "AttentionBackendRegistry",
    "AttnplugMLABackend",
    "AttnForwardMethod",
    "SglangRuntime",
    "HANDLER_MODULE",
    "handler_source",
    "handler_sends",
    "install",
    "register_backend",
    "sglang_registrations",
    "surrogate",
    "triton_method",
    "uninstall",
]

log = logging.getLogger("attnplug.sglang")

#: The sglang module that holds AttentionBackendRegistry and the handlers.
HANDLER_MODULE = _sglang.HANDLER_MODULE


#: sglang's AttnForwardMethod when sglang is importable, else a mirror with
#: the same members.
AttnForwardMethod = _sglang.sglang_methods()


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
        self.AttnForwardMethod = AttnForwardMethod or _sglang.sglang_methods()

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
    "mode": ("mode",), "dsa_use_mha": ("backend",), "two_batch_overlap": ("backend",),
    "prefix_sum_zero": ("ps",), "prefix_sum_at_threshold": ("ps",), "seq_sum_within_capacity": ("ss", "cap"),
}

_PRELUDES = (
    ("mode", ("m = fb.forward_mode", "mk = mode_get(m)", "if mk is None:", "    mk = mode_classify(m)")),
    ("backend", ("backend = attn_backend()",)),
    ("ps", ("p = fb.extend_prefix_lens_cpu", "ps = 0 if p is None else sum(p)")),
    ("ss", ("s = fb.seq_lens_cpu", "ss = 0 if s is None else sum(s)")),
    ("mx", ("s = fb.seq_lens_cpu", "mx = max(s) if s is not None and len(s) else 0")),
)

# The request fields each need reads: a request carries the batch's lists
# and chunk capacity only where the rules of its key read them.
_NEED_SENDS = {"ps": "prefix", "ss": "seq", "mx": "seq", "cap": "capacity"}

#: Every field of a request that the batch's lists give.
_ALL_SENDS = frozenset(_NEED_SENDS.values())


def _sends(needs):
    """The batch fields a request keyed by needs carries."""
    return frozenset(_NEED_SENDS[n] for n in needs if n in _NEED_SENDS)


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
            needs.update(_FACT_NEEDS.get(fact, ()))
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
    return _handler(reads)[0]


def handler_sends(reads):
    """The batch fields (of _ALL_SENDS: prefix, seq, capacity) that the
    request of each key of handler_source(reads) carries: a list with one
    set for each branch, in the order of the branch number a key starts
    with (one set when the key has no branch number); None when
    handler_source is None."""
    return _handler(reads)[1]


def _handler(reads):
    full = _key_parts(reads)
    if full is None:
        return None, None
    branches = _branches(reads, full)
    if len(branches) == 1:
        keys, needs = branches[0][1]
        lines = _prelude_lines(needs) + [_key_line(keys)]
        src = _HANDLER_HEAD + "".join(" " * 12 + line + "\n" for line in lines) + _HANDLER_TAIL
        return src, [_sends(needs)]
    tested = set()
    for c in reads.conditions:
        tested.update(_FACT_NEEDS.get(c.when, ()))
    lines = [(12, line) for line in _prelude_lines(tested)]
    sends = []
    for i, (test, (keys, needs)) in enumerate(branches):
        head = "else:" if test is None else ("if %s:" if i == 0 else "elif %s:") % test
        lines.append((12, head))
        lines += [(16, line) for line in _prelude_lines(needs, tested) + [_key_line(keys, i)]]
        sends.append(_sends(set(needs) | tested))
    return _HANDLER_HEAD + "".join(" " * n + line + "\n" for n, line in lines) + _HANDLER_TAIL, sends


# The most answers one name keeps; past it, new keys are asked every time
# (as the server's own cache does).
_CACHE_LIMIT = 4096

# The server's limits on a request (core.MaxBatchSize, core.MaxLength,
# core.MaxBackendNameLen).
_MAX_ENTRIES = 1 << 16
_MAX_LENGTH = 1 << 40
_MAX_NAME_BYTES = 256


def _split(total, most):
    """Lengths of at most most that add up to total (one 0 for 0)."""
    out = [most] * (total // most) if most else []
    if total % most if most else total:
        out.append(total % most if most else total)
    return out or [0]


def surrogate(reads, attn, fb, sends=_ALL_SENDS):
    """Lists and a chunk capacity the server takes that have the facts the
    batch has for reads (a client.Reads): a dict of the fields of sends
    (prefix, seq, capacity; None for a list the batch does not give), or
    None when no batch the server takes has them.

    sglang's rules read the batch's lists only through these facts: the
    prefix sum against 0, the layer's threshold and constants, the sequence
    sum against the chunk capacity and constants, the longest sequence
    against constants. A batch the server refuses (more prefixes than
    sequences, a prefix longer than its sequence, a negative length or
    capacity) is asked as the valid batch with its facts, whose answer is
    the one sglang's rules give it, and the one the cache gives any batch
    with its facts: an answer never depends on what the cache holds."""
    inf = _MAX_ENTRIES * _MAX_LENGTH
    facts = reads.facts
    p = fb.extend_prefix_lens_cpu if "prefix" in sends else None
    s = fb.seq_lens_cpu if "seq" in sends else None
    box = {"P": [0, inf], "S": [0, inf], "M": [0, inf]}

    def holds(var, truth, lo=None, hi=None):
        # The fact var >= lo (or var <= hi) is truth: bound var's box.
        b = box[var]
        if lo is not None:
            if truth:
                b[0] = max(b[0], lo)
            else:
                b[1] = min(b[1], lo - 1)
        elif truth:
            b[1] = min(b[1], hi)
        else:
            b[0] = max(b[0], hi + 1)

    if p is not None:
        P = sum(_ints(p))
        if "prefix_sum_zero" in facts:
            holds("P", P == 0, hi=0)
        if "prefix_sum_at_threshold" in facts:
            t = int(getattr(attn, "chunked_prefix_cache_threshold", _client.DEFAULT_CHUNKED_PREFIX_CACHE_THRESHOLD))
            holds("P", P >= t, lo=max(0, t))
        for c in reads.prefix_sum_at_least:
            holds("P", P >= c, lo=max(0, c))
    lens = _ints(s) if s is not None else []
    S, M = sum(lens), max(lens) if lens else 0
    cap = None
    if "capacity" in sends:
        cap = int(fb.get_max_chunk_capacity())
        if "seq_sum_within_capacity" in facts:
            holds("S", S <= cap, hi=max(0, cap))
        cap = max(0, cap)
    if "seq" in sends:
        for c in reads.seq_sum_at_most:
            holds("S", S <= c, hi=max(-1, c))
        for c in reads.max_seq_len_at_most:
            holds("M", M <= c, hi=max(-1, c))
    if any(lo > hi or hi < 0 for lo, hi in box.values()):
        return None
    out = {"prefix": None, "seq": None, "capacity": cap}
    P = box["P"][0]
    S = max(box["S"][0], box["M"][0])
    send_seq = "seq" in sends and (s is not None or S > 0)
    if send_seq and p is not None:
        S = max(S, P)  # no prefix longer than its sequence
    if S > box["S"][1]:
        return None
    seq = None
    if send_seq:
        if reads.max_seq_len_at_most:
            M = min(box["M"][1], S, _MAX_LENGTH)
            if M < box["M"][0] or (S > 0 and (M == 0 or -(-S // M) > _MAX_ENTRIES)):
                return None
            seq = _split(S, M) if S else [0]
        else:
            seq = _split(S, _MAX_LENGTH)
        if len(seq) > _MAX_ENTRIES:
            return None
        out["seq"] = seq
    if p is not None:
        if seq is None:
            out["prefix"] = _split(P, _MAX_LENGTH)
        else:
            prefix, left = [], P
            for n in seq:
                take = min(n, left)
                prefix.append(take)
                left -= take
            out["prefix"] = prefix
    return out


class _Slot:
    """One backend name's handler, cache and route at one description."""

    __slots__ = ("name", "route", "generation", "cache", "handle", "retired", "sends")

    def __init__(self, name, route, generation):
        self.name = name
        self.route = route
        self.generation = generation
        self.cache = {}
        self.handle = None
        self.retired = False
        self.sends = None  # per branch, the batch fields a request carries (handler_sends)

    def sends_for(self, key):
        """The batch fields of the request that answers key."""
        b = self.sends
        if not b or key is None:
            return _ALL_SENDS
        return b[key[0]] if len(b) > 1 else b[0]

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
    unreachable, handlers answer in process: by sglang's own handler of
    their name (set_sglang_handlers), else by the triton rules. It follows
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
        self._native = {}  # name -> sglang's own handler (install() passes them)
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
        the server (any name: one nobody serves gets the triton rules). As
        sglang's registry, which answers every name it does not know with
        its triton handler, a name that is not a non-empty string (None,
        ""), or one longer than the server takes, gets the handler of
        "triton"."""
        h = self._handles.get(backend_name)
        if h is None:
            if not isinstance(backend_name, str) or not backend_name or len(backend_name) > _MAX_NAME_BYTES:
                return self.get_handler("triton")
            h = self._slot(backend_name).handle
        return h

    def set_sglang_handlers(self, handlers):
        """Gives the registry sglang's own handlers (name -> function, those
        of sglang's handler module; install() passes them). A name the
        server has no route for (decided there by the triton rules, as a
        name nobody serves) or routes to the triton rules for now (its
        plugin missing or not running here: the route's fallback) is
        answered by sglang's own handler of that name when there is one, as
        sglang would; so is a batch the server would refuse as malformed,
        and every call while the server is unreachable. Names the server
        routes to a plugin are answered by the server."""
        with self._lock:
            self._native = dict(handlers)
            for name, s in list(self._slots.items()):
                s.retired = True
                s.cache.clear()
                ns = self._new_slot(name)
                if name not in self._local:
                    self._handles[name] = ns.handle

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
        them), local_answers (answered in process: by sglang's own
        handlers or the triton rules),
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
        native = self._native.get(name)
        if d is not None and native is not None and name != "triton" and (name not in d.routes or route.fallback):
            # sglang has rules of its own for a name the server does not
            # route, or routes to the triton rules for now (its plugin
            # missing, or not running here): sglang's answer.
            s.route = None
            s.cache = _NeverCache()
            s.handle = native
            self._slots[name] = s
            return s
        src, sends = _handler(route.reads) if route is not None and route.cacheable else (None, None)
        if src is None:
            # Nothing to key by: every call goes to the server.
            src, sends = _handler(_client.Reads())[0], None
            s.cache = _NeverCache()
        s.sends = sends
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
                                "reading the layer, batch or runtime of %r failed (%s: %s); %s answer",
                                slot.name, type(exc).__name__, exc, self._local_rules(slot.name))
                return self._answer_here(slot.name, attn, fb)
            if slot.retired:
                return self.get_handler(slot.name)(attn, fb)
            if self._down:
                return self._answer_here(slot.name, attn, fb)
            sends = slot.sends_for(key)
            answer = self._ask(self._request(slot.name, attn, fb, sends))
            if answer is not None and answer.error_code == "INVALID_REQUEST":
                answer = self._ask_valid(slot, attn, fb, key, sends, answer)
                if answer is not None and answer.error_code == "INVALID_REQUEST":
                    return self._malformed(slot, attn, fb, answer.error)
            if answer is None:
                return self._answer_here(slot.name, attn, fb)
            if answer.error:
                self._warn_once(("answer", slot.name), "the server could not decide a request for %r (%s); "
                                "%s answer such requests", slot.name, answer.error, self._local_rules(slot.name))
                return self._answer_here(slot.name, attn, fb)
            member = self._members[answer.method]
            if key is not None and slot.keeps(answer) and len(slot.cache) < _CACHE_LIMIT and not slot.retired:
                slot.cache[key] = member
            return member
        except Exception as err:  # never into the forward pass
            self._warn_once(("internal", type(err).__name__), "attnplug handler failed (%s: %s); %s answer",
                            type(err).__name__, err, self._local_rules(slot.name))
            return self._answer_here(slot.name, attn, fb)

    def _local_rules(self, name):
        return "sglang's own rules" if self._native.get(name) is not None else "the triton rules"

    def _answer_here(self, name, attn, fb):
        """An answer made in process, when the server gives none: sglang's
        own handler of name where install() handed one (the reference's
        answer), else sglang's triton rules. Never raises."""
        self._local_answers += 1
        native = self._native.get(name)
        try:
            if native is not None:
                return native(attn, fb)
            return self._members[triton_method(self.runtime, attn, fb)]
        except Exception:
            try:
                return self._members[triton_method(self.runtime, attn, fb)]
            except Exception:
                return self._members["MLA"]

    def _ask_valid(self, slot, attn, fb, key, sends, refused):
        """The server's answer to the valid batch with the facts of a batch
        it refused (surrogate), when the name's answers are keyed by facts;
        else refused."""
        r = slot.route
        if key is None or r is None or not r.cacheable:
            return refused
        lists = surrogate(r.reads, attn, fb, sends)
        if lists is None:
            return refused
        return self._ask(self._request(slot.name, attn, fb, sends, lists))

    def _malformed(self, slot, attn, fb, why):
        """A batch the server refuses that no valid batch stands for (a name
        whose answers are not keyed by facts, or facts no valid batch has):
        answered as sglang answers it, by sglang's own handler of the name
        when the registry has it (set_sglang_handlers), else by the triton
        rules; never cached. Never raises."""
        self._warn_once(("malformed", slot.name), "a batch for %r is one the server refuses (%s); %s answer such "
                        "batches", slot.name, why, self._local_rules(slot.name))
        return self._answer_here(slot.name, attn, fb)

    # The server.

    def _request(self, name, attn, fb, sends=_ALL_SENDS, lists=None):
        """The wire request for one handler call. Of the batch's lists and
        chunk capacity, it carries those in sends: what the rules of the
        key read (handler_sends), so that the server checks only what they
        read. lists (from surrogate) replaces them."""
        rt = self.runtime
        r = dispatch_pb2.Request(backend=name)
        b = r.batch
        m = fb.forward_mode
        b.forward_mode = self._modes.get(m) or self._modes.classify(m)
        if "prefix" in sends:
            p = fb.extend_prefix_lens_cpu if lists is None else lists["prefix"]
            if p is not None:
                b.extend_prefix_lens.extend(_ints(p))
                b.extend_prefix_lens_known = True
        if "seq" in sends:
            s = fb.seq_lens_cpu if lists is None else lists["seq"]
            if s is not None:
                b.seq_lens.extend(_ints(s))
                b.seq_lens_known = True
        if "capacity" in sends:
            b.max_chunk_capacity = int(fb.get_max_chunk_capacity() if lists is None else lists["capacity"])
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
            log.warning("attnplug server %s answering again (generation %d); its answers replace the local ones",
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
        log.warning("attnplug server unreachable (%s); sglang's own rules (or its triton rules, for a name it has "
                    "none of) answer in process until it is back", why)

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


_BACKEND_NAMES = ("AttnplugMLABackend", "register_backend")


def __getattr__(name):
    # The attention backend (attnplug.sglang_backend) is imported when it
    # is first asked for: the dispatch side needs neither torch nor it.
    if name in _BACKEND_NAMES:
        from attnplug import sglang_backend
        return getattr(sglang_backend, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def sglang_registrations(module):
    """The handlers registered in the AttentionBackendRegistry of sglang's
    handler module, split in two dicts (name -> function): sglang's own (a
    function of the handler module, registered under its name there; the
    server runs the same rules) and the others (registered by anyone else:
    a platform plugin, a user), which install() keeps ahead of the server
    as sglang would call them."""
    handlers = dict(getattr(module.AttentionBackendRegistry, "_handlers", None) or {})
    native, custom = {}, {}
    for name, func in handlers.items():
        own = (getattr(func, "__module__", None) == module.__name__
               and getattr(module, getattr(func, "__name__", ""), None) is func)
        (native if own else custom)[name] = func
    return native, custom


def install(address=None, *, module=None, timeout=2.0, registry=None, attention_backend=False):
    """Swaps the AttentionBackendRegistry of sglang's handler module (module,
    default: imported by name) in place: its get_handler and register now
    go to an attnplug AttentionBackendRegistry (registry, default: one
    connected to address that reads the module's runtime), for every module
    that imported the class. Returns that registry. Installing again
    replaces the registry installed before.

    Precedence, as sglang sees its registry: a handler registered before
    install() by anyone but sglang's handler module (a platform plugin, a
    user) keeps answering its name, ahead of the server, and so does one
    registered after it; sglang's own handlers give way to the server,
    which runs the same rules, except for a name the server does not route,
    which sglang's own handler answers (sglang_registrations,
    AttentionBackendRegistry.set_sglang_handlers).

    With attention_backend, the ``attnplug`` attention backend is
    registered in sglang too (attnplug.sglang_backend.register_backend:
    ``--attention-backend attnplug`` runs the plugins' kernels)."""
    mod = _handler_module(module)
    cls = mod.AttentionBackendRegistry
    if "_attnplug_saved" in cls.__dict__:
        uninstall(mod)
    if attention_backend:
        from attnplug import sglang_backend
        sglang_backend.register_backend()
    reg = registry or AttentionBackendRegistry(address, runtime=SglangRuntime.from_module(mod), timeout=timeout)
    native, custom = sglang_registrations(mod)
    reg.set_sglang_handlers(native)
    for name, func in custom.items():
        reg.register(name, func)
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
