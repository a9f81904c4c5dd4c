"""attnplug.device's parameters, without a GPU: what a launch hands
cuLaunchKernel for each kind of parameter (pointers, integers and floats,
TMA descriptors encoded over the tensors bound at each launch, structs by
value), read back from the parameter pointers by a fake driver, and the
plans of the engine API decoded with their descriptors and structs."""

import ctypes
import struct
import unittest

from attnplug._pb import dispatch_pb2
from attnplug.client import KernelModule, Launch, LaunchArg, StructField, TensorMap, TensorSpec, module_from_proto, plan_from_proto
from attnplug.device import CudaError, Prepared, TensorMismatch, _Step


class FakeDriver:
    """Records cuTensorMapEncodeTiled's arguments and, at each launch, the
    bytes each parameter pointer points at (sizes given per launch)."""

    def __init__(self, tma=True, launch_ex=True):
        self.encoded, self.launched, self.sizes, self.configs = [], [], [], []
        if not tma:
            self.cuTensorMapEncodeTiled = None
        if not launch_ex:
            self.cuLaunchKernelEx = None

    def check(self, rc, call):
        if rc:
            raise CudaError("%s: %d" % (call, rc))

    def cuFuncSetAttribute(self, fn, attr, value):
        return 0

    def cuTensorMapEncodeTiled(self, dst, dtype, rank, addr, dims, strides, box, elem, interleave, swizzle, l2, oob):
        self.encoded.append(dict(dst=dst.value, dtype=dtype, rank=rank, addr=addr.value, dims=list(dims)[:rank],
                                 strides=list(strides)[:rank - 1], box=list(box)[:rank], elem=list(elem)[:rank],
                                 interleave=interleave, swizzle=swizzle, l2=l2, oob=oob))
        ctypes.memmove(dst.value, struct.pack("<Q", addr.value) * 16, 128)  # stands for the descriptor
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launched.append([ctypes.string_at(params[i], n) for i, n in enumerate(self.sizes)])
        return 0

    def cuLaunchKernelEx(self, config, fn, params, extra):
        c = config._obj
        attrs = [(c.attrs[i].id, tuple(c.attrs[i].value[:3])) for i in range(c.num_attrs)]
        self.configs.append(dict(grid=tuple(c.grid), block=tuple(c.block), shared=c.shared, stream=c.stream, attrs=attrs))
        self.launched.append([ctypes.string_at(params[i], n) for i, n in enumerate(self.sizes)])
        return 0


class FakeModule:
    def __init__(self, mod):
        self.mod, self.shared = mod, {}

    def function(self, drv, entry):
        return 1


def module(params, structs=()):
    return KernelModule(name="m", platform="cuda", arch="sm_90a", format="cubin", image=b"", sha256="",
                        entries=(("k", params),), kernels=(), struct_sizes=structs)


def arg(param, kind, name="", offset=0, i=0, f=0.0, m=None, fields=()):
    return LaunchArg(param, kind, name, offset, i, f, m, fields)


SPECS = (TensorSpec("q", "bf16", (4, 16, 576), False), TensorSpec("kv_cache", "bf16", (8, 64, 576), False),
         TensorSpec("out", "bf16", (4, 16, 512), True))
WORKSPACE, META = 0x7000_0000, {"blocks": 0x6000_0000}


def step(drv, params, args, structs=()):
    launch = Launch("m", "k", (1, 1, 1), (128, 1, 1), 0, tuple(args), False)
    return _Step(drv, {"m": FakeModule(module(params, structs))}, launch, WORKSPACE, META, SPECS)


