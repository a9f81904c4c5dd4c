"""A vendor's kernel inside sglang: the acme_mla plugin of
examples/vendor-backend (a module of its own, built here with ``go build``
as its vendor builds it: a static binary holding the PTX of its own CUDA C
kernel, acme_decode) served by the unchanged ``attnplug serve`` beside the
project's plugins, and attnplug.sglang_backend.AttnplugMLABackend with
kernel_backend="acme_mla" driven through the stand-ins of sglang
(attnplug_testing.standins) as sglang's model runner and graph runner drive
a backend.

With torch, on the CPU or a GPU (AcmeFakeKernelTest): acme's real plans
from the real server (one per batch shape; the plan request, its bound and
its key are the server's), run by kernels that are torch code checking
every tensor bound against the plan's specs (attnplug_testing.fake_kernels):
eager decode, target verify and absorbed-MLA extend, both CUDA-graph
protocols' hooks (without a graph), no layer on the fallback, strict mode
on, outputs against float64; a page size acme's catalog lacks falls back
with acme's reason, and strict mode refuses it. With a CUDA GPU
(AcmeGPUTest): acme's own kernel, loaded from its PTX by the real launcher,
against float64 (16 and 128 heads, page sizes 1 and 64, decode and verify),
and a 61-layer decode step captured through GraphRunner and replayed with
growing lengths, outputs poisoned before each checked replay, no RPC after
warm-up, no layer on the fallback.

The plugin: $ATTNPLUG_ACME_BIN when set (a plugin built elsewhere, for a
GPU host without Go), else built with ``go build`` (CGO_ENABLED=0) from
examples/vendor-backend."""

import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

import serve
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug_testing import standins as st

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:  # the CPU suite runs without torch
    torch = None
    HAVE_GPU = False

if torch is not None:
    from test_sglang_backend import TOLERANCE, CountingClient, reference, rel_error

EXAMPLE = os.path.join(serve.ROOT, "examples", "vendor-backend")
PLUGIN = "attnplug-backend-acme_mla"
BACKEND = "acme_mla"

_tree = None


