"""attnplug.device: launch a plugin's kernels on torch tensors.

A plugin hands ``attnplug serve`` its device code (kernel modules) and, per
batch, launch plans that the server has checked (Client.kernel_modules,
Client.plan_kernel). This module loads the modules into the CUDA context
torch uses (the device's primary context) through the CUDA driver API with
ctypes, binds torch tensors to a plan's tensors, and launches on torch's
current stream, so that the launches run in order with the model's own
work and can be captured in a ``torch.cuda.graph``:

    from attnplug import Client
    from attnplug.device import Launcher

    launcher = Launcher(Client(address), "fa3")           # the plugin serving fa3
    step = launcher.step({"mode": "DECODE", "method": "MLA",  # an engine's forward batch
                          "model": {...}, "pool": {...}, "batch": {"size": 8, "query_tokens": 1, "graph": True}})
    step.launch({"q": q, "kv_cache": kv, "kv_indptr": indptr, "kv_indices": indices,
                 "seq_lens": seq_lens, "qo_indptr": qo_indptr, "out": out, "lse": lse})

A step (Client.plan_step) says what the engine knows of a batch; the
server makes its plan request (the bound on the lengths, the page table's
room, the plan's key: in Go, once) and its plan, and says what the plan
holds for: step.max_seq_len (every step of the shape whose requests hold at
most that many keys; 0: the step's own lengths) and step.pages_per_request
(the room of a request in kv_indices). Nothing here computes what a plan
reads: plans are kept as the server says they hold (PlanSource), so a
decode loop asks once per batch shape, and a plan whose scheduler reads
seq_lens on the device replays in a CUDA graph with no host work.
Launcher.plan takes a plan request as Client.plan_kernel does (without the
device: the launcher fills in the current torch device), for callers that
make their own. A plan with metadata (one that reads the lengths) uploads
it into buffers of fixed address when prepared; a batch of other lengths
gets a plan (and a Prepared) of its own.

torch is imported when a Launcher is made: the dispatch-only package does
not need it.
"""

import ctypes
import hashlib
import json
import logging
import threading
import time
import weakref

from attnplug.client import NoPlan, ServerError, ServerUnavailable

__all__ = ["CudaError", "Launcher", "PlanSource", "Prepared", "TensorMismatch"]

log = logging.getLogger("attnplug.device")


class CudaError(RuntimeError):
    """A call of the CUDA driver failed; the message names the call and
    the driver's error."""


class TensorMismatch(ValueError):
    """A tensor bound to a plan is not the one the plan describes: a
    missing one, one the plan does not declare, or another dtype, shape,
    device or layout. Raised before any launch."""


_torch = None


def _import_torch():
    global _torch
    if _torch is None:
        import torch  # the GPU path's one dependency, imported on first use
        _torch = torch
    return _torch


# CUDA driver API enums used here.
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5
_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6
_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7
_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, then a 64-byte value (8-byte aligned)."""
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig, cuLaunchKernelEx's description of a launch."""
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("shared", ctypes.c_uint32),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint32)]