class ParamsTest(unittest.TestCase):
    def test_each_kind_reaches_the_kernel(self):
        drv = FakeDriver()
        params = (("q", "ptr"), ("heads", "i32"), ("scale", "f32"), ("kv_map", "tensormap"), ("p", "struct"), ("ws", "ptr"))
        kv_map = TensorMap(view=(512, 576), box=(64, 64), swizzle="128B", l2_promotion="256B")
        fields = (StructField(0, 8, arg("", "tensor", "out")), StructField(8, 4, arg("", "int", i=-3)),
                  StructField(12, 4, arg("", "float", f=1.5)), StructField(16, 8, arg("", "meta", "blocks", offset=4)))
        st = step(drv, params, [arg("q", "tensor", "q"), arg("heads", "int", i=16), arg("scale", "float", f=0.25),
                                arg("kv_map", "tensormap", "kv_cache", m=kv_map), arg("p", "struct", fields=fields),
                                arg("ws", "workspace", offset=256)], structs=(("k", "p", 32),))
        self.assertEqual(st.tensors(), {0, 1, 2})
        drv.sizes = [8, 4, 4, 128, 32, 8]
        st.run(drv, [0x1000, 0x2000, 0x3000], None, None)
        q, heads, scale, desc, p, ws = drv.launched[0]
        self.assertEqual(struct.unpack("<Q", q)[0], 0x1000)
        self.assertEqual(struct.unpack("<i", heads)[0], 16)
        self.assertEqual(struct.unpack("<f", scale)[0], 0.25)
        self.assertEqual(struct.unpack("<Q", ws)[0], WORKSPACE + 256)
        self.assertEqual(struct.unpack("<QifQQ", p[:32]), (0x3000, -3, 1.5, META["blocks"] + 4, 0))
        # The descriptor: the driver's order (innermost first), over the
        # tensor bound, in a 64-byte aligned buffer the kernel parameter
        # points at.
        e = drv.encoded[0]
        self.assertEqual(e["dst"] % 64, 0)
        self.assertEqual((e["dtype"], e["rank"], e["addr"]), (9, 2, 0x2000))
        self.assertEqual((e["dims"], e["strides"], e["box"], e["elem"]), ([576, 512], [1152], [64, 64], [1, 1]))
        self.assertEqual((e["interleave"], e["swizzle"], e["l2"], e["oob"]), (0, 3, 3, 0))
        self.assertEqual(desc, struct.pack("<Q", 0x2000) * 16)
        # The same tensor again: no new encoding; another one: encoded over it.
        st.run(drv, [0x1100, 0x2000, 0x3300], None, None)
        self.assertEqual(len(drv.encoded), 1)
        self.assertEqual(struct.unpack("<Q", drv.launched[1][0])[0], 0x1100)
        self.assertEqual(struct.unpack("<Q", drv.launched[1][4][:8])[0], 0x3300)
        st.run(drv, [0x1100, 0x2400, 0x3300], None, None)
        self.assertEqual([x["addr"] for x in drv.encoded], [0x2000, 0x2400])
        self.assertEqual(drv.launched[2][3], struct.pack("<Q", 0x2400) * 16)

    def test_a_view_of_three_dimensions(self):
        drv = FakeDriver()
        m = TensorMap(view=(), box=(1, 64, 32), swizzle="64B", oob_nan=True)
        st = step(drv, (("map", "tensormap"),), [arg("map", "tensormap", "q", m=m)])
        drv.sizes = [128]
        st.run(drv, [0x5000, 0, 0], None, None)
        e = drv.encoded[0]
        self.assertEqual((e["rank"], e["dims"], e["strides"], e["box"]), (3, [576, 16, 4], [1152, 1152 * 16], [32, 64, 1]))
        self.assertEqual((e["swizzle"], e["l2"], e["oob"]), (2, 0, 1))

    def test_what_cannot_be_passed_is_refused(self):
        m = TensorMap(view=(512, 576), box=(64, 64))
        for drv, params, args, structs, want in [
            (FakeDriver(tma=False), (("map", "tensormap"),), [arg("map", "tensormap", "kv_cache", m=m)], (), "CUDA 12"),
            (FakeDriver(), (("map", "tensormap"),), [arg("map", "tensor", "kv_cache")], (), "bound to a 'tensor'"),
            (FakeDriver(), (("map", "tensormap"),), [arg("map", "tensormap", "k_cache", m=m)], (), "does not declare"),
            (FakeDriver(), (("map", "tensormap"),), [arg("map", "tensormap", "kv_cache", m=TensorMap((512, 576), (64,)))], (),
             "cannot encode"),
            (FakeDriver(), (("p", "struct"),), [arg("p", "struct", fields=(StructField(6, 4, arg("", "int", i=1)),))],
             (("k", "p", 16),), "offset 6"),
            (FakeDriver(), (("p", "struct"),), [arg("p", "struct")], (), "struct of 0 bytes"),
            (FakeDriver(), (("x", "f64"),), [arg("x", "float", f=1.0)], (), "does not pass"),
            (FakeDriver(), (("x", "ptr"),), [], (), "not bound"),
            (FakeDriver(), (("x", "i32"),), [arg("x", "tensormap", "q", m=m)], (), "argument kind 'tensormap'"),
        ]:
            with self.subTest(want=want), self.assertRaises(CudaError) as cm:
                step(drv, params, args, structs)
            self.assertIn(want, str(cm.exception))

    def test_strides_of_the_tensors_bound_reach_the_kernel(self):
        # Queries split as DeepSeek leaves them (QuerySplit): each launch
        # passes the strides of the views bound then, as i64 parameters
        # and as a struct's fields.
        drv = FakeDriver()
        params = (("q", "ptr"), ("q_t", "i64"), ("q_h", "i64"), ("p", "struct"))
        fields = (StructField(0, 8, arg("", "tensor", "out")), StructField(8, 8, LaunchArg("", "stride", "out", 0, 0, 0.0, dim=1)))
        st = step(drv, params, [arg("q", "tensor", "q"), LaunchArg("q_t", "stride", "q", 0, 0, 0.0, dim=0),
                                LaunchArg("q_h", "stride", "q", 0, 0, 0.0, dim=1), arg("p", "struct", fields=fields)],
                  structs=(("k", "p", 16),))
        self.assertEqual((st.tensors(), st.strided()), ({0, 2}, {0, 2}))
        drv.sizes = [8, 8, 8, 16]
        st.run(drv, [0x1000, 0, 0x3000], [(512, 4 * 512, 1), None, (16 * 512, 512, 1)], None)
        st.run(drv, [0x1000, 0, 0x3000], [(16 * 576, 576, 1), None, (16 * 512, 512, 1)], None)
        q, t, h, p = drv.launched[0]
        self.assertEqual([struct.unpack("<q", x)[0] for x in (q, t, h)], [0x1000, 512, 2048])
        self.assertEqual(struct.unpack("<Qq", p), (0x3000, 512))
        self.assertEqual([struct.unpack("<q", x)[0] for x in drv.launched[1][1:3]], [16 * 576, 576])

    def test_what_cannot_be_passed_is_refused_strides(self):
        for params, args, want in [
            ((("x", "i32"),), [LaunchArg("x", "stride", "q", 0, 0, 0.0, dim=0)], "bound to a stride"),
            ((("x", "i64"),), [LaunchArg("x", "stride", "q", 0, 0, 0.0, dim=3)], "dimension 3 of tensor q, which has 3"),
            ((("x", "i64"),), [LaunchArg("x", "stride", "k", 0, 0, 0.0, dim=0)], "does not declare"),
        ]:
            with self.subTest(want=want), self.assertRaises(CudaError) as cm:
                step(FakeDriver(), params, args)
            self.assertIn(want, str(cm.exception))

    def test_a_cluster_launches_through_cuLaunchKernelEx(self):
        drv = FakeDriver()
        launch = Launch("m", "k", (8, 3, 1), (256, 1, 1), 170048, (arg("x", "int", i=7),), False, cluster=(8, 1, 1))
        st = _Step(drv, {"m": FakeModule(module((("x", "i32"),)))}, launch, 0, {}, SPECS)
        drv.sizes = [4]
        st.run(drv, [0x1000, 0x2000, 0x3000], None, ctypes.c_void_p(0x77))
        self.assertEqual(drv.configs, [dict(grid=(8, 3, 1), block=(256, 1, 1), shared=170048, stream=0x77, attrs=[(4, (8, 1, 1))])])
        self.assertEqual(drv.launched, [[struct.pack("<i", 7)]])

    def test_a_cluster_needs_cuLaunchKernelEx(self):
        launch = Launch("m", "k", (2, 1, 1), (128, 1, 1), 0, (arg("x", "int", i=1),), False, cluster=(2, 1, 1))
        with self.assertRaises(CudaError) as cm:
            _Step(FakeDriver(launch_ex=False), {"m": FakeModule(module((("x", "i32"),)))}, launch, 0, {}, SPECS)
        self.assertIn("cuLaunchKernelEx", str(cm.exception))


