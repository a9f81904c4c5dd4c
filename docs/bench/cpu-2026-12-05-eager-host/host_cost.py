"""The Python share of an eager decode layer's host time, on the CPU (no
GPU): run from python/ with PYTHONPATH=<package's parent>:testing:tests and
the path of an attnplug binary (a serve is started from it).

- class: AttnplugMLABackend.forward_decode at batch 1 (4096 cached, page 64,
  DeepSeek's split q, no pool write) on the fa3 plugin's real plan, with
  launch_layer a no-op (attnplug_testing.fake_kernels' launcher): the
  class's own Python work.
- launcher: Prepared.launch_layer of a plan shaped as the decode's (its
  decode launch of 22 parameters and its combine of 7, q nope and q rope
  strided) over CPU tensors, against a driver whose cuLaunchKernel is a
  real foreign call (libc's getpid, through ctypes, with the same 11
  arguments): the launcher's Python work and the ctypes calls, not the
  driver's own work."""
import ctypes, inspect, statistics, sys, time

import torch
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug.client import KernelModule, Launch, LaunchArg, TensorSpec
from attnplug.device import Prepared, _Step
from attnplug_testing import standins as st
from attnplug_testing.bench import _start_server
from attnplug_testing.fake_kernels import FakeLauncher, FakePrepared
from attnplug_testing.torch_mla import TorchMLABackend


def median_us(fn, n=2000, reps=15):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter_ns() - t0) / n / 1000)
    return statistics.median(ts)


def class_us(address, heads):
    client = Client(address, timeout=60)
    mr = st.ModelRunner.make(heads=heads, layers=1, page_size=64, context_len=8192, max_requests=1, device="cpu")
    b = sb.AttnplugMLABackend(mr, kernel_backend="fa3", launcher=FakeLauncher(client, "fa3"), fallback=TorchMLABackend(mr),
                              strict=True)
    loop = st.DecodeLoop(mr, seed=1)
    loop.start([4095])
    fb = loop.decode_batch()
    b.init_forward_metadata(fb)
    qn, qr, kn, kr = loop.inputs(1)
    qn = qn.transpose(0, 1).contiguous().transpose(0, 1)
    layer = loop.layers[0]
    FakePrepared.launch_layer = lambda self, t, stream=None: None
    us = median_us(lambda: b.forward_decode(qn, kn, kn, layer, fb, save_kv_cache=False, q_rope=qr, k_rope=kr))
    assert b.stats()["fallback_layers"] == 0
    b.close()
    client.close()
    return us


class _Module:
    def __init__(self, params):
        self.mod, self.shared = KernelModule("m", "cuda", "sm_90a", "cubin", b"", "", (("k", tuple(params)),), (), ()), {}

    def function(self, drv, entry):
        return 1


class _Driver:
    cuLaunchKernel = ctypes.CDLL(None).getpid
    cuTensorMapEncodeTiled = cuFuncSetAttribute = None

    def check(self, rc, call):
        pass


