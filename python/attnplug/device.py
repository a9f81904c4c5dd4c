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
    step = launcher.plan(request)                          # a Prepared; cached by what the plan reads
    step.launch({"q": q, "kv_cache": kv, "kv_indptr": indptr, "kv_indices": indices,
                 "seq_lens": seq_lens, "qo_indptr": qo_indptr, "out": out, "lse": lse})

``request`` is a plan request as Client.plan_kernel takes it, without the
device (the launcher fills in the current torch device). A plan that
holds for a batch size (Plan.holds_for_batch: a graph request with
shape.max_seq_len) is asked for once per batch size; its scheduler reads
seq_lens on the device, so a graph captured for a batch size replays every
step with no host work. A plan with metadata (one that reads the lengths)
uploads it into buffers of fixed address; Prepared.update puts a new
plan's metadata there before a replay.

torch is imported when a Launcher is made: the dispatch-only package does
not need it.
"""

import ctypes
import threading

from attnplug.client import PLAN_READS_CHUNK_CAPACITY, PLAN_READS_Q_LENS, PLAN_READS_SEQ_LENS

__all__ = ["CudaError", "Launcher", "Prepared", "TensorMismatch"]


class CudaError(RuntimeError):
    """A call of the CUDA driver failed; the message names the call and
    the driver's error."""


class TensorMismatch(ValueError):
    """A tensor bound to a plan is not the one the plan describes: a
    missing one, or another dtype, shape, device or layout. Raised before
    any launch."""


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
            "cuLaunchKernel": [vp, u32, u32, u32, u32, u32, u32, u32, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
        }
        for name, args in sig.items():
            f = getattr(lib, name + "_v2", None) if name == "cuCtxGetCurrent" else None
            f = f or getattr(lib, name)
            f.argtypes, f.restype = args, i32
            setattr(self, name, f)
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


def _key(request, reads):
    """The cache key of a plan request, as the Go registry keys plans: what
    every plan depends on, and the per-batch quantities reads names."""
    s = request.get("shape") or {}
    parts = [request.get("backend"), request.get("method"), request.get("dtype"), bool(request.get("graph")),
             tuple(sorted((request.get("dims") or {}).items())), len(s.get("seq_lens") or ()),
             s.get("page_size", 0), s.get("num_pages", 0), s.get("max_seq_len", 0), reads]
    if reads & PLAN_READS_SEQ_LENS:
        parts.append(tuple(s.get("seq_lens") or ()))
    if reads & PLAN_READS_Q_LENS:
        parts.append(tuple(s.get("q_lens") or ()))
    if reads & PLAN_READS_CHUNK_CAPACITY:
        parts.append(s.get("chunk_capacity", 0))
    return tuple(parts)


_ALL = PLAN_READS_SEQ_LENS | PLAN_READS_Q_LENS | PLAN_READS_CHUNK_CAPACITY | 1


class Launcher:
    """Launches the kernels of the plugin that serves backend, on torch
    CUDA device ``device`` (default: the current one), with plans from
    ``client`` (an attnplug.Client). The modules are fetched and loaded at
    the first plan; plans are kept as the Go host keeps them, by what they
    declare they read, so a decode loop asks the server once per batch size.
    A Launcher is safe to use from several threads; its Prepared plans are
    not shared between threads."""

    def __init__(self, client, backend, device=None):
        torch = _import_torch()
        self.client = client
        self.backend = backend
        self.ordinal = torch.cuda.current_device() if device is None else int(device)
        self.device = device_info(self.ordinal)
        self._drv = _Driver.get()
        self._lock = threading.Lock()
        self._modules = None
        self._reads = {}   # base key -> reads of the last plan for it
        self._plans = {}   # key -> Prepared
        self.stats = {"plan_requests": 0, "plans_cached": 0}

    def modules(self):
        """The loaded modules, fetched from the server at the first call."""
        with self._lock:
            if self._modules is None:
                mods = self.client.kernel_modules(self.backend, self.device)
                self._drv.use_primary(self.ordinal)
                self._modules = {m.name: _Module(self._drv, m) for m in mods}
            return self._modules

    def plan(self, request):
        """The Prepared plan of request (a plan request without its device,
        whose backend defaults to the Launcher's): from the cache when a plan
        answered an equal request, as far as the plan reads; else asked of
        the server, checked there, and prepared here (its metadata uploaded,
        its workspace allocated). Raises NoPlan when the kernel has no
        device plan for it."""
        req = dict(request, device=self.device)
        req.setdefault("backend", self.backend)
        base = _key(req, 0)
        with self._lock:
            reads = self._reads.get(base, _ALL)
            p = self._plans.get(_key(req, reads))
        if p is not None:
            return p
        mods = self.modules()
        plan = self.client.plan_kernel(req)
        reads = plan.reads if plan.reads & 1 else _ALL
        prepared = Prepared(self, plan, req, mods)
        with self._lock:
            self.stats["plan_requests"] += 1
            if len(self._plans) > 1024:
                self._plans.clear()
                self._reads.clear()
            self._reads[base] = reads
            self._plans[_key(req, reads)] = prepared
        return prepared