class FakeTensor:
    """What Prepared.check reads of a torch tensor: contiguous, or of the
    given strides (in elements of elem bytes)."""

    _version = 0  # torch's count of in-place changes

    def __init__(self, spec, ptr, device="cuda:0", strides=None, elem=2):
        self.dtype, self.shape, self.device, self.ptr = spec.dtype, spec.shape, device, ptr
        self.strides, self.elem = strides, elem

    def is_contiguous(self):
        return self.strides is None

    def data_ptr(self):
        return self.ptr

    def dim(self):
        return len(self.shape)

    def element_size(self):
        return self.elem

    def stride(self, d=None):
        s = self.strides
        if s is None:
            s, n = [], 1
            for x in reversed(self.shape):
                s.insert(0, n)
                n *= x
            s = tuple(s)
        return s if d is None else s[d]


def prepared(specs):
    """A Prepared of a plan declaring specs, without a GPU: Prepared.check
    alone (dtypes stand for torch's by their names)."""
    p = Prepared.__new__(Prepared)
    p._declare(specs, {t.name: t.dtype for t in specs}, "cuda:0")
    return p


class CheckTest(unittest.TestCase):
    # A plan made for a bf16 cache: no kv_scale.
    BF16 = (TensorSpec("q", "bf16", (4, 16, 576), False), TensorSpec("kv_cache", "bf16", (8, 64, 576), False),
            TensorSpec("kv_indices", "i32", (8,), False), TensorSpec("out", "bf16", (4, 16, 512), True))

    def tensors(self, specs):
        return {t.name: FakeTensor(t, 0x1000 * (i + 1)) for i, t in enumerate(specs)}

    def test_the_declared_tensors_bind(self):
        self.assertEqual(prepared(self.BF16).check(self.tensors(self.BF16)), [0x1000, 0x2000, 0x3000, 0x4000])

    def test_a_tensor_the_plan_does_not_declare_is_refused(self):
        # An FP8 pool's scale, given to a plan made for a bf16 cache; a
        # sparse layer's indices, given to a dense plan.
        for name, spec in (("kv_scale", TensorSpec("kv_scale", "f32", (1,), False)),
                           ("topk_indices", TensorSpec("topk_indices", "i32", (4, 2048), False))):
            t = self.tensors(self.BF16)
            t[name] = FakeTensor(spec, 0x9000)
            with self.assertRaises(TensorMismatch) as cm:
                prepared(self.BF16).check(t)
            self.assertIn("tensor %s: the plan does not declare it (it declares q, kv_cache, kv_indices, out)" % name,
                          str(cm.exception))
            with self.assertRaises(TensorMismatch):
                prepared(self.BF16).check(t, only={0})  # a launch that reads q alone

    def test_a_tensor_checked_once_is_checked_again_for_its_shape(self):
        # The tensor objects found to match are not checked again for their
        # dtype, device and layout; a new object is, and one resized in
        # place is refused.
        p = prepared(self.BF16)
        t = self.tensors(self.BF16)
        self.assertEqual(p.check(t), [0x1000, 0x2000, 0x3000, 0x4000])
        t["q"].ptr = 0x5000
        self.assertEqual(p.check(t)[0], 0x5000, "the address is read at every check")
        t["q"].shape = (2, 16, 576)
        with self.assertRaisesRegex(TensorMismatch, r"tensor q: shape \(2, 16, 576\), the plan wants \(4, 16, 576\)"):
            p.check(t)
        t = self.tensors(self.BF16)
        p.check(t)
        t["out"] = FakeTensor(TensorSpec("out", "f32", (4, 16, 512), True), 0x4000)
        with self.assertRaisesRegex(TensorMismatch, "tensor out: dtype f32, the plan wants bf16"):
            p.check(t)

    def test_an_in_place_change_is_checked_again(self):
        # set_, t_ or resize_ of a tensor object already bound bump its
        # version: it is checked again in full.
        p = prepared(self.BF16)
        t = self.tensors(self.BF16)
        p.check(t)
        t["q"].strides, t["q"]._version = (576, 4 * 576, 1), 1
        with self.assertRaisesRegex(TensorMismatch, "tensor q: strides"):
            p.check(t)

    def test_a_plan_keeps_no_tensor_alive(self):
        # A kept plan remembers the tensors it checked by weak reference:
        # a layer's queries and output are freed with the layer.
        import gc
        import weakref
        p = prepared(self.BF16)
        t = self.tensors(self.BF16)
        p.check(t)
        gone = weakref.ref(t["out"])
        del t
        gc.collect()
        self.assertIsNone(gone())

    def test_a_missing_or_wrong_tensor_is_refused(self):
        t = self.tensors(self.BF16)
        del t["kv_indices"]
        with self.assertRaisesRegex(TensorMismatch, "tensor kv_indices: not bound"):
            prepared(self.BF16).check(t)
        t = self.tensors(self.BF16)
        t["kv_cache"] = FakeTensor(TensorSpec("kv_cache", "fp8_e4m3", (8, 64, 576), False), 0x2000)
        with self.assertRaisesRegex(TensorMismatch, "tensor kv_cache: dtype fp8_e4m3, the plan wants bf16"):
            prepared(self.BF16).check(t)


    def test_a_strided_tensor_binds_as_a_view(self):
        # q nope as DeepSeek's bmm leaves it: [tokens, heads, 512], the
        # transpose of [heads, tokens, 512]; q rope a slice of [tokens,
        # heads, 192]. Another tensor stays contiguous.
        specs = (TensorSpec("q_nope", "bf16", (4, 16, 512), False, True), TensorSpec("q_rope", "bf16", (4, 16, 64), False, True),
                 TensorSpec("out", "bf16", (4, 16, 512), True))
        t = {"q_nope": FakeTensor(specs[0], 0x1000, strides=(512, 4 * 512, 1)),
             "q_rope": FakeTensor(specs[1], 0x2100, strides=(16 * 192, 192, 1)),
             "out": FakeTensor(specs[2], 0x3000)}
        p = prepared(specs)
        p._strided = [0, 1]
        self.assertEqual(p._bind(t, [(i,) + p._want[i] for i in range(3)]),
                         ([0x1000, 0x2100, 0x3000], [(512, 2048, 1), (3072, 192, 1), None]))
        for name, tensor, want in [
            ("q_rope", FakeTensor(specs[1], 0x2108, strides=(16 * 192, 192, 1)), "rows start at multiples of 16 bytes"),
            ("q_rope", FakeTensor(specs[1], 0x2100, strides=(16 * 196, 196, 1)), r"strides \(3136, 196, 1\)"),
            ("q_nope", FakeTensor(specs[0], 0x1000, strides=(512, 1, 16)), "its last dimension not contiguous"),
            ("out", FakeTensor(specs[2], 0x3000, strides=(512, 4 * 512, 1)), r"tensor out: strides \(512, 2048, 1\), not contiguous"),
            ("out", FakeTensor(specs[2], 0x3002), "tensor out: at address 0x3002, not a multiple of 16 bytes"),
        ]:
            with self.subTest(want=want):
                bad = dict(t, **{name: tensor})
                with self.assertRaisesRegex(TensorMismatch, want):
                    prepared(specs).check(bad)


