"""attnplug.device on a Hopper GPU: a launch with a TMA descriptor, a
struct by value and clusters of two blocks
(internal/gpucheck/testdata/tma_copy.cu, compiled with NVRTC) captured in a torch.cuda.graph over two layers with different
tensors, each layer's output made from its own cache (so each captured
launch kept its own descriptor), outputs poisoned first. Skipped without
torch, a GPU of compute capability 9.0, or NVRTC ($ATTNPLUG_NVRTC names
it)."""

import ctypes
import os
import unittest

try:
    import torch
    HAVE_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
except ImportError:  # the CPU-only tests run without torch
    torch = None
    HAVE_GPU = False

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "internal", "gpucheck", "testdata", "tma_copy.cu")


def nvrtc():
    """libnvrtc, or None."""
    for name in (os.environ.get("ATTNPLUG_NVRTC"), "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    return None


def compile_ptx(lib, src, arch):
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"tma_copy.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(("--gpu-architecture=" + arch).encode())
    if lib.nvrtcCompileProgram(prog, 1, opts) != 0:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        raise AssertionError("NVRTC: " + log.value.decode())
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    ptx = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value


@unittest.skipUnless(HAVE_GPU, "needs torch and a GPU of compute capability 9.0")
class TMATest(unittest.TestCase):
    def test_descriptors_and_structs_in_a_captured_graph(self):
        from attnplug.client import KernelModule, Launch, LaunchArg, StructField, TensorMap, TensorSpec
        from attnplug.device import _Driver, _Module, _Step
        lib = nvrtc()
        if lib is None:
            self.skipTest("no NVRTC ($ATTNPLUG_NVRTC)")
        with open(SOURCE) as f:
            ptx = compile_ptx(lib, f.read(), "compute_90")
        torch.cuda.init()
        drv = _Driver.get()
        drv.use_primary(torch.cuda.current_device())
        km = KernelModule(name="hopper_test", platform="cuda", arch="compute_90", format="ptx", image=ptx, sha256="",
                          entries=(("tma_copy", (("src_map", "tensormap"), ("params", "struct"), ("lse", "ptr"))),),
                          kernels=(), struct_sizes=(("tma_copy", "params", 24),))
        specs = (TensorSpec("kv_cache", "bf16", (8, 64, 576), False), TensorSpec("out", "bf16", (8, 64, 64), True),
                 TensorSpec("lse", "f32", (64,), True))

        def arg(param, kind, name="", i=0, f=0.0, m=None, fields=()):
            return LaunchArg(param, kind, name, 0, i, f, m, fields)

        launch = Launch("hopper_test", "tma_copy", (8, 1, 1), (128, 1, 1), 0, (
            arg("src_map", "tensormap", "kv_cache", m=TensorMap(view=(512, 576), box=(64, 64))),
            arg("params", "struct", fields=(StructField(0, 8, arg("", "tensor", "out")), StructField(8, 4, arg("", "int", i=512)),
                                            StructField(12, 4, arg("", "float", f=0.5)),
                                            StructField(16, 8, arg("", "int", i=(1 << 40) + 7)))),
            arg("lse", "tensor", "lse")), False, (2, 1, 1), True)
        step = _Step(drv, {"hopper_test": _Module(drv, km)}, launch, 0, {}, specs)

        g = torch.Generator(device="cuda").manual_seed(3)
        layers = []
        for _ in range(2):
            cache = (torch.rand(8, 64, 576, generator=g, device="cuda") * 512 + 2 ** -7).to(torch.bfloat16)
            out = torch.full((8, 64, 64), float("nan"), dtype=torch.bfloat16, device="cuda")
            lse = torch.full((64,), float("nan"), dtype=torch.float32, device="cuda")
            layers.append((cache, out, lse))
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            s = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            for cache, out, lse in layers:
                step.run(drv, [cache.data_ptr(), out.data_ptr(), lse.data_ptr()], None, s)
        graph.replay()
        torch.cuda.synchronize()
        for l, (cache, out, lse) in enumerate(layers):
            want = (cache.view(8, 64, 576)[:, :, :64].float() * 0.5).to(torch.bfloat16)
            self.assertTrue(torch.equal(out, want), "layer %d: the output is not its own cache's boxes" % l)
            self.assertEqual(lse[:8].tolist(), [0.0, 1.0] * 4, "layer %d: the blocks' cluster ranks" % l)
            self.assertEqual(lse[32:40].tolist(), [1.0] * 8, "layer %d: the struct did not arrive intact" % l)


if __name__ == "__main__":
    unittest.main()