def launcher_us(heads):
    def arg(param, kind, name="", **kw):
        return LaunchArg(param, kind, name, kw.get("offset", 0), kw.get("i", 0), kw.get("f", 0.0), None, ())

    def stride(n, d):
        return LaunchArg("%s%d" % (n, d), "stride", n, 0, 0, 0.0, dim=d)

    specs = (TensorSpec("q_nope", "bf16", (1, heads, 512), False, True), TensorSpec("q_rope", "bf16", (1, heads, 64), False, True),
             TensorSpec("kv_cache", "bf16", (64, 64, 576), False), TensorSpec("kv_indptr", "i32", (2,), False),
             TensorSpec("kv_indices", "i32", (64,), False), TensorSpec("out", "bf16", (1, heads, 512), True),
             TensorSpec("lse", "f32", (1, heads), True))
    tensors = [(n, "ptr", arg(n, "tensor", n)) for n in ("q_nope", "q_rope")] + \
        [(s.param, "i64", s) for s in (stride("q_nope", 0), stride("q_nope", 1), stride("q_rope", 0), stride("q_rope", 1))] + \
        [("rc", "i32", arg("rc", "int"))] + [(n, "ptr", arg(n, "tensor", n)) for n in ("kv_cache", "kv_indptr", "kv_indices", "out", "lse")] + \
        [(n, "ptr", arg(n, "meta", n)) for n in ("schedule", "requests", "counts", "slots")] + \
        [("part_o", "ptr", arg("part_o", "workspace")), ("part_lse", "ptr", arg("part_lse", "workspace", offset=4096))] + \
        [(n, "i32", arg(n, "int", i=1)) for n in ("heads", "page_shift")] + [("scale", "f32", arg("scale", "float", f=.1)),
                                                                           ("head_blocks", "i32", arg("head_blocks", "int", i=1))]
    combine = [(n, "ptr", arg(n, "tensor", n)) for n in ("out", "lse")] + [("requests", "ptr", arg("requests", "meta", "requests"))] + \
        [("part_o", "ptr", arg("part_o", "workspace")), ("part_lse", "ptr", arg("part_lse", "workspace", offset=4096))] + \
        [(n, "i32", arg(n, "int", i=1)) for n in ("heads", "rows")]
    drv, meta = _Driver(), {n: 0x1000 for n in ("schedule", "requests", "counts", "slots")}
    steps = []
    for params, grid in ((tensors, 132), (combine, heads)):
        launch = Launch("m", "k", (grid, 1, 1), (256, 1, 1), 0, tuple(a for _, _, a in params), False)
        steps.append(_Step(drv, {"m": _Module([(p, k) for p, k, _ in params])}, launch, 0x2000, meta, specs))
    dtypes = {"q_nope": torch.bfloat16, "q_rope": torch.bfloat16, "kv_cache": torch.bfloat16, "kv_indptr": torch.int32,
              "kv_indices": torch.int32, "out": torch.bfloat16, "lse": torch.float32}
    p = Prepared.__new__(Prepared)
    p._declare(specs, dtypes, torch.device("cpu"))
    p._drv, p._steps, p._torch, p._raw_stream = drv, steps, torch, lambda: 0
    p._strided = sorted(set().union(*(s.strided() for s in steps)))
    used = set().union(*(s.tensors() for s in steps))
    want = [(i,) + p._want[i] for i in sorted(used)]
    # Packages before 2026-12-05 read launch_layer's launches through a
    # predicate on each; later ones as a list.
    old = "pick(st.launch)" in inspect.getsource(Prepared._run)
    p._reads = {"layer": ((lambda l: True) if old else steps, used, want)}
    bmm = torch.randn(heads, 1, 512).to(torch.bfloat16)
    t = {"q_rope": torch.randn(1, heads, 64).to(torch.bfloat16), "kv_cache": torch.zeros(64, 64, 576, dtype=torch.bfloat16),
         "kv_indptr": torch.zeros(2, dtype=torch.int32), "kv_indices": torch.zeros(64, dtype=torch.int32),
         "lse": torch.zeros(1, heads)}

    def layer():  # a new q nope and out each layer, as sglang's
        t["q_nope"], t["out"] = bmm.transpose(0, 1), torch.empty(1, heads, 512, dtype=torch.bfloat16)
        p.launch_layer(t)

    return median_us(layer), median_us(lambda: drv.cuLaunchKernel(1, 1, 1, 1, 1, 1, 1, 1, None, None, None))


proc, tmp, address = _start_server(sys.argv[1])
try:
    for heads in (16, 128):
        c = class_us(address, heads)
        l, call = launcher_us(heads)
        print("h%d_b1_s4096: class %.1f us, launcher %.1f us (two foreign calls of %.2f us each in it)" % (heads, c, l, call))
finally:
    proc.terminate()
    proc.wait(15)