class _Step:
    """One launch, resolved: its function, the ctypes slot of each
    parameter and the tensors that fill slots at each launch."""

    def __init__(self, drv, mods, launch, workspace, meta, spec_index):
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
        args = {a.param: a for a in launch.args}
        ctype = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}
        self.slots, self.tensor_slots = [], []
        for i, (name, kind) in enumerate(params):
            a = args.get(name)
            if a is None or kind not in ctype:
                raise CudaError("entry %s: parameter %s (%s) is not bound" % (launch.entry, name, kind))
            slot = ctype[kind]()
            if a.kind == "tensor":
                self.tensor_slots.append((slot, spec_index[a.name]))
            elif a.kind == "workspace":
                slot.value = workspace + a.offset
            elif a.kind == "meta":
                slot.value = meta[a.name] + a.offset
            elif a.kind == "int":
                slot.value = a.int_value
            elif a.kind == "float":
                slot.value = a.float_value
            else:
                raise CudaError("entry %s: parameter %s has argument kind %r" % (launch.entry, name, a.kind))
            self.slots.append(slot)
        self.params = (ctypes.c_void_p * len(self.slots))(*[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in self.slots])

    def run(self, drv, tensors, stream):
        for slot, i in self.tensor_slots:
            slot.value = tensors[i]
        l = self.launch
        drv.check(drv.cuLaunchKernel(self.fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                     l.shared_bytes, stream, self.params, None),
                  "cuLaunchKernel(%s.%s)" % (l.module, l.entry))


class Prepared:
    """A plan ready to launch: its metadata on the device in buffers of
    fixed address, its workspace allocated (torch tensors: the caching
    allocator owns them), its launches resolved. launch_batch runs its
    PerBatch launches (a scheduler), launch_layer the others, launch both;
    each binds the tensors given by name, checked against the plan, and
    launches on torch's current stream (or ``stream``). Not safe for
    concurrent use."""

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
        self.specs = plan.tensors
        self._index = {t.name: i for i, t in enumerate(self.specs)}
        self._dtypes = {t.name: getattr(torch, _DTYPES.get(t.dtype, ""), None) for t in self.specs}
        self._device = dev
        meta = {n: t.data_ptr() for n, t in self.metadata.items()}
        self._steps = [_Step(self._drv, mods, l, self.workspace.data_ptr(), meta, self._index) for l in plan.launches]
        self._torch = torch

    def holds_for_batch(self):
        """Whether the plan serves every step of its batch size."""
        return self.plan.holds_for_batch()

    def check(self, tensors):
        """The device addresses of tensors (a dict by name) in the plan's
        order, after checking each against the plan: present, of its dtype,
        shape and device, contiguous. Raises TensorMismatch naming the
        tensor."""
        ptrs = [0] * len(self.specs)
        for i, spec in enumerate(self.specs):
            t = tensors.get(spec.name)
            if t is None:
                raise TensorMismatch("tensor %s: not bound (the plan binds %s)" % (spec.name, ", ".join(s.name for s in self.specs)))
            want = self._dtypes[spec.name]
            if want is None or t.dtype != want:
                raise TensorMismatch("tensor %s: dtype %s, the plan wants %s" % (spec.name, t.dtype, spec.dtype))
            if tuple(t.shape) != tuple(spec.shape):
                raise TensorMismatch("tensor %s: shape %s, the plan wants %s" % (spec.name, tuple(t.shape), tuple(spec.shape)))
            if t.device != self._device:
                raise TensorMismatch("tensor %s: on %s, the plan runs on %s" % (spec.name, t.device, self._device))
            if not t.is_contiguous():
                raise TensorMismatch("tensor %s: not contiguous" % spec.name)
            ptrs[i] = t.data_ptr()
        return ptrs

    def _run(self, tensors, stream, which):
        ptrs = self.check(tensors)
        if stream is None:
            stream = self._torch.cuda.current_stream(self._device).cuda_stream
        elif hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        s = ctypes.c_void_p(stream)
        for st in self._steps:
            if which(st.launch):
                st.run(self._drv, ptrs, s)

    def launch(self, tensors, stream=None):
        """Runs every launch of the plan, in order."""
        self._run(tensors, stream, lambda l: True)

    def launch_batch(self, tensors, stream=None):
        """Runs the plan's PerBatch launches: once per step, before its
        layers."""
        self._run(tensors, stream, lambda l: l.per_batch)

    def launch_layer(self, tensors, stream=None):
        """Runs the launches that are not PerBatch: once per layer."""
        self._run(tensors, stream, lambda l: not l.per_batch)

    def update(self, plan):
        """Puts the metadata of plan (for the same batch size, with the same
        launches) into this Prepared's buffers, on the current stream, so
        that a graph captured with it replays the new lengths. Raises
        ValueError when plan's launches or buffer sizes differ."""
        if [(l.module, l.entry, l.grid, l.block, l.args) for l in plan.launches] != \
                [(l.module, l.entry, l.grid, l.block, l.args) for l in self.plan.launches]:
            raise ValueError("update: the plan's launches differ from the prepared plan's")
        for name, values in plan.metadata.items():
            buf = self.metadata.get(name)
            if buf is None or len(values) > buf.numel():
                raise ValueError("update: metadata %s does not fit the prepared buffer" % name)
            src = self._torch.tensor(list(values), dtype=self._torch.int32).pin_memory()
            buf[:len(values)].copy_(src, non_blocking=True)
        self.plan = plan