def acme_tree():
    """A directory holding copies of bin/attnplug and bin/plugins and the
    acme_mla plugin beside them (made once for the module); returns its
    attnplug."""
    global _tree
    if _tree is not None:
        return os.path.join(_tree, "attnplug")
    serve.require_binaries()
    tree = tempfile.mkdtemp(prefix="ap-acme-")
    try:
        serve.copy_tree(tree)
        out = os.path.join(tree, "plugins", PLUGIN)
        prebuilt = os.environ.get("ATTNPLUG_ACME_BIN")
        if prebuilt:
            shutil.copy2(prebuilt, out)
        else:
            go = shutil.which("go")
            if go is None:
                raise AssertionError("no go on PATH to build %s: install Go, or set ATTNPLUG_ACME_BIN to a built "
                                     "acme_mla plugin" % EXAMPLE)
            env = dict(os.environ, CGO_ENABLED="0", GOWORK="off")
            r = subprocess.run([go, "build", "-buildvcs=false", "-o", out, "."], cwd=EXAMPLE, env=env,
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise AssertionError("go build in %s exited %d:\n%s" % (EXAMPLE, r.returncode, r.stderr[-4000:]))
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise
    _tree = tree
    return os.path.join(tree, "attnplug")


def tearDownModule():
    if _tree is not None:
        shutil.rmtree(_tree, ignore_errors=True)


def acme_server():
    """attnplug serve over the tree with acme_mla. Its Hardware is acme's
    made-up accelerator: serve.Server serves with --match-hardware=false,
    which every host without one needs."""
    return serve.Server(host=acme_tree()).start()


@unittest.skipUnless(torch is not None, "needs torch")
class AcmeFakeKernelTest(unittest.TestCase):
    """acme's plans from a real serve, run by torch code reading exactly
    the tensors they bind: on the GPU where there is one, else on the
    CPU."""

    device = "cuda" if HAVE_GPU else "cpu"

    @classmethod
    def setUpClass(cls):
        cls.server = acme_server()
        cls.client = Client(cls.server.address, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def make(self, heads=16, layers=2, page=64, context_len=1024, max_requests=8, runner=None, strict=True):
        from attnplug_testing.fake_kernels import FakeLauncher
        from attnplug_testing.torch_mla import TorchMLABackend
        mr = runner or st.ModelRunner.make(heads=heads, layers=layers, page_size=page, context_len=context_len,
                                           max_requests=max_requests, device=self.device)
        launcher = FakeLauncher(self.client, BACKEND)
        self.addCleanup(launcher.close)
        b = sb.AttnplugMLABackend(mr, kernel_backend=BACKEND, launcher=launcher, fallback=TorchMLABackend(mr),
                                  strict=strict)
        return mr, b, launcher

    def check(self, mr, fb, inputs, outs, q_len, extra, layers=(0, 1), q_lens=None):
        pool = mr.token_to_kv_pool
        rpi = fb.req_pool_indices.tolist()
        kv_lens = [n + extra for n in fb.seq_lens.tolist()]
        for i in layers:
            q = torch.cat(inputs[i][:2], dim=-1)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, rpi, kv_lens, q,
                             mr.model_config.scaling, q_lens or [q_len] * len(rpi))
            self.assertLess(rel_error(outs[i], want), TOLERANCE, "layer %d" % i)

    def paths(self, b):
        return {p: (c["plugin"], c["fallback"]) for p, c in b.stats()["paths"].items() if c["plugin"] or c["fallback"]}

    def test_eager_decode_verify_extend(self):
        for heads, page in ((16, 64), (128, 1)):
            mr, b, lch = self.make(heads=heads, page=page)
            loop = st.DecodeLoop(mr, seed=page)
            loop.start([1, 37, 300, 900, 64])
            for split in (True, False, True):
                fb = loop.decode_batch()
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=split)
                self.check(mr, fb, inputs, outs, 1, 0)
                loop.advance()
            # One plan for the batch shape, whatever the lengths: acme's
            # plan holds for the server's bound.
            self.assertEqual(lch.source.stats["plan_requests"], 1, "one plan for the batch shape")
            p = next(iter(lch.prepared.values()))
            self.assertEqual(p.plan.kernel, "acme_mla_decode")
            self.assertEqual([(l.module, l.entry, l.grid, l.block) for l in p.plan.launches],
                             [("acme_decode", "acme_decode", (5, heads, 1), (128, 1, 1))])
            self.assertTrue(p.plan.holds_for_batch())
            # The queries offered split; acme's catalog takes them whole.
            self.assertTrue(lch.steps[0]["query_split"])
            self.assertTrue(p.declares("q") and not p.declares("q_nope"))
            for n in (2, 4):
                fb = loop.verify_batch(n)
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size * n) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=(n == 2))
                self.check(mr, fb, inputs, outs, n, n)
                loop.advance()
            self.assertEqual(lch.source.stats["plan_requests"], 3, "one plan for each verify shape")
            fb = loop.extend_batch([3, 9, 1, 30, 2])
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(45) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check(mr, fb, inputs, outs, None, 0, q_lens=[3, 9, 1, 30, 2])
            loop.advance()
            self.assertEqual(self.paths(b), {"decode": (6, 0), "verify": (4, 0), "extend": (2, 0)})
            self.assertEqual(b.stats()["fallback_layers"], 0)
            self.assertEqual(lch.batch_launches, 0, "acme's plans have no scheduler")

    def graph_loop(self, protocol, q=1, steps=6, layers=4):
        mr = st.ModelRunner.make(heads=16, layers=layers, page_size=64, context_len=1024, max_requests=8,
                                 device=self.device)
        mr, b, lch = self.make(runner=mr)
        b.init_cuda_graph_state(4, 16)
        loop = st.DecodeLoop(mr, seed=9)
        loop.start([3, 100, 600])
        mode = st.ForwardMode.TARGET_VERIFY if q > 1 else st.ForwardMode.DECODE
        static = loop.inputs(4 * q)

        def run(fb):
            return loop.forward(b, fb, [static] * layers)

        runner = st.GraphRunner(b, 4, mode=mode, q=q, protocol=protocol, device=self.device, dry=True)
        runner.capture(run)
        self.assertEqual(lch.source.stats["plan_requests"], 1)
        for _ in range(steps):
            fb = loop.verify_batch(q) if q > 1 else loop.decode_batch()
            fresh = loop.inputs(3 * q)
            for t, f in zip(static, fresh):
                t.zero_()
                t[:3 * q].copy_(f)
            for o in runner.outputs:
                o.fill_(float("nan"))
            outs = runner.replay(fb)
            rows = 3 * q
            self.check(mr, fb, [[x[:rows] for x in static]] * layers, [o[:rows] for o in outs], q, q if q > 1 else 0,
                       layers=(0, layers - 1))
            loop.advance()
        self.assertEqual(lch.source.stats["plan_requests"], 1, "no plan asked at replay")
        stats = b.stats()
        path = "verify" if q > 1 else "decode"
        self.assertEqual(stats["fallback_layers"], 0, stats)
        self.assertGreater(stats["paths"][path]["plugin"], 0, stats)
        self.assertEqual(stats["refused_at_capture"], 0, stats)

    def test_graph_hooks_2026_protocol(self):
        self.graph_loop("2026")
        self.graph_loop("2026", q=3)

    def test_graph_hooks_legacy_protocol(self):
        self.graph_loop("legacy")
        self.graph_loop("legacy", q=2)

    def test_a_batch_off_the_catalog_runs_the_fallback_named(self):
        # sglang has no backend named acme_mla: the fallback is the one
        # $ATTNPLUG_FALLBACK_BACKEND names. A pool of pages of 16 tokens,
        # which acme_mla's catalog does not list, has no plan.
        from attnplug_testing.fake_kernels import FakeLauncher
        from attnplug_testing.torch_mla import TorchMLABackend
        saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}

        def restore():
            for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        self.addCleanup(restore)
        names = ["sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
                 "sglang.srt.layers.attention.attention_registry"]
        for parent, name in zip([None] + names, names):
            sys.modules[name] = types.ModuleType(name)
            if parent is not None:
                setattr(sys.modules[parent], name.rsplit(".", 1)[1], sys.modules[name])
        sys.modules[names[-1]].ATTENTION_BACKENDS = {"triton": TorchMLABackend}
        self.addCleanup(os.environ.pop, sb.ENV_FALLBACK_BACKEND, None)
        for fallback in (None, "triton"):
            if fallback:
                os.environ[sb.ENV_FALLBACK_BACKEND] = fallback
            mr = st.ModelRunner.make(heads=16, layers=2, page_size=16, context_len=1024, max_requests=8,
                                     device=self.device)
            launcher = FakeLauncher(self.client, BACKEND)
            self.addCleanup(launcher.close)
            b = sb.AttnplugMLABackend(mr, kernel_backend=BACKEND, launcher=launcher, strict=False)
            loop = st.DecodeLoop(mr, seed=4)
            loop.start([0, 0])
            fb = loop.extend_batch([100, 5])
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(105) for _ in loop.layers]
            if fallback is None:
                self.assertIsNone(b.fallback)
                with self.assertRaises(sb.FallbackRefused) as cm:
                    loop.forward(b, fb, inputs)
                self.assertIn("not shape.page_size 16", cm.exception.reason)
                self.assertIn("no fallback", cm.exception.reason)
                continue
            self.assertIsInstance(b.fallback, TorchMLABackend)
            self.check(mr, fb, inputs, loop.forward(b, fb, inputs), None, 0, q_lens=[100, 5])
            loop.advance()
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(2) for _ in loop.layers]
            self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
            self.assertEqual(self.paths(b), {"extend": (0, 2), "decode": (0, 2)})
            self.assertIn("not shape.page_size 16", b.stats()["paths"]["extend"]["last_reason"])

    def test_page_size_off_the_catalog_falls_back_with_the_reason(self):
        # acme_mla's catalog lists pages of 1 and 64 tokens: the host asks
        # its plugin no plan for 16 and says why, and the fallback runs.
        mr, b, lch = self.make(page=16, strict=False)
        loop = st.DecodeLoop(mr, seed=2)
        loop.start([5, 500])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
        self.assertEqual(self.paths(b), {"decode": (0, 2)})
        self.assertIn("acme_mla_decode takes page sizes [1 64], not shape.page_size 16",
                      b.stats()["paths"]["decode"]["last_reason"])
        # Strict mode refuses it instead, with the same reason.
        mr, b, _ = self.make(page=16)
        loop = st.DecodeLoop(mr, seed=2)
        loop.start([5, 500])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        with self.assertRaises(sb.FallbackRefused) as cm:
            loop.forward(b, fb, [loop.inputs(2) for _ in loop.layers])
        self.assertEqual(cm.exception.path, "decode")
        self.assertIn("not shape.page_size 16", cm.exception.reason)


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU: acme_decode's PTX runs on compute capability 8.0 or newer")
class AcmeGPUTest(unittest.TestCase):
    """acme's own kernel, from the PTX in its plugin, through the real
    launcher."""

    @classmethod
    def setUpClass(cls):
        cls.server = acme_server()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def backend(self, mr):
        from attnplug_testing.torch_mla import TorchMLABackend
        client = CountingClient(self.server.address, timeout=120)
        self.addCleanup(client.close)
        b = sb.AttnplugMLABackend(mr, kernel_backend=BACKEND, client=client, fallback=TorchMLABackend(mr), strict=True)
        self.addCleanup(b.close)
        return b, client

    def check(self, mr, fb, inputs, outs, layers, q_len, extra):
        pool = mr.token_to_kv_pool
        rpi = fb.req_pool_indices.tolist()
        kv_lens = [n + extra for n in fb.seq_lens.tolist()]
        worst = 0.0
        for i in layers:
            q = torch.cat(inputs[i][:2], dim=-1)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, rpi, kv_lens, q,
                             mr.model_config.scaling, [q_len] * len(rpi))
            self.assertFalse(torch.isnan(outs[i]).any().item(), "layer %d left outputs unwritten" % i)
            err = rel_error(outs[i], want)
            self.assertLess(err, TOLERANCE, "layer %d" % i)
            worst = max(worst, err)
        return worst

    def test_decode_and_verify_match_the_reference(self):
        for heads, page in ((16, 64), (128, 1)):
            mr = st.ModelRunner.make(heads=heads, layers=2, page_size=page, context_len=4096, max_requests=8)
            b, _ = self.backend(mr)
            loop = st.DecodeLoop(mr, seed=heads + page)
            loop.start([1, 37, 700, 2047, 64, 3000])
            for split in (True, False):
                fb = loop.decode_batch()
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=split)
                err = self.check(mr, fb, inputs, outs, range(2), 1, 0)
                loop.advance()
                print("acme decode heads %d page %d: rel err %.2e" % (heads, page, err))
            for n in (2, 4):
                fb = loop.verify_batch(n)
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size * n) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=(n == 2))
                err = self.check(mr, fb, inputs, outs, range(2), n, n)
                loop.advance()
                print("acme verify %d heads %d page %d: rel err %.2e" % (n, heads, page, err))
            stats = b.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)
            self.assertEqual((stats["paths"]["decode"]["plugin"], stats["paths"]["verify"]["plugin"]), (4, 4), stats)
            self.assertEqual(stats["module_loads"], 1, stats)

    def test_61_layer_step_in_a_graph(self):
        bs, layers, steps = 8, 61, 48
        mr = st.ModelRunner.make(heads=16, layers=layers, page_size=64, context_len=4096, max_requests=bs)
        b, client = self.backend(mr)
        b.init_cuda_graph_state(bs, bs)
        loop = st.DecodeLoop(mr, seed=7)
        loop.start([100 + 370 * i for i in range(bs)])
        static = loop.inputs(bs)  # one set of inputs for every layer, refreshed before each replay

        def run(fb):
            return loop.forward(b, fb, [static] * layers)

        runner = st.GraphRunner(b, bs)
        runner.capture(run)
        rpcs = None
        sampled = {0, 1, steps // 2, steps - 1}
        checked = 0
        for step in range(steps):
            fb = loop.decode_batch()
            for t, fresh in zip(static, loop.inputs(bs)):
                t.copy_(fresh)
            if step in sampled:
                for o in runner.outputs:
                    o.fill_(float("nan"))
            outs = runner.replay(fb)
            if step == 0:
                torch.cuda.synchronize()
                rpcs = client.rpcs  # warm-up done
            if step in sampled:
                torch.cuda.synchronize()
                err = self.check(mr, fb, [static] * layers, outs, (0, layers // 2, layers - 1), 1, 0)
                print("acme graph step %d (longest %d keys): rel err %.2e" % (step, max(fb.seq_lens.tolist()), err))
                checked += 1
            loop.advance()
        torch.cuda.synchronize()
        self.assertEqual(checked, len(sampled))
        self.assertEqual(client.rpcs, rpcs, "RPCs after warm-up")
        stats = b.stats()
        print("acme in a graph:", stats)
        self.assertEqual(stats["fallback_layers"], 0, stats)
        self.assertGreater(stats["paths"]["decode"]["plugin"], 0, stats)
        self.assertEqual(stats["module_loads"], 1, stats)
        self.assertEqual(stats["refused_at_capture"], 0, stats)