class DecodeTest(unittest.TestCase):
    def test_plans_carry_descriptors_and_structs(self):
        pb = dispatch_pb2.Plan(launches=[dispatch_pb2.Launch(
            module="m", entry="k", grid=[1, 1, 1], block=[128, 1, 1],
            args=[dispatch_pb2.LaunchArg(param="map", kind="tensormap", name="kv_cache",
                                         map=dispatch_pb2.TensorMap(view=[512, 576], box=[64, 64], swizzle="128B",
                                                                    l2_promotion="256B", oob_nan=True)),
                  dispatch_pb2.LaunchArg(param="p", kind="struct", fields=[
                      dispatch_pb2.StructField(offset=8, size=4, value=dispatch_pb2.LaunchArg(kind="int", int_value=7))])])])
        l = plan_from_proto(pb).launches[0]
        self.assertEqual(l.args[0].map, TensorMap((512, 576), (64, 64), "128B", "256B", True))
        self.assertEqual(l.args[1].fields, ((8, 4, LaunchArg("", "int", "", 0, 7, 0.0)),))
        mod = module_from_proto(dispatch_pb2.KernelModule(name="m", entries=[dispatch_pb2.KernelEntry(
            name="k", params=[dispatch_pb2.KernelParam(name="map", kind="tensormap"),
                              dispatch_pb2.KernelParam(name="p", kind="struct", size=24)])]))
        self.assertEqual(mod.entry("k"), (("map", "tensormap"), ("p", "struct")))
        self.assertEqual((mod.struct_size("k", "p"), mod.struct_size("k", "map")), (24, 0))


