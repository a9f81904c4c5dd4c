"""Client of a running ``attnplug serve``: its gRPC engine API.

Requests are dicts in the dispatch format of ``attnplug dispatch`` (the
field names, values and defaults of docs/dispatch.md), so that one request
means the same through the command line, ``dispatch --connect``, Go and
Python.
"""

import collections
import dataclasses
import os
import pwd
import socket
import struct
import threading
import weakref

import grpc

from attnplug._pb import dispatch_pb2, dispatch_pb2_grpc

__all__ = [
    "Answer",
    "Client",
    "KernelModule",
    "Launch",
    "LaunchArg",
    "NoPlan",
    "Plan",
    "StepPlan",
    "TensorSpec",
    "Description",
    "Reads",
    "ReadsCondition",
    "Route",
    "ServerError",
    "ServerUnavailable",
    "UntrustedServer",
    "default_address",
    "ERROR_CODES",
    "METHODS",
    "FORWARD_MODES",
    "PLATFORMS",
]

#: sglang's AttnForwardMethod member names, in the enum's order.
METHODS = (
    "MHA", "MLA", "MHA_CHUNKED_KV", "MHA_ONE_SHOT", "MLA_FUSED_ROPE_ROCM",
    "MLA_FUSED_ROPE_CPU", "MHA_NPU", "MLA_NPU", "DSA_NPU",
)

#: sglang's ForwardMode member names that the dispatch format accepts.
FORWARD_MODES = (
    "EXTEND", "DECODE", "MIXED", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2",
    "PREBUILT", "SPLIT_PREFILL", "DLLM_EXTEND",
)

#: The kinds of an answer's error (Answer.error_code): the ErrorCode values
#: of api/dispatchv1/dispatch.proto without their prefix.
ERROR_CODES = tuple(n[len("ERROR_CODE_"):] for n in dispatch_pb2.ErrorCode.keys() if n != "ERROR_CODE_UNSPECIFIED")

#: The platforms of runtime.platform.
PLATFORMS = ("cuda", "hip", "npu", "xpu", "cpu")

#: The chunked-prefix threshold of a layer that does not give one (sglang's).
DEFAULT_CHUNKED_PREFIX_CACHE_THRESHOLD = 8192

# The most requests the server takes in one DispatchBatch call
# (wire.MaxBatchRequests); longer lists are sent in several calls.
_MAX_BATCH = 1 << 16

# The largest message either side sends (wire.MaxMessageBytes).
_MAX_MESSAGE_BYTES = 64 << 20

_LAYER_FLAGS = (
    "disable_chunked_prefix_cache", "flashinfer_mla_disable_ragged",
    "rocm_fused_decode_mla", "use_dsa", "fused_qkv_a_proj_with_mqa", "intel_amx",
)
_RUNTIME_FLAGS = (
    "piecewise_cuda_graph", "breakable_cuda_graph", "deterministic_inference",
    "two_batch_overlap",
)
_KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp16", "float16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1")


class ServerError(Exception):
    """A call to the server failed. ``code`` is the gRPC status code."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class NoPlan(ServerError):
    """The server has no device code or no plan for the request: no device
    code for the name or the device, a method, dtype or shape the kernels do
    not cover, a plan the host's checks refused, a plugin that failed. The
    kernel runs another way; the message says why."""


class ServerUnavailable(ServerError):
    """The server could not be reached, or went away during the call."""


class UntrustedServer(ServerUnavailable):
    """The process serving the Unix socket runs as another user than this
    one or root: another local user may have bound the socket's path first.
    Nothing it says is read; the message names the socket, its uid and the
    one expected."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """The answer to one request.

    ``method`` is an AttnForwardMethod member name (``"MHA_ONE_SHOT"``), or
    None when ``error`` says why the request was not decided. ``handler``
    is the registry name whose rules decided ("triton" after a fallback),
    ``plugin`` the plugin that answered ("core" for the triton rules),
    ``fallback`` why the triton rules decided although a plugin serves the
    name, and ``generation`` the generation of the server's routes that
    answered (0 when not known). With an ``error``, ``error_code`` says its
    kind (one of ERROR_CODES: ``"INVALID_REQUEST"``, ``"REFUSED"``, ...;
    ``""`` from a server older than error codes) and ``error_field`` the
    field an invalid request's error names (``"seq_lens[3]"``), if any.
    """

    method: str = None
    handler: str = ""
    plugin: str = ""
    fallback: str = ""
    error: str = ""
    generation: int = 0
    error_code: str = ""
    error_field: str = ""


@dataclasses.dataclass(frozen=True)
class Reads:
    """What a name's rules read: fact names and constant comparisons, and
    conditions (a tuple of ReadsCondition) under which they read less."""

    facts: frozenset = frozenset()
    prefix_sum_at_least: tuple = ()
    seq_sum_at_most: tuple = ()
    max_seq_len_at_most: tuple = ()
    conditions: tuple = ()


@dataclasses.dataclass(frozen=True)
class ReadsCondition:
    """In a request where the fact named ``when`` holds, the rules read
    ``reads`` (a Reads without conditions) alone; the first condition that
    holds keys a request. The Reads holding the condition still declare
    everything, so ignoring conditions stays correct."""

    when: str
    reads: Reads


@dataclasses.dataclass(frozen=True)
class Route:
    """What one backend name resolves to on the server (see Describe in
    api/dispatchv1/dispatch.proto)."""

    name: str
    handler: str
    plugin: str
    version: str
    sha256: str
    reads: Reads
    cacheable: bool
    fallback: str


@dataclasses.dataclass(frozen=True)
class Description:
    """The server's routes at one generation."""

    generation: int
    routes: dict
    default_route: Route
    platform: str

    def route(self, name):
        """The Route of name: its own, or the default one."""
        return self.routes.get(name, self.default_route)