class _Driver:
    """The few calls of libcuda this module makes."""

    _lock = threading.Lock()
    _one = None

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._one is None:
                cls._one = cls()
            return cls._one

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CudaError("libcuda.so.1 cannot be loaded (%s): no NVIDIA driver here" % exc) from None
        self.lib = lib
        vp, u32, i32 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        sig = {
            "cuInit": [u32],
            "cuGetErrorName": [i32, ctypes.POINTER(ctypes.c_char_p)],
            "cuGetErrorString": [i32, ctypes.POINTER(ctypes.c_char_p)],
            "cuCtxGetCurrent": [ctypes.POINTER(vp)],
            "cuCtxSetCurrent": [vp],
            "cuDeviceGet": [ctypes.POINTER(i32), i32],
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), i32],
            "cuDeviceGetAttribute": [ctypes.POINTER(i32), i32, i32],
            "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p],
            "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
            "cuModuleUnload": [vp],
            "cuFuncSetAttribute": [vp, i32, i32],
            # A launch's arguments are made once, as the C types they pass
            # (_Step: the function and stream as c_void_p, the dimensions as
            # ints under 2**31, the parameters as an array of pointers):
            # no argtypes, whose conversion cost half the call's Python.
            "cuLaunchKernel": None,
        }
        for name, args in sig.items():
            f = getattr(lib, name + "_v2", None) if name == "cuCtxGetCurrent" else None
            f = f or getattr(lib, name)
            if args is not None:
                f.argtypes = args
            f.restype = i32
            setattr(self, name, f)
        # CUDA 12's TMA descriptors and launches with attributes (clusters);
        # None on an older driver (a plan with either is then refused when
        # it is prepared).
        self.cuLaunchKernelEx = getattr(lib, "cuLaunchKernelEx", None)
        if self.cuLaunchKernelEx is not None:
            self.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
            self.cuLaunchKernelEx.restype = i32
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(u32)
        self.cuTensorMapEncodeTiled = getattr(lib, "cuTensorMapEncodeTiled", None)
        if self.cuTensorMapEncodeTiled is not None:
            self.cuTensorMapEncodeTiled.argtypes = [vp, i32, u32, vp, u64p, u64p, u32p, u32p, i32, i32, i32, i32]
            self.cuTensorMapEncodeTiled.restype = i32
        self.check(self.cuInit(0), "cuInit")

    def check(self, rc, call):
        if rc == 0:
            return
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(rc, ctypes.byref(name))
        self.lib.cuGetErrorString(rc, ctypes.byref(text))
        raise CudaError("%s: %s (%d): %s" % (call, (name.value or b"?").decode(), rc, (text.value or b"").decode()))

    def use_primary(self, ordinal):
        """Makes the primary context of device ordinal (torch's) current on
        this thread."""
        cur = ctypes.c_void_p()
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self.check(self.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
        self.check(self.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
        if cur.value != ctx.value:
            self.check(self.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return dev.value

    def attribute(self, attr, dev):
        v = ctypes.c_int()
        self.check(self.cuDeviceGetAttribute(ctypes.byref(v), attr, dev), "cuDeviceGetAttribute")
        return v.value


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "f32": "float32", "i32": "int32", "i64": "int64",
           "f64": "float64", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}

# What a TMA descriptor needs (as package launch has them): each dtype's
# CUtensorMapDataType and size, and the swizzle and L2 promotion enums.
_TMA_DTYPES = {"fp8_e4m3": 0, "fp8_e5m2": 0, "i32": 3, "i64": 5, "fp16": 6, "f32": 7, "f64": 8, "bf16": 9}
_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "i32": 4, "i64": 8, "fp16": 2, "f32": 4, "f64": 8, "bf16": 2}
_TMA_SWIZZLE = {"": 0, "32B": 1, "64B": 2, "128B": 3}
_TMA_L2_PROMOTION = {"": 0, "64B": 1, "128B": 2, "256B": 3}
_TENSOR_MAP_BYTES = 128


def device_info(ordinal=None):
    """The current (or given) torch CUDA device, as Client.kernel_modules
    takes it."""
    torch = _import_torch()
    if ordinal is None:
        ordinal = torch.cuda.current_device()
    torch.cuda.init()
    drv = _Driver.get()
    dev = drv.use_primary(ordinal)
    props = torch.cuda.get_device_properties(ordinal)
    return {
        "platform": "cuda", "name": props.name, "compute_capability": props.major * 10 + props.minor,
        "sms": drv.attribute(_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "max_threads_per_block": drv.attribute(_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev),
        "max_shared_per_block": drv.attribute(_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
        "max_grid": [drv.attribute(a, dev) for a in (_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                                      _CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                                      _CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)],
    }


class _Module:
    def __init__(self, drv, m):
        image = m.image
        if m.format == "ptx" and not image.endswith(b"\0"):
            image += b"\0"  # the driver reads PTX as a C string
        elif m.format not in ("ptx", "cubin"):
            raise CudaError("module %s: format %r is not one the CUDA driver loads" % (m.name, m.format))
        self.mod = m
        self.handle = ctypes.c_void_p()
        drv.check(drv.cuModuleLoadData(ctypes.byref(self.handle), image), "cuModuleLoadData(%s)" % m.name)
        self.funcs = {}
        self.shared = {}

    def function(self, drv, entry):
        f = self.funcs.get(entry)
        if f is None:
            f = ctypes.c_void_p()
            drv.check(drv.cuModuleGetFunction(ctypes.byref(f), self.handle, entry.encode()),
                      "cuModuleGetFunction(%s.%s)" % (self.mod.name, entry))
            self.funcs[entry] = f
        return f


def _shape(step):
    """What a step's plan is kept by: the step without its lengths, as a
    string (its fields, in a fixed order). The server says what else the
    plan holds for (StepPlan.max_seq_len); nothing here knows what a plan
    reads."""
    batch = dict(step.get("batch") or {})
    batch.pop("seq_lens", None)
    return json.dumps(dict(step, batch=batch), sort_keys=True, separators=(",", ":"))


def _exact(request):
    """A plan request as a string (its fields, in a fixed order)."""
    return json.dumps(request, sort_keys=True, separators=(",", ":"))


def _route_key(desc, backend):
    r = desc.route(backend)
    return (r.handler, r.plugin, r.version, r.sha256)


# The most plans and refusals a PlanSource keeps, of each kind.
_KEPT = 1024

#: How many times a plan is asked again when the route of its backend
#: moved between the modules and the plan (a hot swap in between).
_ROUTE_TRIES = 3
_ROUTE_MOVED = "the route of backend %s moved under every plan asked: a plan and its modules are of one route"


class PlanSource:
    """The device code and plans of the plugin that serves backend, for
    device (a dict as Client.kernel_modules takes it), asked of client (an
    attnplug.Client): what a Launcher loads and launches, without torch.

    Plans are made by the server: a step's (step: the server makes the plan
    request of an engine's facts) or a plan request's (plan). They are kept
    as the server says they hold, and nothing here computes what a plan
    reads: a step's plan serves every step of its shape (the step without
    batch.seq_lens) whose requests hold at most its max_seq_len keys (one
    plan request per batch shape in a decode loop, none at replay), or,
    with max_seq_len 0, the step's own lengths; a plan request's plan
    serves that request. A refusal is kept likewise (a step's by its shape,
    with its lengths when it gave them): the server is not asked again. While
    the server cannot be reached no plan is asked for retry_s seconds (the
    kept plans still answer).

    With follow (the default), a thread follows the server's Watch stream:
    when the route of backend changes (another binary, version or plugin:
    a hot swap), the modules and plans are dropped and version goes up, so
    that the next plan asks the server and gets the new plugin's modules.
    Safe for concurrent use; close() ends the thread."""

    def __init__(self, client, backend, device, follow=True, retry_s=2.0):
        self.client = client
        self.backend = backend
        self.device = dict(device)
        self.retry_s = retry_s
        self.version = 0  # goes up at every route change
        self.route = None  # (handler, plugin, version, sha256) of backend, once described
        self._lock = threading.Lock()
        self._modules = None
        self._modules_error = None
        self._steps = {}  # shape -> StepPlans that hold up to a bound, the smallest bound first
        self._exact = {}  # exact step or plan request -> StepPlan or Plan
        self._refused = {}  # refusal key -> NoPlan
        self._down_until = 0.0
        self._down_error = None
        self.stats = {"module_fetches": 0, "plan_requests": 0, "route_changes": 0}
        self._closed = threading.Event()
        self._watch = None
        self._thread = None
        if follow:
            self._thread = threading.Thread(target=self._follow, name="attnplug-plans-%s" % backend, daemon=True)
            self._thread.start()

    def close(self):
        """Stops following the server (the client stays open)."""
        self._closed.set()
        w = self._watch
        if w is not None:
            w.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def request(self, request):
        """request (a plan request or a step) with this source's device, and
        its backend by default."""
        req = dict(request, device=self.device)
        req.setdefault("backend", self.backend)
        return req

    def modules(self):
        """(modules, version): the KernelModules of backend for the device,
        asked once per route. Raises NoPlan (kept until the route changes)
        or ServerUnavailable."""
        with self._lock:
            if self._modules is not None:
                return self._modules, self.version
            if self._modules_error is not None:
                raise self._modules_error
            self._check_up()
            version = self.version
        try:
            mods = self.client.kernel_modules(self.backend, self.device)
        except NoPlan as exc:
            with self._lock:
                if version == self.version:
                    self._modules_error = exc
            raise
        except ServerUnavailable as exc:
            self._set_down(exc)
            raise
        with self._lock:
            self.stats["module_fetches"] += 1
            if version == self.version:
                self._modules = mods
            return mods, version

    def step(self, step):
        """(StepPlan, version) for step (from request()): a kept plan that
        holds for it, else the server's (Client.plan_step). Raises NoPlan
        when there is none (the refusal is kept until the route changes),
        ServerError for a step the server refuses as malformed,
        ServerUnavailable when the server cannot be reached."""
        shape = _shape(step)
        lens = tuple((step.get("batch") or {}).get("seq_lens") or ())
        longest = max(lens) if lens else 0
        exact = shape + repr(lens)
        with self._lock:
            for sp in self._steps.get(shape, ()):
                if sp.max_seq_len >= longest:
                    return sp, self.version
            sp = self._exact.get(exact)
            if sp is not None:
                return sp, self.version
            self._check_refused(exact)
            version = self.version
        sp = self._ask(exact, version, lambda: self.client.plan_step(step))
        with self._lock:
            if version == self.version:
                self._trim()
                if sp.max_seq_len > 0:
                    kept = self._steps.setdefault(shape, [])
                    kept.append(sp)
                    kept.sort(key=lambda x: x.max_seq_len)
                else:
                    self._exact[exact] = sp
        return sp, version

    def plan(self, request):
        """(plan, version) for request (a plan request, from request()): the
        plan the server answered an equal request with, else the server's
        (Client.plan_kernel). Raises as step does."""
        exact = _exact(request)
        with self._lock:
            p = self._exact.get(exact)
            if p is not None:
                return p, self.version
            self._check_refused(exact)
            version = self.version
        p = self._ask(exact, version, lambda: self.client.plan_kernel(request))
        with self._lock:
            if version == self.version:
                self._trim()
                self._exact[exact] = p
        return p, version

    def _ask(self, key, version, call):
        try:
            out = call()
        except NoPlan as exc:
            with self._lock:
                if version == self.version and len(self._refused) < _KEPT:
                    self._refused[key] = exc
            raise
        except ServerUnavailable as exc:
            self._set_down(exc)
            raise
        with self._lock:
            self.stats["plan_requests"] += 1
        return out

    def _check_refused(self, key):
        # _lock held
        refused = self._refused.get(key)
        if refused is not None:
            raise refused
        self._check_up()

    def _trim(self):
        # _lock held: what is kept stays bounded
        if len(self._exact) >= _KEPT:
            self._exact.clear()
        if len(self._steps) >= _KEPT:
            self._steps.clear()

    def _check_up(self):
        # _lock held
        if self._down_error is not None and time.monotonic() < self._down_until:
            raise self._down_error

    def _set_down(self, exc):
        with self._lock:
            self._down_error = exc
            self._down_until = time.monotonic() + self.retry_s

    def _changed(self):
        # _lock held: the route of backend changed
        self.version += 1
        self.stats["route_changes"] += 1
        self._modules = None
        self._modules_error = None
        self._steps.clear()
        self._exact.clear()
        self._refused.clear()

    def _apply(self, desc):
        key = _route_key(desc, self.backend)
        with self._lock:
            self._down_error = None
            if self.route is not None and key != self.route:
                self._changed()
                log.info("attnplug: the route of %s changed (%s -> %s); the next plan asks for its modules again",
                         self.backend, "/".join(self.route[1:3]), "/".join(key[1:3]))
            self.route = key

    def _follow(self):
        backoff = 0.05
        client_closed = getattr(self.client, "_closed", None)
        while not self._closed.is_set():
            try:
                self._watch = self.client.watch()
                if self._closed.is_set():
                    # close() ran between the check above and the watch:
                    # it cancelled the one before (or none).
                    self._watch.cancel()
                    return
                for d in self._watch:
                    self._apply(d)
                    backoff = 0.05
            except (ServerError, ValueError):
                if self._closed.is_set():
                    return
            if client_closed is not None and client_closed.is_set():
                return  # the client was closed under us: nothing more to follow
            self._closed.wait(backoff)
            backoff = min(backoff * 2, 2.0)


class _Images:
    """The images this process has loaded, one module per (device
    ordinal, name, SHA-256 of the image): each image is loaded into a
    device's primary context once, however many Launchers (an engine's
    target and draft runners) and route changes ask for it, and is never
    unloaded, so that a CUDA graph captured with it still replays after
    its plugin was swapped out."""

    _lock = threading.Lock()
    _loaded = {}

    @classmethod
    def load(cls, drv, ordinal, m):
        """(the loaded module of m on device ordinal, whether this call
        loaded it). Raises CudaError where m's image is not the one its
        sha256 names."""
        digest = hashlib.sha256(m.image).hexdigest()
        if m.sha256 and m.sha256 != digest:
            raise CudaError("module %s: its image's SHA-256 is %s, the server named %s" % (m.name, digest, m.sha256))
        key = (ordinal, m.name, digest)
        with cls._lock:
            got = cls._loaded.get(key)
            if got is None:
                got = cls._loaded[key] = _Module(drv, m)
                return got, True
            return got, False


class Launcher:
    """Launches the kernels of the plugin that serves backend, on torch
    CUDA device ``device`` (default: the current one), with plans from
    ``client`` (an attnplug.Client). The modules are fetched and loaded at
    the first plan; plans are kept as the server says they hold
    (PlanSource), and what is prepared of a plan is kept by the plan's key
    (the server's), so a decode loop asks the server once per batch shape.

    The Launcher follows the server's routes (PlanSource; follow=False
    turns it off): after a hot swap of the plugin serving backend, the next
    plan asks the server again and loads the new plugin's modules. Modules
    loaded before stay loaded, so that a CUDA graph captured with them
    still replays; an image is loaded once per process and device, however
    many Launchers use it (stats: module_loads counts the module sets this
    Launcher took, images_loaded the images it loaded itself). A Launcher
    is safe to use from several threads, but the Prepared plans it keeps
    are shared by every caller of the same plan (their launch parameters
    and workspace are the plan's): step and plan with keep=False give a
    caller a Prepared of its own, for another thread or stream. close()
    stops following the server."""

    def __init__(self, client, backend, device=None, follow=True):
        torch = _import_torch()
        self.client = client
        self.backend = backend
        self.ordinal = torch.cuda.current_device() if device is None else int(device)
        self.device = device_info(self.ordinal)
        self.source = PlanSource(client, backend, self.device, follow=follow)
        self._drv = _Driver.get()
        self._lock = threading.Lock()
        self._version = -1
        self._modules = None
        self._prepared = {}  # plan key -> Prepared, for self._version
        self.stats = {"plan_requests": 0, "module_loads": 0, "images_loaded": 0}

    def close(self):
        """Stops following the server's routes."""
        self.source.close()

    def _sync(self, version):
        """_lock held: forgets what belongs to an older route than version;
        False when version is older than the route in force (an answer
        that raced a hot swap: not taken)."""
        if version < self._version:
            return False
        if version != self._version:
            self._version = version
            self._modules = None
            self._prepared = {}
        return True

    def modules(self):
        """The loaded modules, fetched from the server at the first call and
        after every change of the route of backend."""
        return self._modules_of()[0]

    def _modules_of(self):
        """(the loaded modules, the version of the route they are of)."""
        for _ in range(_ROUTE_TRIES):
            mods, version = self.source.modules()
            with self._lock:
                if not self._sync(version):
                    continue
                if self._modules is None:
                    self._drv.use_primary(self.ordinal)
                    loaded = {}
                    for m in mods:
                        loaded[m.name], new = _Images.load(self._drv, self.ordinal, m)
                        self.stats["images_loaded"] += new
                    self.stats["module_loads"] += 1
                    self._modules = loaded
                return self._modules, version
        raise RuntimeError(_ROUTE_MOVED % self.backend)

    def step(self, step, keep=True):
        """The Prepared plan of step (a step as Client.plan_step takes it,
        without its device; its backend defaults to the Launcher's): from
        what is kept when a plan holds for it, else made by the server and
        prepared here (its metadata uploaded, its workspace allocated). Its
        max_seq_len and pages_per_request say what it holds for. With keep
        false, a new Prepared is not kept (the plan itself is). Raises
        NoPlan when the kernel has no device plan for it, ServerUnavailable
        when the server cannot be reached and no kept plan answers."""
        req = self.source.request(step)
        mods, sp, version = self._of_one_route(lambda: self.source.step(req))
        return self._prepare(sp.plan, req, mods, version, keep, sp.max_seq_len, sp.pages_per_request)

    def plan(self, request, keep=True):
        """The Prepared plan of request (a plan request without its device,
        whose backend defaults to the Launcher's), as step prepares a
        step's: the server's plan, kept for an equal request. Raises as step
        does."""
        req = self.source.request(request)
        mods, plan, version = self._of_one_route(lambda: self.source.plan(req))
        return self._prepare(plan, req, mods, version, keep, 0, 0)

    def _of_one_route(self, ask):
        """(modules, answer, version): ask's answer (answer, version) and
        the loaded modules, of one route, asked again while a hot swap
        came between the two."""
        for _ in range(_ROUTE_TRIES):
            mods, at = self._modules_of()
            got, version = ask()
            if version == at:
                return mods, got, version
        raise RuntimeError(_ROUTE_MOVED % self.backend)

    def _prepare(self, plan, req, mods, version, keep, max_seq_len, pages_per_request):
        key = plan.key or id(plan)
        with self._lock:
            # (A plan of a route older than the one in force is prepared,
            # not kept, and finds nothing kept of the newer one.)
            p = self._prepared.get(key) if self._sync(version) else None
            self.stats["plan_requests"] = self.source.stats["plan_requests"]
            if p is not None:
                return p
        _check_images(plan, mods)
        prepared = Prepared(self, plan, req, mods)
        prepared.max_seq_len, prepared.pages_per_request = max_seq_len, pages_per_request
        with self._lock:
            if not self._sync(version) or not keep:
                return prepared
            if len(self._prepared) > _KEPT:
                self._prepared.clear()
            self._prepared[key] = prepared
        return prepared


def _check_images(plan, mods):
    """Raises CudaError where a module plan launches is loaded with
    another image than the one the server checked plan against (its
    module_sha256): the plugin serving it changed since it was loaded."""
    hashes = dict(plan.module_sha256)
    if not hashes:
        return
    for l in plan.launches:
        m = mods.get(l.module)
        if m is not None and hashes.get(l.module) != m.mod.sha256:
            raise CudaError("module %s is loaded with image %s, the plan was checked against %s: the plugin serving it "
                            "changed since its modules were loaded" % (l.module, m.mod.sha256, hashes.get(l.module)))


class _Bytes:
    """n zero bytes at an address aligned to align, kept alive with the
    object: a parameter passed by value (a TMA descriptor, a struct)."""

    def __init__(self, n, align):
        self._raw = (ctypes.c_ubyte * (n + align))()
        base = ctypes.addressof(self._raw)
        self.addr = base + (-base) % align

    def put(self, off, size, value, is_float=False):
        if is_float:
            raw = (ctypes.c_float if size == 4 else ctypes.c_double)(value)
        else:
            raw = (ctypes.c_uint32 if size == 4 else ctypes.c_uint64)(value & ((1 << (8 * size)) - 1))
        ctypes.memmove(self.addr + off, ctypes.addressof(raw), size)


class _TensorMapArg:
    """A TMA descriptor over one of the plan's tensors, encoded into buf
    whenever the tensor bound at a launch has another address than the
    last one (so that each layer of a captured graph keeps its own)."""

    def __init__(self, buf, tensor, spec, m, entry):
        dtype = _TMA_DTYPES.get(spec.dtype)
        view = tuple(m.view) or tuple(spec.shape)
        if dtype is None or not 1 <= len(view) <= 5 or len(m.box) != len(view):
            raise CudaError("entry %s: a TMA descriptor over %s (%s, view %s, box %s), which this launcher cannot encode"
                            % (entry, spec.name, spec.dtype, view, tuple(m.box)))
        r = len(view)
        self.buf, self.tensor, self.last = buf, tensor, None
        self.dtype, self.rank = dtype, r
        # The driver takes dimensions, byte strides (of dimensions 1 and up)
        # and the box innermost first.
        self.dims = (ctypes.c_uint64 * 5)(*[view[r - 1 - d] for d in range(r)])
        strides, stride = [], _DTYPE_BYTES[spec.dtype]
        for d in range(r):
            if d > 0:
                strides.append(stride)
            stride *= view[r - 1 - d]
        self.strides = (ctypes.c_uint64 * 5)(*strides)
        self.box = (ctypes.c_uint32 * 5)(*[m.box[r - 1 - d] for d in range(r)])
        self.elem = (ctypes.c_uint32 * 5)(1, 1, 1, 1, 1)
        self.swizzle = _TMA_SWIZZLE[m.swizzle]
        self.l2 = _TMA_L2_PROMOTION[m.l2_promotion]
        self.oob = 1 if m.oob_nan else 0

    def encode(self, drv, addr):
        if addr == self.last:
            return
        drv.check(drv.cuTensorMapEncodeTiled(ctypes.c_void_p(self.buf.addr), self.dtype, self.rank, ctypes.c_void_p(addr),
                                             self.dims, self.strides, self.box, self.elem, 0, self.swizzle, self.l2,
                                             self.oob), "cuTensorMapEncodeTiled")
        self.last = addr


class _Step:
    """One launch, resolved: its function, the value of each parameter
    (a ctypes scalar, or bytes passed by value: a TMA descriptor, a
    struct), and what each launch fills in: the tensors' addresses and the
    descriptors over them."""

    def __init__(self, drv, mods, launch, workspace, meta, specs):
        mod = mods.get(launch.module)
        if mod is None:
            raise CudaError("the plan launches module %s, which the plugin did not hand" % launch.module)
        params = mod.mod.entry(launch.entry)
        if params is None:
            raise CudaError("module %s has no entry %s" % (launch.module, launch.entry))
        self.launch = launch
        self.fn = mod.function(drv, launch.entry)
        if launch.shared_bytes > 48 << 10 and mod.shared.get(launch.entry, 0) < launch.shared_bytes:
            drv.check(drv.cuFuncSetAttribute(self.fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             launch.shared_bytes), "cuFuncSetAttribute(%s)" % launch.entry)
            mod.shared[launch.entry] = launch.shared_bytes
        index = {t.name: i for i, t in enumerate(specs)}
        args = {a.param: a for a in launch.args}
        ctype = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}
        # A programmatic launch is a permission, not a requirement (its
        # kernel waits before it touches what the launch before it writes),
        # so this launcher makes it a plain one; a cluster changes what the
        # kernel sees, so it goes through cuLaunchKernelEx with the cluster's
        # dimensions (CUDA 12).
        self.config = None
        if launch.cluster:
            if getattr(drv, "cuLaunchKernelEx", None) is None:
                raise CudaError("entry %s: a cluster launch %s, and this CUDA driver lacks cuLaunchKernelEx "
                                "(CUDA 12)" % (launch.entry, tuple(launch.cluster)))
            self.attr = _LaunchAttribute(id=_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            self.attr.value[0], self.attr.value[1], self.attr.value[2] = launch.cluster
            self.config = _LaunchConfig(grid=(ctypes.c_uint32 * 3)(*launch.grid), block=(ctypes.c_uint32 * 3)(*launch.block),
                                        shared=launch.shared_bytes, attrs=ctypes.pointer(self.attr), num_attrs=1)
        # tensor_slots: (ctypes scalar, tensor index); struct_tensors:
        # (bytes, offset, size, tensor index); stride_slots: (ctypes
        # scalar, tensor index, dimension); struct_strides: (bytes, offset,
        # size, tensor index, dimension); maps: the TMA descriptors.
        self.tensor_slots, self.struct_tensors, self.maps = [], [], []
        self.stride_slots, self.struct_strides = [], []
        self._keep, pointers = [], []

        def tensor(name, what):
            i = index.get(name)
            if i is None:
                raise CudaError("entry %s: %s names tensor %s, which the plan does not declare" % (launch.entry, what, name))
            return i

        def stride(a, what):
            """The index of the tensor whose stride a reads, checked."""
            i = tensor(a.name, what)
            if not 0 <= a.dim < len(specs[i].shape):
                raise CudaError("entry %s: %s is the stride of dimension %d of tensor %s, which has %d"
                                % (launch.entry, what, a.dim, a.name, len(specs[i].shape)))
            return i

        def scalar(a, what):
            """The value of a workspace, meta, int or float argument."""
            if a.kind == "workspace":
                return workspace + a.offset
            if a.kind == "meta":
                return meta[a.name] + a.offset
            if a.kind == "int":
                return a.int_value
            if a.kind == "float":
                return a.float_value
            raise CudaError("entry %s: %s has argument kind %r" % (launch.entry, what, a.kind))

        for name, kind in params:
            a = args.get(name)
            if a is None:
                raise CudaError("entry %s: parameter %s (%s) is not bound" % (launch.entry, name, kind))
            what = "parameter %s" % name
            if kind in ctype:
                slot = ctype[kind]()
                if a.kind == "tensor":
                    self.tensor_slots.append((slot, tensor(a.name, what)))
                elif a.kind == "stride":
                    if kind != "i64":
                        raise CudaError("entry %s: parameter %s is a %s, bound to a stride (an i64)" % (launch.entry, name, kind))
                    self.stride_slots.append((slot, stride(a, what), a.dim))
                else:
                    slot.value = scalar(a, what)
                self._keep.append(slot)
                pointers.append(ctypes.addressof(slot))
            elif kind == "tensormap":
                if drv.cuTensorMapEncodeTiled is None:
                    raise CudaError("entry %s: parameter %s is a TMA descriptor, and this CUDA driver lacks "
                                    "cuTensorMapEncodeTiled (CUDA 12)" % (launch.entry, name))
                if a.kind != "tensormap" or a.map is None:
                    raise CudaError("entry %s: parameter %s is a TMA descriptor, bound to a %r argument" % (launch.entry, name, a.kind))
                buf = _Bytes(_TENSOR_MAP_BYTES, 64)
                i = tensor(a.name, what)
                self.maps.append(_TensorMapArg(buf, i, specs[i], a.map, launch.entry))
                self._keep.append(buf)
                pointers.append(buf.addr)
            elif kind == "struct":
                size = mod.mod.struct_size(launch.entry, name)
                if size <= 0 or a.kind != "struct":
                    raise CudaError("entry %s: parameter %s is a struct of %d bytes, bound to a %r argument"
                                    % (launch.entry, name, size, a.kind))
                buf = _Bytes(size, 8)
                for off, n, f in a.fields:
                    if n not in (4, 8) or off % n or off + n > size:
                        raise CudaError("entry %s: parameter %s: a field of %d bytes at offset %d of a %d-byte struct"
                                        % (launch.entry, name, n, off, size))
                    fw = "%s's field at offset %d" % (what, off)
                    if f.kind == "tensor":
                        self.struct_tensors.append((buf, off, n, tensor(f.name, fw)))
                    elif f.kind == "stride" and n == 8:
                        self.struct_strides.append((buf, off, n, stride(f, fw), f.dim))
                    else:
                        buf.put(off, n, scalar(f, fw), f.kind == "float")
                self._keep.append(buf)
                pointers.append(buf.addr)
            else:
                raise CudaError("entry %s: parameter %s is a %s, which this launcher does not pass "
                                "(it takes ptr, i32, i64, f32, tensormap and struct)" % (launch.entry, name, kind))
        self.params = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        # What each launch passes, read from the plan once.
        self.dims = (int(launch.grid[0]), int(launch.grid[1]), int(launch.grid[2]), int(launch.block[0]),
                     int(launch.block[1]), int(launch.block[2]), int(launch.shared_bytes))
        self.what = "%s(%s.%s)" % ("cuLaunchKernelEx" if self.config is not None else "cuLaunchKernel",
                                   launch.module, launch.entry)

    def tensors(self):
        """The indexes of the tensors the launch reads or writes, or whose
        strides it reads."""
        return ({i for _, i in self.tensor_slots} | {i for _, _, _, i in self.struct_tensors}
                | {m.tensor for m in self.maps} | self.strided())

    def strided(self):
        """The indexes of the tensors whose strides the launch reads."""
        return {i for _, i, _ in self.stride_slots} | {i for _, _, _, i, _ in self.struct_strides}

    def run(self, drv, tensors, strides, stream):
        for slot, i in self.tensor_slots:
            slot.value = tensors[i]
        for buf, off, n, i in self.struct_tensors:
            buf.put(off, n, tensors[i])
        for slot, i, d in self.stride_slots:
            slot.value = strides[i][d]
        for buf, off, n, i, d in self.struct_strides:
            buf.put(off, n, strides[i][d])
        for m in self.maps:
            m.encode(drv, tensors[m.tensor])
        if self.config is not None:
            self.config.stream = stream.value
            rc = drv.cuLaunchKernelEx(ctypes.byref(self.config), self.fn, self.params, None)
        else:
            gx, gy, gz, bx, by, bz, shared = self.dims
            rc = drv.cuLaunchKernel(self.fn, gx, gy, gz, bx, by, bz, shared, stream, self.params, None)
        if rc:
            drv.check(rc, self.what)


class Prepared:
    """A plan ready to launch: its metadata on the device in buffers of
    fixed address, its workspace allocated (torch tensors: the caching
    allocator owns them), its launches resolved. launch_batch runs its
    PerBatch launches (a scheduler), launch_layer the others, launch both;
    each binds the tensors given by name, checked against the plan, and
    launches on torch's current stream (or ``stream``). launch_batch and
    launch_layer check and bind only the tensors their launches read (a
    scheduler reads seq_lens and qo_indptr, not q). Not safe for concurrent
    use, and its launches must not overlap on the device (one stream): they
    share its workspace and metadata, which a kernel may write (the Hopper
    prefill's work counters)."""

    _strided = ()  # the indexes of the tensors whose strides a launch reads

    def __init__(self, launcher, plan, request, mods):
        torch = _import_torch()
        self.plan = plan
        self.request = request
        self._drv = launcher._drv
        dev = torch.device("cuda", launcher.ordinal)
        self.workspace = torch.empty(max(plan.workspace_bytes, 16), dtype=torch.uint8, device=dev)
        self.metadata = {}
        for name, values in plan.metadata.items():
            t = torch.tensor(list(values) or [0], dtype=torch.int32, device=dev)
            self.metadata[name] = t
        self._declare(plan.tensors, {t.name: getattr(torch, _DTYPES.get(t.dtype, ""), None) for t in plan.tensors}, dev)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        index = dev.index
        self._raw_stream = (lambda: raw(index)) if raw is not None else None
        meta = {n: t.data_ptr() for n, t in self.metadata.items()}
        self._steps = [_Step(self._drv, mods, l, self.workspace.data_ptr(), meta, self.specs) for l in plan.launches]
        # The tensors whose strides a launch reads: read from each bound.
        self._strided = sorted(set().union(*(st.strided() for st in self._steps)))
        self._torch = torch
        self._reads = {}
        for which, pick in (("all", lambda l: True), ("batch", lambda l: l.per_batch),
                            ("layer", lambda l: not l.per_batch)):
            used = set()
            for st in self._steps:
                if pick(st.launch):
                    used.update(st.tensors())
            # launch binds every tensor of the plan, launch_batch and
            # launch_layer only those their launches read.
            bind = range(len(self.specs)) if which == "all" else sorted(used)
            self._reads[which] = ([st for st in self._steps if pick(st.launch)], used,
                                  [(i,) + self._want[i] for i in bind])

    def _declare(self, specs, dtypes, device):
        """The plan's tensors as check reads them: the specs, each one's
        dtype (torch's) and the device; (name, dtype, shape) of each in the
        plan's order; and, of the tensor objects last found to match, a
        weak reference (a kept plan keeps no tensor alive) and the version
        of their data then. A tensor object keeps its dtype and device, and
        its layout but through an in-place change (set_, t_, resize_),
        which bumps its version: the same object of the same version is
        checked again for its shape only."""
        self.specs, self._dtypes, self._device = specs, dtypes, device
        self._want = [(t.name, dtypes[t.name], tuple(t.shape)) for t in specs]
        self._seen = [None] * len(specs)

    def declares(self, name):
        """Whether the plan binds tensor name (such as q_nope: a plan that
        takes an MLA layer's queries split)."""
        return name in self._dtypes

    def tensors_read(self, which="all"):
        """The names of the tensors the launches read: of all of them, the
        PerBatch ones (which="batch") or the others ("layer")."""
        return [self.specs[i].name for i in sorted(self._reads[which][1])]

    def holds_for_batch(self):
        """Whether the plan serves every step of its batch size."""
        return self.plan.holds_for_batch()

    def check(self, tensors, only=None):
        """The device addresses of tensors (a dict by name) in the plan's
        order, after checking each against the plan: present, of its dtype,
        shape and device, contiguous. Raises TensorMismatch naming the
        tensor, and for a tensor the plan does not declare (a kv_scale given
        to a plan made for a bf16 cache, topk_indices to a dense one: the
        plan was made for another request). With only (a set of indexes in
        the plan's order), the others are neither checked nor bound
        (address 0)."""
        pick = range(len(self._want)) if only is None else sorted(only)
        return self._bind(tensors, [(i,) + self._want[i] for i in pick])[0]

    def _bind(self, tensors, want):
        """check's work over want, (index, name, dtype, shape) of the
        tensors to bind: their addresses, and the strides of those whose
        strides a launch reads (by index, None for the others)."""
        if not tensors.keys() <= self._dtypes.keys():
            for name in tensors:
                if name not in self._dtypes:
                    raise TensorMismatch("tensor %s: the plan does not declare it (it declares %s): the plan was made "
                                         "for another request" % (name, ", ".join(s.name for s in self.specs)))
        ptrs = [0] * len(self._want)
        seen = self._seen
        for i, name, want, shape in want:
            t = tensors.get(name)
            if t is None:
                raise TensorMismatch("tensor %s: not bound (the plan binds %s)" % (name, ", ".join(s.name for s in self.specs)))
            r = seen[i]
            if r is None or r[0]() is not t or r[1] != t._version or t.shape != shape:
                self._check_one(t, name, want, shape, self.specs[i])
                seen[i] = (weakref.ref(t), t._version)
            ptrs[i] = t.data_ptr()
        strides = None
        if self._strided:
            strides = [None] * len(self._want)
            for i in self._strided:
                t = tensors.get(self._want[i][0])
                if t is not None:
                    strides[i] = t.stride()
        return ptrs, strides

    def _check_one(self, t, name, want, shape, spec):
        if want is None or t.dtype != want:
            raise TensorMismatch("tensor %s: dtype %s, the plan wants %s" % (name, t.dtype, spec.dtype))
        if t.shape != shape:
            raise TensorMismatch("tensor %s: shape %s, the plan wants %s" % (name, tuple(t.shape), shape))
        if t.device != self._device:
            raise TensorMismatch("tensor %s: on %s, the plan runs on %s" % (name, t.device, self._device))
        if not getattr(spec, "strided", False):
            if not t.is_contiguous():
                raise TensorMismatch("tensor %s: strides %s, not contiguous" % (name, tuple(t.stride())))
            if spec.dtype != "i32" and shape and shape[-1] * t.element_size() >= 16 and t.data_ptr() % 16:
                # The kernels copy rows of data in 16-byte pieces (a
                # scalar, such as an FP8 layer's kv_scale, may lie anywhere).
                raise TensorMismatch("tensor %s: at address %#x, not a multiple of 16 bytes" % (name, t.data_ptr()))
            return
        # A strided view: rows of contiguous elements, 16-byte aligned.
        size, strides, dims = t.element_size(), t.stride(), t.shape
        if dims and dims[-1] > 1 and strides[-1] != 1:
            raise TensorMismatch("tensor %s: strides %s, its last dimension not contiguous" % (name, tuple(strides)))
        rows = t.data_ptr() % 16
        for d in range(len(dims) - 1):
            if dims[d] > 1:
                rows |= strides[d] * size % 16
        if rows:
            raise TensorMismatch("tensor %s: strides %s (%d-byte elements) at address %#x: a strided tensor's rows "
                                 "start at multiples of 16 bytes" % (name, tuple(t.stride()), size, t.data_ptr()))

    def _run(self, tensors, stream, which):
        steps, used, want = self._reads[which]
        ptrs, strides = self._bind(tensors, want)
        if stream is None:
            stream = self._raw_stream() if self._raw_stream is not None else \
                self._torch.cuda.current_stream(self._device).cuda_stream
        elif hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        s = ctypes.c_void_p(stream)
        for st in steps:
            st.run(self._drv, ptrs, strides, s)

    def launch(self, tensors, stream=None):
        """Runs every launch of the plan, in order."""
        self._run(tensors, stream, "all")

    def launch_batch(self, tensors, stream=None):
        """Runs the plan's PerBatch launches: once per step, before its
        layers. Only the tensors they read need be given."""
        self._run(tensors, stream, "batch")

    def launch_layer(self, tensors, stream=None):
        """Runs the launches that are not PerBatch: once per layer."""
        self._run(tensors, stream, "layer")