if __name__ == "__main__":
    unittest.main()


class RouteTest(unittest.TestCase):
    def test_a_plan_and_its_modules_are_of_one_route(self):
        # A hot swap between the modules and the plan of a step: the plan
        # is asked again, and prepared with the modules of its own route.
        import threading
        from types import SimpleNamespace
        from unittest import mock
        from attnplug import device
        from attnplug.device import Launcher

        class Source:
            stats = {"plan_requests": 0}

            def __init__(self):
                self.v, self.asked = 1, []

            def request(self, r):
                return r

            def modules(self):
                return [SimpleNamespace(name="m%d" % self.v, image=b"image", sha256="")], self.v

            def step(self, req):
                self.v = 2  # a swap after the first modules: the plans are of route 2
                self.asked.append(self.v)
                plan = SimpleNamespace(key="k%d" % self.v, module_sha256=(), launches=())
                return SimpleNamespace(plan=plan, max_seq_len=0, pages_per_request=0), self.v

        lch = Launcher.__new__(Launcher)
        lch.source, lch.backend, lch.ordinal = Source(), "fa3", 0
        lch._drv = SimpleNamespace(use_primary=lambda ordinal: None)
        lch._lock, lch._version, lch._modules, lch._loaded, lch._prepared = threading.Lock(), -1, None, [], {}
        lch.stats = {"plan_requests": 0, "module_loads": 0, "images_loaded": 0}
        made = lambda launcher, plan, req, mods: SimpleNamespace(plan=plan, mods=sorted(mods))
        with mock.patch.object(device, "_Module", lambda drv, m: m), mock.patch.object(device, "Prepared", made), \
                mock.patch.object(device._Images, "_loaded", {}):
            p = lch.step({})
            self.assertEqual((p.plan.key, p.mods, lch.source.asked), ("k2", ["m2"], [2, 2]))
            # An answer of an older route than the one in force is not taken.
            self.assertFalse(lch._sync(1))
            self.assertEqual(lch._version, 2)

    def test_an_image_is_loaded_once_per_process_and_device(self):
        # Two Launchers (an engine's target and draft runners) and a route
        # that comes back to an image share one loaded module; another
        # image of the name, or another device, loads its own.
        import hashlib
        from types import SimpleNamespace
        from unittest import mock
        from attnplug import device

        loads = []

        def module(drv, m):
            loads.append(m.name)
            return SimpleNamespace(mod=m)

        def mod(name, image, sha=None):
            return SimpleNamespace(name=name, image=image, sha256=hashlib.sha256(image).hexdigest() if sha is None else sha)

        with mock.patch.object(device, "_Module", module), mock.patch.object(device._Images, "_loaded", {}):
            a, new_a = device._Images.load(None, 0, mod("fa3_mla", b"one"))
            b, new_b = device._Images.load(None, 0, mod("fa3_mla", b"one"))
            self.assertIs(a, b)
            self.assertEqual((new_a, new_b, loads), (True, False, ["fa3_mla"]))
            c, new_c = device._Images.load(None, 0, mod("fa3_mla", b"two"))
            d, new_d = device._Images.load(None, 1, mod("fa3_mla", b"one"))
            self.assertEqual((new_c, new_d, len({id(a), id(c), id(d)})), (True, True, 3))
            # A module from a server older than sha256 is keyed by its image.
            e, new_e = device._Images.load(None, 0, mod("fa3_mla", b"one", sha=""))
            self.assertEqual((e is a, new_e), (True, False))
            with self.assertRaisesRegex(CudaError, "module fa3_mla: its image's SHA-256 is [0-9a-f]{64}, the server named "
                                                   "b{64}"):
                device._Images.load(None, 0, mod("fa3_mla", b"one", sha="bb" * 32))
            self.assertEqual(len(loads), 3)

    def test_a_plan_runs_only_on_the_images_it_was_checked_against(self):
        # The server names the image of each module it checked the plan
        # against; a module loaded with another one is refused by name.
        from types import SimpleNamespace
        from attnplug.device import _check_images
        launch = Launch("m", "k", (1, 1, 1), (32, 1, 1), 0, (), False)
        plan = SimpleNamespace(launches=(launch,), module_sha256=(("m", "aa" * 32),))
        loaded = lambda sha: {"m": SimpleNamespace(mod=SimpleNamespace(sha256=sha))}
        _check_images(plan, loaded("aa" * 32))
        with self.assertRaisesRegex(CudaError, "module m is loaded with image b+, the plan was checked against a+: the plugin"):
            _check_images(plan, loaded("bb" * 32))
        _check_images(SimpleNamespace(launches=(launch,), module_sha256=()), loaded("bb" * 32))  # a plan made here
        p = plan_from_proto(dispatch_pb2.Plan(module_sha256={"m": "aa" * 32, "c": "cc" * 32}))
        self.assertEqual(p.module_sha256, (("c", "cc" * 32), ("m", "aa" * 32)))