def private_dir():
    """The user's private directory of attnplug sockets, where ``attnplug
    serve`` listens by default: $XDG_RUNTIME_DIR/attnplug when
    XDG_RUNTIME_DIR is an absolute path, else attnplug-<uid> in $TMPDIR
    (/tmp when unset), as the Go side computes it (internal/localsock)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "attnplug")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "attnplug-%d" % os.getuid())


def default_address():
    """The address ``attnplug serve`` listens on without --listen:
    $ATTNPLUG_ADDRESS when set, else unix://<private_dir()>/serve.sock."""
    env = os.environ.get("ATTNPLUG_ADDRESS")
    if env:
        return env
    return "unix://" + os.path.join(private_dir(), "serve.sock")


def _unix_path(address):
    """The socket path of a Unix address as serve's --listen spells it
    ("@name" for an abstract socket), or None for TCP."""
    for prefix in ("unix://", "unix:"):
        if address.startswith(prefix):
            path = address[len(prefix):]
            return path if path.startswith("@") else os.path.abspath(path)
    if address.startswith("/") or address.startswith("."):
        return os.path.abspath(address)
    return None


def _target(address):
    """gRPC's target for an address as serve's --listen spells it."""
    if not isinstance(address, str) or not address:
        raise ValueError("address: %r (want unix:///path/to.sock or host:port)" % (address,))
    path = _unix_path(address)
    if path is not None:
        if path.startswith("@"):
            return "unix-abstract:" + path[1:]
        return "unix://" + path
    if address.startswith("tcp://"):
        return address[len("tcp://"):]
    return address


_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _user(uid):
    try:
        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except KeyError:
        return "uid %d" % uid


def check_peer(path, timeout=2.0):
    """Connects to the Unix socket path ("@name": the abstract one) and
    checks that the process listening runs as this user or root, by the
    kernel's record of its credentials (SO_PEERCRED). Raises
    UntrustedServer when it does not, ServerUnavailable when nothing
    listens there."""
    if not hasattr(socket, "SO_PEERCRED"):
        raise UntrustedServer("%s: this system does not say who serves a Unix socket (no SO_PEERCRED), "
                              "so its answers are not trusted" % path, grpc.StatusCode.UNAVAILABLE)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect("\0" + path[1:] if path.startswith("@") else path)
        except OSError as exc:
            raise ServerUnavailable("%s: UNAVAILABLE: %s" % (path, exc), grpc.StatusCode.UNAVAILABLE) from None
        _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    finally:
        sock.close()
    if uid in (os.getuid(), 0):
        return
    if path.startswith("@"):
        hint = "any local user may take an abstract socket's name; serve on a path in a directory only you can write"
    else:
        hint = "another local user may have taken the socket's path; serve in a directory only you can write"
    raise UntrustedServer("%s is served by %s, not by you (uid %d) or root: its answers are not trusted (%s, such as the default %s)"
                          % (path, _user(uid), os.getuid(), hint, private_dir()), grpc.StatusCode.UNAVAILABLE)


_DISPATCHER, _ADMIN, _KERNELS = 0, 1, 2


class Client:
    """A connection to ``attnplug serve`` at address (``unix:///path``,
    ``unix:relative/path``, a path starting with / or ., ``host:port`` or
    ``tcp://host:port``; default: default_address()).

    Every call takes ``timeout`` seconds at most (default 2). A call that
    cannot reach the server raises ServerUnavailable, one the server fails
    ServerError; a request the server could not decide comes back as an
    Answer with ``error`` set. A Client is safe to use from several threads;
    close it, or use it as a context manager.
    """

    def __init__(self, address=None, timeout=2.0):
        self.address = default_address() if address is None else address
        self.timeout = timeout
        self._target = _target(self.address)
        self._unix = _unix_path(self.address)
        self._lock = threading.Lock()
        self._channel = None
        self._watcher = None
        self._stubs = None
        self._stale = False
        self._closed = threading.Event()
        self._watches = weakref.WeakSet()

    # On a Unix socket the server must run as this user or root: another
    # local user may have bound the path first. grpcio has no hook on the
    # connections it makes, so check_peer asks the kernel who listens, on a
    # plain connection of its own, before a channel is opened; and a channel
    # that loses its connection (leaves READY, or fails to connect) is
    # replaced at the next call, checked first, never reused (gRPC
    # reconnects an idle channel only for a call). This covers who serves
    # when the client first connects and after every reconnection. It does
    # not cover a socket file replaced by another in the moment between
    # check_peer's connection and gRPC's own: only a user who can write the
    # socket's directory can do that, so keep the socket in a private
    # directory (the default, private_dir()). Loopback TCP has no peer to
    # check: every local user may serve or connect there.

    def _open(self):
        """Opens a channel, the server checked first; call under _lock."""
        if self._unix is not None:
            check_peer(self._unix, self.timeout)
        channel = grpc.insecure_channel(
            self._target,
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ],
        )
        watcher = None
        if self._unix is not None:
            seen_ready = [False]

            def watcher(state):
                if state == grpc.ChannelConnectivity.READY:
                    seen_ready[0] = True
                elif state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN) or seen_ready[0]:
                    with self._lock:
                        if self._channel is channel:
                            self._stale = True

            channel.subscribe(watcher)
        self._channel, self._watcher, self._stale = channel, watcher, False
        self._stubs = (dispatch_pb2_grpc.DispatcherStub(channel), dispatch_pb2_grpc.AdminStub(channel),
                       dispatch_pb2_grpc.KernelsStub(channel))

    def _retire(self):
        """Closes the channel; call under _lock. grpcio's thread that
        delivers connectivity changes fails (an uncaught ValueError) when it
        finds the channel closed, which it stops looking at within 0.2 s of
        the last unsubscribe: a watched channel is closed a second later."""
        channel, watcher = self._channel, self._watcher
        self._channel = self._watcher = self._stubs = None
        if channel is None:
            return
        if watcher is None:
            channel.close()
            return
        channel.unsubscribe(watcher)
        timer = threading.Timer(1.0, channel.close)
        timer.daemon = True
        timer.start()

    def _connected(self):
        """The stubs (dispatcher, admin, kernels) of a channel whose server
        was checked; raises UntrustedServer or ServerUnavailable."""
        with self._lock:
            if self._closed.is_set():
                raise ServerUnavailable("%s: the client is closed" % self.address)
            if self._channel is not None and not self._stale:
                return self._stubs
            self._retire()
            self._open()
            return self._stubs

    def close(self):
        """Closes the connection; watches end."""
        with self._lock:
            self._closed.set()
            for call in list(self._watches):
                call.cancel()
            self._retire()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, which, method, message, timeout=None):
        rpc = getattr(self._connected()[which], method)
        try:
            return rpc(message, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as exc:
            raise _server_error(exc, self.address) from None

    def dispatch(self, request):
        """Answers one request (a dict in the dispatch format)."""
        resp = self._call(_DISPATCHER, "Dispatch", dispatch_pb2.DispatchRequest(request=request_to_proto(request)))
        return answer_from_proto(resp.answer)

    def dispatch_batch(self, requests):
        """Answers a list of requests, in order, with one call per 65536."""
        return self.dispatch_protos([request_to_proto(r) for r in requests])

    def dispatch_protos(self, requests):
        """dispatch_batch for requests already converted with
        request_to_proto."""
        answers = []
        for i in range(0, len(requests), _MAX_BATCH):
            chunk = requests[i:i + _MAX_BATCH]
            resp = self._call(_DISPATCHER, "DispatchBatch", dispatch_pb2.DispatchBatchRequest(requests=chunk))
            if len(resp.answers) != len(chunk):
                raise ServerError("server answered %d of %d requests" % (len(resp.answers), len(chunk)))
            answers.extend(answer_from_proto(a) for a in resp.answers)
        return answers

    def describe(self):
        """The server's routes now (a Description)."""
        return description_from_proto(self._call(_DISPATCHER, "Describe", dispatch_pb2.DescribeRequest()))

    def watch(self):
        """Returns a Watch: iterate it for the server's Description now and
        after every reload; cancel() ends it. Iteration raises
        ServerUnavailable when the server goes away."""
        call = self._connected()[_DISPATCHER].Watch(dispatch_pb2.WatchRequest())
        self._watches.add(call)
        return Watch(call, self.address)

    def reload(self):
        """Asks the server to hot-swap every plugin whose binary changed (as
        SIGHUP does) and returns what changed, a list of dicts with plugin,
        action, old_version, new_version, old_sha256, new_sha256 and
        reason."""
        resp = self._call(_ADMIN, "Reload", dispatch_pb2.ReloadRequest(), timeout=max(self.timeout, 60.0))
        return [_fields(c) for c in resp.changes]

    def plugins(self):
        """The server's plugins and their state, a list of dicts."""
        resp = self._call(_ADMIN, "ListPlugins", dispatch_pb2.ListPluginsRequest())
        return [_fields(p) for p in resp.plugins]

    def kernel_modules(self, backend, device):
        """The device code of the plugin serving backend, for device (a dict:
        platform, name, compute_capability, sms, max_threads_per_block,
        max_shared_per_block, max_grid), as the server's registry hands it
        (hashes checked, pinned by its lock file): a list of KernelModule.
        Raises NoPlan when there is none."""
        resp = self._call(_KERNELS, "KernelModules",
                          dispatch_pb2.KernelModulesRequest(backend=backend, device=device_to_proto(device)),
                          timeout=max(self.timeout, 120.0))
        return [module_from_proto(m) for m in resp.modules]

    def plan_kernel(self, request):
        """The launches that run a method's kernel on a batch (a Plan), checked
        by the server as its own host checks plans. request is a dict:
        backend, method (a METHODS name), dtype, kv_dtype (the KV cache's
        dtype when it is not dtype, "fp8_e4m3"), dims (heads, head_dim_qk,
        head_dim_v, softmax_scale, top_k for a sparse kernel: DeepSeek
        sparse attention), shape (seq_lens, q_lens, page_size,
        num_pages, chunk_capacity, max_seq_len, prefix_chunk: the pass of
        MHA_CHUNKED_KV over one prefix chunk), device (as kernel_modules
        takes it), graph and query_split (MLA's queries bound as q_nope and
        q_rope, strided; only of a kernel that takes them so). Raises NoPlan when the kernel has no device plan
        for it, ServerError (INVALID_ARGUMENT) for a malformed request."""
        resp = self._call(_KERNELS, "PlanKernel", plan_request_to_proto(request), timeout=max(self.timeout, 30.0))
        return plan_from_proto(resp.plan)

    def plan_step(self, step):
        """The plan of one forward batch of an engine, made by the server
        from what the engine knows of it (a StepPlan): the server makes
        the plan request (its bound on the lengths, its page table, its
        key) as its own host does, asks the plugin and checks the plan.
        step is a dict: backend, mode (a FORWARD_MODES name), method (a
        METHODS name), model (heads, kv_lora_rank, qk_rope_head_dim,
        qk_nope_head_dim, v_head_dim, softmax_scale, index_topk), pool
        (page_size, slots, max_tokens, row_width, context_len, kv_dtype:
        "bf16" or "fp8_e4m3"), batch (size, query_tokens, graph, seq_lens,
        q_lens, chunk_capacity, prefix_chunk: MHA_CHUNKED_KV's pass over one
        prefix chunk, seq_lens its keys in the chunk), device (as
        kernel_modules takes it) and query_split (the engine offers an MLA
        step's queries in two parts, q_nope and q_rope, where DeepSeek
        leaves them: the plan takes them so where its kernel does, and
        whole otherwise; its tensors say which).
        Raises NoPlan when the kernel has no device plan for it,
        ServerError (INVALID_ARGUMENT, naming the field) for a malformed
        step."""
        resp = self._call(_KERNELS, "PlanStep", step_request_to_proto(step), timeout=max(self.timeout, 30.0))
        return StepPlan(plan=plan_from_proto(resp.plan), max_seq_len=resp.max_seq_len,
                        pages_per_request=resp.pages_per_request, request=resp.request)


class Watch:
    """A stream of Descriptions (see Client.watch)."""

    def __init__(self, call, address):
        self._call = call
        self._address = address

    def __iter__(self):
        try:
            for d in self._call:
                yield description_from_proto(d)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise _server_error(exc, self._address) from None
        raise ServerUnavailable("%s: the server ended the watch" % self._address)

    def cancel(self):
        """Ends the watch; iteration stops."""
        self._call.cancel()


def _server_error(exc, address):
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    msg = "%s: %s: %s" % (address, code.name if code else "error", details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return ServerUnavailable(msg, code)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return NoPlan(msg, code)
    return ServerError(msg, code)


def _repeated(f):
    """Whether field descriptor f is repeated: FieldDescriptor.is_repeated
    where protobuf has it (newer releases drop .label), else its label."""
    rep = getattr(f, "is_repeated", None)
    if rep is not None:
        return bool(rep() if callable(rep) else rep)
    return f.label == f.LABEL_REPEATED


def _fields(message):
    return {f.name: list(getattr(message, f.name)) if _repeated(f) else getattr(message, f.name)
            for f in message.DESCRIPTOR.fields}


def answer_from_proto(a):
    """Converts a dispatch_pb2.Answer."""
    method = None
    if not a.error and not a.error_code:
        name = dispatch_pb2.Method.Name(a.method) if a.method in dispatch_pb2.Method.values() else ""
        method = name[len("METHOD_"):] if name.startswith("METHOD_") and a.method else None
        if method is None:
            return Answer(error="server answered an unknown method %d" % a.method, error_code="PROTOCOL", generation=0)
        return Answer(method=method, handler=a.handler, plugin=a.plugin, fallback=a.fallback, generation=a.generation)
    code = ""
    if a.error_code:
        name = dispatch_pb2.ErrorCode.Name(a.error_code) if a.error_code in dispatch_pb2.ErrorCode.values() else "ERROR_CODE_INTERNAL"
        code = name[len("ERROR_CODE_"):]
    return Answer(handler=a.handler, plugin=a.plugin, fallback=a.fallback, error=a.error or code, error_code=code,
                  error_field=a.error_field, generation=a.generation)


def _reads_from_proto(r):
    return Reads(frozenset(r.facts), tuple(r.prefix_sum_at_least), tuple(r.seq_sum_at_most),
                 tuple(r.max_seq_len_at_most),
                 tuple(ReadsCondition(c.when, _reads_from_proto(c.reads)) for c in r.conditions))


def _route_from_proto(r):
    return Route(r.name, r.handler, r.plugin, r.version, r.sha256, _reads_from_proto(r.reads), r.cacheable,
                 r.fallback)


def description_from_proto(d):
    """Converts a dispatch_pb2.DescribeResponse."""
    routes = {r.name: _route_from_proto(r) for r in d.routes}
    return Description(d.generation, routes, _route_from_proto(d.default_route), d.platform)


def _field_error(field, msg):
    return ValueError("%s: %s" % (field, msg))


def _check_keys(obj, allowed, path):
    if not isinstance(obj, dict):
        raise _field_error(path or "request", "want an object (a dict), got %s" % type(obj).__name__)
    for k in obj:
        if k not in allowed:
            raise _field_error((path + "." if path else "") + repr(k), "unknown field")


def _int(v, field):
    if isinstance(v, bool) or not isinstance(v, int):
        raise _field_error(field, "want an integer, got %r" % (v,))
    if not -(1 << 63) <= v < (1 << 63):
        raise _field_error(field, "%d does not fit in 64 bits" % v)
    return v


def _int32(v, field):
    v = _int(v, field)
    if not -(1 << 31) <= v < (1 << 31):
        raise _field_error(field, "%d does not fit in 32 bits" % v)
    return v


def _bool(v, field):
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _field_error(field, "want true or false, got %r" % (v,))
    return v


def _lens(v, field):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise _field_error(field, "want a list of integers, got %r" % (v,))
    return [_int(x, "%s[%d]" % (field, i)) for i, x in enumerate(v)]


_REQUEST_KEYS = ("backend", "forward_mode", "extend_prefix_lens", "seq_lens", "max_chunk_capacity",
                 "mla_prefill_cp", "layer", "runtime")
_LAYER_KEYS = ("chunked_prefix_cache_threshold",) + _LAYER_FLAGS
_RUNTIME_KEYS = ("platform", "dsa_use_mha", "compute_capability", "kv_cache_dtype") + _RUNTIME_FLAGS


def request_to_proto(req):
    """Converts a request in the dispatch format (a dict) to the wire's.
    A field the format does not have, or a value of the wrong kind, raises
    ValueError naming the field and the value; the server checks the rest
    (lengths, consistency) and answers such a request with an error."""
    _check_keys(req, _REQUEST_KEYS, "")
    out = dispatch_pb2.Request()
    backend = req.get("backend")
    if not isinstance(backend, str) or not backend:
        raise _field_error("backend", "required: a non-empty string, got %r" % (backend,))
    out.backend = backend
    mode = req.get("forward_mode")
    if mode not in FORWARD_MODES:
        raise _field_error("forward_mode", "unknown mode %r (want one of %s)" % (mode, ", ".join(FORWARD_MODES)))
    b = out.batch
    b.forward_mode = dispatch_pb2.ForwardMode.Value("FORWARD_MODE_" + mode)
    prefix = req.get("extend_prefix_lens")
    if prefix is not None:
        b.extend_prefix_lens.extend(_lens(prefix, "extend_prefix_lens"))
        b.extend_prefix_lens_known = True
    seq = req.get("seq_lens")
    if seq is not None:
        b.seq_lens.extend(_lens(seq, "seq_lens"))
        b.seq_lens_known = True
    cap = req.get("max_chunk_capacity")
    if cap is not None:
        b.max_chunk_capacity = _int(cap, "max_chunk_capacity")
    b.mla_prefill_cp = _bool(req.get("mla_prefill_cp"), "mla_prefill_cp")

    layer = req.get("layer") or {}
    _check_keys(layer, _LAYER_KEYS, "layer")
    threshold = layer.get("chunked_prefix_cache_threshold")
    out.layer.chunked_prefix_cache_threshold = (
        DEFAULT_CHUNKED_PREFIX_CACHE_THRESHOLD if threshold is None
        else _int(threshold, "layer.chunked_prefix_cache_threshold"))
    for f in _LAYER_FLAGS:
        setattr(out.layer, f, _bool(layer.get(f), "layer." + f))

    rt = req.get("runtime") or {}
    _check_keys(rt, _RUNTIME_KEYS, "runtime")
    r = out.runtime
    platform = rt.get("platform")
    if platform is not None:
        if platform not in PLATFORMS:
            raise _field_error("runtime.platform", "unknown platform %r (want one of %s)" % (platform, ", ".join(PLATFORMS)))
        r.platform = dispatch_pb2.Platform.Value("PLATFORM_" + platform.upper())
    for f in _RUNTIME_FLAGS:
        setattr(r, f, _bool(rt.get(f), "runtime." + f))
    if rt.get("dsa_use_mha") is not None:
        r.dsa_use_mha = _bool(rt["dsa_use_mha"], "runtime.dsa_use_mha")
        r.dsa_use_mha_set = True
    cc = rt.get("compute_capability")
    if cc is not None:
        r.compute_capability = _int(cc, "runtime.compute_capability")
        if not 0 <= cc <= 1000:
            raise _field_error("runtime.compute_capability", "%d is out of [0, 1000] (want major*10+minor, such as 90)" % cc)
    dtype = rt.get("kv_cache_dtype")
    if dtype is not None:
        if dtype not in _KV_CACHE_DTYPES:
            raise _field_error("runtime.kv_cache_dtype", "unknown dtype %r (want one of %s)" % (dtype, ", ".join(_KV_CACHE_DTYPES)))
        r.kv_cache_dtype = dtype
    return out


# Device code: the messages of the Kernels service as plain Python values.

@dataclasses.dataclass(frozen=True)
class KernelModule:
    """Device code of a plugin: name, platform, arch (sm_90, compute_80),
    format (ptx, cubin), image (bytes), sha256, entries (a tuple of (name,
    ((param, kind), ...))), the catalog kernels it runs, and struct_sizes
    (((entry, param, bytes), ...): the size of each "struct" parameter)."""
    name: str
    platform: str
    arch: str
    format: str
    image: bytes
    sha256: str
    entries: tuple
    kernels: tuple
    struct_sizes: tuple = ()

    def entry(self, name):
        """The parameters of entry name, ((param, kind), ...), or None."""
        for e, params in self.entries:
            if e == name:
                return params
        return None

    def struct_size(self, entry, param):
        """The size in bytes of struct parameter param of entry, or 0."""
        for e, p, n in self.struct_sizes:
            if (e, p) == (entry, param):
                return n
        return 0


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor a plan binds: name, dtype (bf16, f32, i32...), shape,
    whether the launches write it, and whether it may be bound as a view
    (strided: the last dimension contiguous, the other strides multiples of
    16 bytes; the launches read its strides)."""
    name: str
    dtype: str
    shape: tuple
    output: bool
    strided: bool = False


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A TMA descriptor's tiled view of a tensor: view (the shape the
    kernel sees, outermost first; () for the tensor's own), box (the tile
    one load brings, outermost first), swizzle ("", "32B", "64B", "128B"),
    l2_promotion ("", "64B", "128B", "256B") and oob_nan (fill elements
    outside the tensor with NaN, not zero)."""
    view: tuple
    box: tuple
    swizzle: str = ""
    l2_promotion: str = ""
    oob_nan: bool = False


class StructField(collections.namedtuple("StructField", "offset size value")):
    """One field of a struct argument: a LaunchArg (an address, integer or
    float) of size bytes (4 or 8) at byte offset."""
    __slots__ = ()


@dataclasses.dataclass(frozen=True)
class LaunchArg:
    """One parameter's value: kind is tensor (name), meta (name + offset),
    workspace (offset), int (int_value), float (float_value), tensormap (a
    TMA descriptor over tensor name, as map says, encoded at each launch
    over the tensor bound then), struct (fields: StructFields, each an
    address, integer, float or stride; bytes no field covers are zero) or
    stride (the element stride of dimension dim of tensor name as bound at
    the launch, an i64)."""
    param: str
    kind: str
    name: str
    offset: int
    int_value: int
    float_value: float
    map: TensorMap = None
    fields: tuple = ()
    dim: int = 0


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: module, entry, grid, block, shared_bytes, args,
    per_batch (it runs once per batch, before the layers), cluster (the
    thread-block cluster's dimensions, () for none) and programmatic (it
    may begin before the previous launch ends)."""
    module: str
    entry: str
    grid: tuple
    block: tuple
    shared_bytes: int
    args: tuple
    per_batch: bool
    cluster: tuple = ()
    programmatic: bool = False


#: The bits of Plan.reads (core.PlanReads).
PLAN_READS_DECLARED, PLAN_READS_SEQ_LENS, PLAN_READS_Q_LENS, PLAN_READS_CHUNK_CAPACITY = 1, 2, 4, 8


@dataclasses.dataclass(frozen=True)
class Plan:
    """The launches that run a kernel on a batch: kernel, tensors,
    metadata (name -> tuple of int32), schedule, workspace_bytes,
    launches, reads (what of the request's shape it depends on; 0 is
    everything), note, key: the server's key of the plan (what of the
    request it holds for, in hex; plans of equal keys are one plan), and
    module_sha256: the images of its modules the server checked it
    against, by module name (a launcher prepares it only with those
    loaded)."""
    kernel: str
    tensors: tuple
    metadata: dict
    schedule: tuple
    workspace_bytes: int
    launches: tuple
    reads: int
    note: str
    key: str = ""
    module_sha256: tuple = ()  # ((module, SHA-256 of the image the server checked the plan against), ...)

    def holds_for_batch(self):
        """Whether the plan depends on the batch size and query lengths only
        (not on the key lengths), so that one plan serves every step."""
        return bool(self.reads & PLAN_READS_DECLARED) and not self.reads & PLAN_READS_SEQ_LENS


def device_to_proto(d):
    _check_keys(d, ("platform", "name", "compute_capability", "sms", "max_threads_per_block", "max_shared_per_block", "max_grid"), "device")
    platform = d.get("platform", "cuda")
    if platform not in PLATFORMS:
        raise _field_error("device.platform", "%r is not one of %s" % (platform, ", ".join(PLATFORMS)))
    grid = list(d.get("max_grid") or [])
    if grid and len(grid) != 3:
        raise _field_error("device.max_grid", "has %d entries, want 3" % len(grid))
    return dispatch_pb2.DeviceInfo(
        platform=dispatch_pb2.Platform.Value("PLATFORM_" + platform.upper()),
        name=str(d.get("name", "")),
        compute_capability=_int(d.get("compute_capability", 0), "device.compute_capability"),
        sms=_int(d.get("sms", 0), "device.sms"),
        max_threads_per_block=_int(d.get("max_threads_per_block", 0), "device.max_threads_per_block"),
        max_shared_per_block=_int(d.get("max_shared_per_block", 0), "device.max_shared_per_block"),
        max_grid=[_int(x, "device.max_grid") for x in grid])


def plan_request_to_proto(r):
    _check_keys(r, ("backend", "method", "dtype", "kv_dtype", "dims", "shape", "device", "graph", "query_split"), "plan request")
    method = r.get("method")
    if method not in METHODS:
        raise _field_error("method", "%r is not one of %s" % (method, ", ".join(METHODS)))
    dims, shape = r.get("dims") or {}, r.get("shape") or {}
    _check_keys(dims, ("heads", "head_dim_qk", "head_dim_v", "softmax_scale", "top_k"), "dims")
    _check_keys(shape, ("seq_lens", "q_lens", "page_size", "num_pages", "chunk_capacity", "max_seq_len", "prefix_chunk"), "shape")
    return dispatch_pb2.PlanKernelRequest(
        backend=str(r.get("backend", "")),
        method=dispatch_pb2.Method.Value("METHOD_" + method),
        dtype=str(r.get("dtype", "bf16")),
        kv_dtype=str(r.get("kv_dtype", "")),
        dims=dispatch_pb2.PlanDims(
            heads=_int(dims.get("heads", 0), "dims.heads"),
            head_dim_qk=_int(dims.get("head_dim_qk", 0), "dims.head_dim_qk"),
            head_dim_v=_int(dims.get("head_dim_v", 0), "dims.head_dim_v"),
            softmax_scale=float(dims.get("softmax_scale", 0.0)),
            top_k=_int(dims.get("top_k", 0), "dims.top_k")),
        shape=dispatch_pb2.PlanShape(
            seq_lens=_lens(shape.get("seq_lens"), "shape.seq_lens"),
            q_lens=_lens(shape.get("q_lens"), "shape.q_lens"),
            page_size=_int(shape.get("page_size", 0), "shape.page_size"),
            num_pages=_int(shape.get("num_pages", 0), "shape.num_pages"),
            chunk_capacity=_int(shape.get("chunk_capacity", 0), "shape.chunk_capacity"),
            max_seq_len=_int(shape.get("max_seq_len", 0), "shape.max_seq_len"),
            prefix_chunk=_bool(shape.get("prefix_chunk"), "shape.prefix_chunk")),
        device=device_to_proto(r.get("device") or {}),
        graph=_bool(r.get("graph"), "graph"),
        query_split=_bool(r.get("query_split"), "query_split"))


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The plan of one forward batch (Client.plan_step): plan (its key is
    plan.key), max_seq_len (the longest request, in keys, it holds for: it
    serves every step of the step's shape whose requests hold at most that
    many; 0: the step's own lengths only), pages_per_request (the page
    table's room per request in its kv_indices) and request (the server's
    plan request, a protobuf message, for people)."""
    plan: Plan
    max_seq_len: int
    pages_per_request: int
    request: object = None


def step_request_to_proto(s):
    _check_keys(s, ("backend", "mode", "method", "model", "pool", "batch", "device", "query_split"), "step")
    method, mode = s.get("method"), s.get("mode")
    if method not in METHODS:
        raise _field_error("method", "%r is not one of %s" % (method, ", ".join(METHODS)))
    if mode not in FORWARD_MODES:
        raise _field_error("mode", "%r is not one of %s" % (mode, ", ".join(FORWARD_MODES)))
    model, pool, batch = s.get("model") or {}, s.get("pool") or {}, s.get("batch") or {}
    _check_keys(model, ("heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "softmax_scale", "index_topk"), "model")
    _check_keys(pool, ("page_size", "slots", "max_tokens", "row_width", "context_len", "kv_dtype"), "pool")
    _check_keys(batch, ("size", "query_tokens", "graph", "seq_lens", "q_lens", "chunk_capacity", "prefix_chunk"), "batch")
    return dispatch_pb2.PlanStepRequest(
        backend=str(s.get("backend", "")),
        mode=dispatch_pb2.ForwardMode.Value("FORWARD_MODE_" + mode),
        method=dispatch_pb2.Method.Value("METHOD_" + method),
        model=dispatch_pb2.StepModel(**{k: _int32(model.get(k, 0), "model." + k) for k in
                                        ("heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_topk")},
                                     softmax_scale=float(model.get("softmax_scale", 0.0))),
        pool=dispatch_pb2.StepPool(page_size=_int32(pool.get("page_size", 0), "pool.page_size"),
                                   **{k: _int(pool.get(k, 0), "pool." + k) for k in ("slots", "max_tokens", "row_width", "context_len")},
                                   kv_dtype=str(pool.get("kv_dtype", ""))),
        batch=dispatch_pb2.StepBatch(
            size=_int32(batch.get("size", 0), "batch.size"),
            query_tokens=_int32(batch.get("query_tokens", 0), "batch.query_tokens"),
            graph=_bool(batch.get("graph"), "batch.graph"),
            seq_lens=_lens(batch.get("seq_lens") or [], "batch.seq_lens"),
            q_lens=_lens(batch.get("q_lens") or [], "batch.q_lens"),
            chunk_capacity=_int(batch.get("chunk_capacity", 0), "batch.chunk_capacity"),
            prefix_chunk=_bool(batch.get("prefix_chunk"), "batch.prefix_chunk")),
        device=device_to_proto(s.get("device") or {}),
        query_split=_bool(s.get("query_split"), "query_split"))


def module_from_proto(m):
    platform = dispatch_pb2.Platform.Name(m.platform) if m.platform in dispatch_pb2.Platform.values() else ""
    return KernelModule(
        name=m.name, platform=platform[len("PLATFORM_"):].lower(), arch=m.arch, format=m.format,
        image=bytes(m.image), sha256=m.sha256,
        entries=tuple((e.name, tuple((p.name, p.kind) for p in e.params)) for e in m.entries),
        kernels=tuple(m.kernels),
        struct_sizes=tuple((e.name, p.name, p.size) for e in m.entries for p in e.params if p.kind == "struct"))


def launch_arg_from_proto(a):
    m = None
    if a.kind == "tensormap":
        m = TensorMap(tuple(a.map.view), tuple(a.map.box), a.map.swizzle, a.map.l2_promotion, a.map.oob_nan)
    return LaunchArg(a.param, a.kind, a.name, a.offset, a.int_value, a.float_value, m,
                     tuple(StructField(f.offset, f.size, launch_arg_from_proto(f.value)) for f in a.fields), a.dim)


def plan_from_proto(p):
    return Plan(
        kernel=p.kernel,
        tensors=tuple(TensorSpec(t.name, t.dtype, tuple(t.shape), t.output, t.strided) for t in p.tensors),
        metadata={m.name: tuple(m.int32s) for m in p.metadata},
        schedule=tuple((w.request, w.kv_begin, w.kv_end, w.split) for w in p.schedule),
        workspace_bytes=p.workspace_bytes,
        launches=tuple(Launch(l.module, l.entry, tuple(l.grid), tuple(l.block), l.shared_bytes,
                              tuple(launch_arg_from_proto(a) for a in l.args),
                              l.per_batch, tuple(l.cluster) if any(l.cluster) else (), l.programmatic)
                       for l in p.launches),
        reads=p.reads,
        note=p.note,
        key=p.key,
        module_sha256=tuple(sorted(p.module_sha256.items())))
