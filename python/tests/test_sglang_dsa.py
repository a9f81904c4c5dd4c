"""attnplug.sglang_dsa: DeepSeek-V3.2's sparse attention on a plugin's
kernels, driven through the stand-ins of attnplug_testing.dsa (sglang's
DSA pool, indexer and DeepseekSparseAttnBackend) as sglang's model runner
and DeepSeek's model drive a backend.

With torch, on the CPU or a GPU (DSAFakeKernelTest): every path through a
real ``attnplug serve`` whose dsa plugin makes the plans, and kernels that
are torch code reading exactly the tensors the plans bind: eager decode,
target verify, a long extend (sparse) and a short prefill (use_mha:
MHA_ONE_SHOT), the indexer's three index spaces (slots, positions,
ragged rows), DeepSeek-V3.2's FP8 rows, both CUDA-graph protocols' hooks
at DeepSeek-V3.2's context length, and what runs without sglang's DSA
backend. With a CUDA GPU (DSAGPUTest): the dsa plugin's real kernels
against float64 computed from the stand-in pool, eager and replayed from
CUDA graphs with outputs poisoned."""

import os
import unittest
from unittest import mock

import serve
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug import sglang_dsa as sd
from attnplug_testing import standins as st

try:
    import torch
    from attnplug_testing import dsa
    HAVE_GPU = torch.cuda.is_available()
except ImportError:  # the CPU suite runs without torch
    torch = dsa = None
    HAVE_GPU = False

TOLERANCE = 1e-2  # relative Frobenius error: bf16 inputs and output (FP8 rows: of their stored values)
V32_CONTEXT = 163840  # DeepSeek-V3.2's context length


def rel_error(got, want):
    got = got.double().reshape(want.shape)
    return (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item()


def reference_mha(q, k, v, scale, seq_lens, q_lens):
    """float64 causal MHA over ragged q, k and v, request by request."""
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64, device=q.device)
    row = key = 0
    for L, m in zip(seq_lens, q_lens):
        s = torch.einsum("thd,khd->htk", q[row:row + m].double(), k[key:key + L].double()) * scale
        limit = L - m + torch.arange(m, device=q.device)
        s = s.masked_fill(~(torch.arange(L, device=q.device)[None, :] <= limit[:, None])[None], float("-inf"))
        out[row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v[key:key + L].double())
        row, key = row + m, key + L
    return out


class DispatchTest(unittest.TestCase):
    """What sglang's dispatch reads of the backend, without torch."""

    def test_a_dsa_layer_answers_as_the_dsa_handler(self):
        class Registry:
            @staticmethod
            def get_handler(name):
                return lambda attn, fb: name

        handle = sb._dispatch_handler("fa3", Registry)
        layer = type("Layer", (), {})()
        self.assertEqual(handle(layer, None), "fa3")
        layer.use_dsa = True
        self.assertEqual(handle(layer, None), "dsa")

    def test_sparse_model(self):
        runner = type("Runner", (), {})()
        runner.model_config = type("Config", (), {"index_topk": 2048})()
        self.assertTrue(sd.is_sparse_model(runner))
        runner.model_config.index_topk = 0
        self.assertFalse(sd.is_sparse_model(runner))


class _DSABase(unittest.TestCase):
    device = "cuda" if HAVE_GPU else "cpu"

    @classmethod
    def setUpClass(cls):
        serve.require_binaries()
        cls.server = serve.Server().start()
        cls.client = Client(cls.server.address, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def check(self, b, loop, fb, inputs, outs, layers=(0, 1), tokens=None):
        """Each layer's output against float64 sparse attention over the
        slots sglang's DSA backend reads for the indexer's top-k (the
        stand-in's own translation); the new tokens' rows written. Returns
        the worst relative error."""
        mr = loop.mr
        pool = mr.token_to_kv_pool
        worst = 0.0
        for i in layers:
            q = torch.cat(inputs[i][:2], dim=-1)
            n = tokens or q.shape[0]
            keys = dsa.latent_rows(pool.get_key_buffer(i))
            slots = b.fallback.slots(loop.topk[i], fb, n)
            want = dsa.reference(keys, slots[:n], q[:n], mr.model_config.scaling)
            self.assertFalse(torch.isnan(outs[i][:n]).any().item(), "layer %d" % i)
            err = rel_error(outs[i][:n], want)
            self.assertLess(err, TOLERANCE, "layer %d" % i)
            worst = max(worst, err)
        return worst

    def check_draft(self, d, loop, fb, inputs, outs, rows):
        """Step i's layers against float64 over the slots step i's
        indexer picked; the worst relative error."""
        pool = loop.mr.token_to_kv_pool
        steps, worst = len(outs), 0.0
        for i in range(steps):
            topks = loop.forwards[len(loop.forwards) - steps + i]
            for layer in range(2):
                q = torch.cat(inputs[i][layer][:2], dim=-1)[:rows]
                slots = d.fallback.attn_backends[i].slots(topks[layer], fb, q.shape[0])
                want = dsa.reference(dsa.latent_rows(pool.get_key_buffer(layer)), slots, q, loop.mr.model_config.scaling)
                self.assertFalse(torch.isnan(outs[i][layer][:rows]).any().item())
                err = rel_error(outs[i][layer][:rows], want)
                self.assertLess(err, TOLERANCE, "step %d layer %d" % (i, layer))
                worst = max(worst, err)
        return worst

    def paths(self, b):
        return {p: (c["plugin"], c["fallback"]) for p, c in b.stats()["paths"].items() if c["plugin"] or c["fallback"]}


@unittest.skipUnless(torch is not None, "needs torch")
class DSAFakeKernelTest(_DSABase):
    """Every path of AttnplugDSABackend with the dsa plugin's real plans
    from a real serve and torch kernels reading what the plans bind."""

    def make(self, kv_dtype=None, context_len=8192, max_tokens=16384, fallback=True, backend="dsa", **kw):
        from attnplug_testing.fake_kernels import FakeLauncher
        mr = dsa.dsa_runner(heads=16, layers=2, context_len=context_len, max_tokens=max_tokens, device=self.device,
                            kv_dtype=kv_dtype)
        launcher = FakeLauncher(self.client, backend)
        self.addCleanup(launcher.close)
        b = sd.AttnplugDSABackend(mr, kernel_backend=backend, launcher=launcher,
                                  fallback=dsa.TorchDSABackend(mr) if fallback else None, **kw)
        return mr, b, launcher, dsa.DSALoop(mr, seed=len(self.id()))

    def step(self, b, loop, fb, split=False, q=1):
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(int(fb.out_cache_loc.shape[0])) for _ in loop.layers]
        return inputs, loop.forward(b, fb, inputs, split=split)

    def test_decode_verify_extend_and_short_prefill(self):
        mr, b, lch, loop = self.make()
        # Two requests longer than the top-k: the indexer picks.
        loop.start([5, 3000, 2100, 700])
        for split in (False, True):
            fb = loop.decode_batch()
            inputs, outs = self.step(b, loop, fb, split)
            self.check(b, loop, fb, inputs, outs)
            loop.advance()
        self.assertEqual(lch.steps[0]["batch"], {"size": 4, "graph": True, "query_tokens": 1})
        self.assertEqual(lch.steps[0]["model"]["index_topk"], 2048)
        fb = loop.verify_batch(3)
        inputs, outs = self.step(b, loop, fb)
        self.check(b, loop, fb, inputs, outs)
        loop.advance()
        # An extend whose longest request is past the dense threshold:
        # sglang's DSA backend says MLA, sparse over the indexer's top-k.
        fb = loop.extend_batch([40, 1, 60, 7])
        inputs, outs = self.step(b, loop, fb)
        self.assertFalse(b.use_mha)
        self.check(b, loop, fb, inputs, outs)
        loop.advance()
        self.assertEqual(self.paths(b), {"decode": (4, 0), "verify": (2, 0), "extend": (2, 0)})
        self.assertEqual(b.stats()["sparse_layers"], 8)
        # One plan a number of query tokens: the verify (12 tokens) and
        # the extend (108) asked for their own; the second decode for none.
        self.assertEqual([s["batch"].get("query_tokens") for s in lch.steps], [1, 1, 3, None])
        self.assertEqual(lch.source.stats["plan_requests"], 3)

    def test_short_prefill_runs_mha_one_shot(self):
        mr, b, lch, loop = self.make()
        loop.start([0, 300])
        fb = loop.extend_batch([30, 100])
        b.init_forward_metadata(fb)
        # sglang's DSA backend's choice, which its dispatch reads of this
        # backend: every request within 2048 keys.
        self.assertTrue(b.use_mha)
        self.assertIs(b.forward_metadata, b.fallback.forward_metadata)
        H = loop.mha_layers[0].tp_q_head_num
        keys = [30, 400]
        q, k, v = loop.randn(130, H, 192), loop.randn(430, H, 192), loop.randn(430, H, 128)
        out = loop.forward_mha(b, fb, 0, q, k, v, loop.randn(130))
        want = reference_mha(q, k, v, loop.mha_layers[0].scaling, keys, [30, 100])
        self.assertLess(rel_error(out, want), TOLERANCE)
        self.assertEqual(lch.steps[-1]["method"], "MHA_ONE_SHOT")
        self.assertEqual(self.paths(b), {"prefill": (1, 0)})
        # An MLA layer in that batch is not the plugin's: sglang's backend
        # chose MHA for it.
        inputs = [loop.inputs(130) for _ in loop.layers]
        loop.forward(b, fb, inputs)
        self.assertIn("use_mha", b.stats()["paths"]["prefill"]["last_reason"])

    def test_index_spaces(self):
        # The fused top-k's slots (above); unfused, positions in the
        # request; and an FP8 pool's prefill, rows of the ragged keys (with
        # and without a prefix), fused and not.
        cases = [("0", None)]
        if hasattr(torch, "float8_e4m3fn"):
            cases += [("1", "fp8"), ("0", "fp8")]
        # (A dense threshold of 64 keys makes short extends sparse.)
        env = {"SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "64"}
        for fuse, fp8 in cases:
            env["SGLANG_DSA_FUSE_TOPK"] = fuse
            with self.subTest(fuse=fuse, fp8=fp8), mock.patch.dict(os.environ, env):
                kv = torch.float8_e4m3fn if fp8 else None
                mr, b, lch, loop = self.make(kv_dtype=kv)
                loop.start([2500, 0, 60])
                for batch in (loop.decode_batch, lambda: loop.verify_batch(2), lambda: loop.extend_batch([30, 5, 9])):
                    fb = batch()
                    inputs, outs = self.step(b, loop, fb)
                    space, fused = b._index_space(fb.forward_mode)
                    self.assertEqual(fused, fuse == "1")
                    self.assertEqual(space, "RAGGED" if fp8 and fb.forward_mode == st.ForwardMode.EXTEND else "PAGED")
                    self.check(b, loop, fb, inputs, outs)
                    loop.advance()
                # No request with a prefix: the ragged keys are the batch's.
                mr, b2, _, loop = self.make(kv_dtype=kv)
                loop.start([0, 0])
                fb = loop.extend_batch([70, 20])
                inputs, outs = self.step(b2, loop, fb)
                self.assertFalse(b2.use_mha)
                self.check(b2, loop, fb, inputs, outs)
                for x in (b, b2):
                    self.assertEqual(x.stats()["fallback_layers"], 0, x.stats())
                self.assertEqual(b.stats()["fp8_layers"] + b2.stats()["fp8_layers"], 8 if fp8 else 0)
                if fp8:
                    self.assertEqual(lch.steps[0]["pool"]["kv_dtype"], "fp8_e4m3")

    def graph(self, protocol, q=1, kv_dtype=None):
        mr, b, lch, loop = self.make(kv_dtype=kv_dtype, context_len=V32_CONTEXT, max_tokens=64 * 150)
        b.init_cuda_graph_state(4, 16)
        loop.start([3, 2500, 600])
        mode = st.ForwardMode.TARGET_VERIFY if q > 1 else st.ForwardMode.DECODE
        static = loop.inputs(4 * q)

        def run(fb):
            return loop.forward(b, fb, [static] * 2)

        runner = st.GraphRunner(b, 4, mode=mode, q=q, protocol=protocol, device=self.device, dry=True)
        runner.capture(run)
        plans = lch.source.stats["plan_requests"]
        for _ in range(3):
            fb = loop.verify_batch(q) if q > 1 else loop.decode_batch()
            loop.refresh([static], 3 * q)
            outs = runner.replay(fb)
            self.check(b, loop, runner.static_batch(), [static] * 2, outs, tokens=3 * q)
            loop.advance()
        self.assertEqual(lch.source.stats["plan_requests"], plans, "no plan asked at replay")
        self.assertEqual(b.stats()["fallback_layers"], 0, b.stats())
        self.assertIn("replay", b.fallback.calls, "sglang's DSA backend gets every replay's metadata call")
        return b

    def test_graph_hooks_both_protocols(self):
        for protocol in ("2026", "legacy"):
            for q in (1, 2):
                with self.subTest(protocol=protocol, q=q):
                    b = self.graph(protocol, q)
                    self.assertEqual(b.stats()["paths"]["verify" if q > 1 else "decode"]["plugin"], 2 * 6)

    @unittest.skipUnless(torch is not None and hasattr(torch, "float8_e4m3fn"), "needs float8_e4m3fn")
    def test_fp8_rows_in_a_graph(self):
        b = self.graph("2026", kv_dtype=torch.float8_e4m3fn)
        self.assertEqual(b.stats()["fp8_layers"], 2 * 6)

    def draft(self, graph=None, kv_dtype=None):
        """A chain draft of 4 tokens (3 steps) of a DeepSeek-V3.2 draft
        model through AttnplugDSAMultiStepDraftBackend over sglang's
        multi-step DSA backend (the stand-in's), eager or from the draft's
        graph runner (graph: its protocol), each step checked."""
        from attnplug_testing.fake_kernels import FakeLauncher
        mr = dsa.dsa_runner(heads=16, layers=2, context_len=V32_CONTEXT, max_tokens=64 * 200, device=self.device,
                            kv_dtype=kv_dtype)
        launcher = FakeLauncher(self.client, "dsa")
        self.addCleanup(launcher.close)
        d = sd.AttnplugDSAMultiStepDraftBackend(mr, 1, 4, fallback=dsa.TorchDSAMultiStepBackend(mr, 1, 4),
                                                kernel_backend="dsa", launcher=launcher)
        loop = dsa.DSALoop(mr, seed=11)
        loop.start([5, 3000, 2100])
        if graph is None:
            fb = loop.draft_batch(4)
            d.init_forward_metadata(fb)
            inputs = [[loop.inputs(3) for _ in loop.layers] for _ in range(3)]
            outs = loop.draft_forward(d, fb, inputs, 4)
            self.check_draft(d, loop, fb, inputs, outs, 3)
            loop.advance()
        else:
            d.init_cuda_graph_state(4, 16)
            static = [[loop.inputs(4) for _ in loop.layers] for _ in range(3)]
            runner = st.GraphRunner(d, 4, protocol=graph, device=self.device, dry=True, draft_steps=4)
            runner.capture(lambda fb: [o for step in loop.draft_forward(d, fb, static, 4) for o in step])
            for _ in range(2):
                fb = loop.draft_batch(4)
                for step in static:
                    loop.refresh(step, 3)
                outs = runner.replay(fb)
                self.check_draft(d, loop, runner.static_batch(), static, [outs[2 * i:2 * i + 2] for i in range(3)], 3)
                loop.advance()
        stats = d.stats()
        self.assertEqual(stats["fallback_layers"], 0, stats)
        return d

    def test_draft_steps(self):
        d = self.draft()
        self.assertEqual(d.stats()["paths"]["draft"]["plugin"], 3 * 2)
        self.assertEqual(d.stats()["sparse_layers"], 3 * 2)
        for protocol in ("2026", "legacy"):
            with self.subTest(protocol=protocol):
                self.draft(graph=protocol)

    def test_draft_factory_gives_the_sparse_draft_backend(self):
        # sglang's DraftBackendFactory under the attnplug name, for a
        # DeepSeek-V3.2 draft model: the sparse multi-step backend over
        # sglang's dsa one (the map's), and an AttnplugDSABackend for the
        # draft extend.
        mr = dsa.dsa_runner(device=self.device, context_len=4096, max_tokens=4096)
        factory = st.DraftBackendFactory(mr, 1, 4)
        sglang_map = {"dsa": lambda: ("dsa", dsa.TorchDSAMultiStepBackend(mr, 1, 4))}
        with mock.patch.dict(os.environ, {sb.ENV_KERNEL_BACKEND: "", sb.ENV_FALLBACK_BACKEND: ""}):
            name, d = sb._draft_backend(factory, sglang_map, True, "attnplug", True)
            _, e = sb._draft_backend(factory, {}, False, "attnplug", True)
        self.assertEqual(name, "attnplug")
        self.assertIsInstance(d, sd.AttnplugDSAMultiStepDraftBackend)
        self.assertIsInstance(d.attn_backends[2], sd.AttnplugDSABackend)
        self.assertIs(d.attn_backends[2].fallback, d.fallback.attn_backends[2])
        self.assertEqual(d.attn_backends[0].kernel_backend, "dsa")
        self.assertIsInstance(e, sd.AttnplugDSABackend)

    def test_without_sglangs_dsa_backend_nothing_runs(self):
        # No DSA backend of sglang's: the indexer is off (no metadata), no
        # top-k reaches a layer, and there is no fallback: refused.
        mr, b, lch, loop = self.make(fallback=False)
        self.assertIsNone(b.get_indexer_metadata(0, None))
        loop.start([5, 3000])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        with self.assertRaises(sb.FallbackRefused) as ctx:
            loop.forward(b, fb, [loop.inputs(2) for _ in loop.layers])
        self.assertIn("no DSA backend", str(ctx.exception))
        self.assertEqual(lch.steps, [])

    def test_no_plan_falls_back_and_strict_refuses(self):
        # fa3's plugin has no sparse kernel: sglang's DSA backend runs the
        # layers, counted with the reason; strict refuses.
        mr, b, lch, loop = self.make(backend="fa3")
        loop.start([5, 3000])
        fb = loop.decode_batch()
        inputs, outs = self.step(b, loop, fb)
        self.check(b, loop, fb, inputs, outs)
        self.assertEqual(self.paths(b), {"decode": (0, 2)})
        self.assertIn("no plan", b.stats()["paths"]["decode"]["last_reason"])
        mr, b, lch, loop = self.make(backend="fa3", strict=True)
        loop.start([5])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        with self.assertRaises(sb.FallbackRefused):
            loop.forward(b, fb, [loop.inputs(1) for _ in loop.layers])

    def test_bench_rows(self):
        # python -m attnplug_testing.bench --gpu's sparse rows, on the CPU
        # with the fake kernels: the code runs, the plugin runs every layer.
        from attnplug_testing import bench
        from attnplug_testing.fake_kernels import FakeLauncher
        # (On the CPU: the fake kernels read lengths on the host, which a
        # CUDA graph's capture does not allow.)
        rows = bench.sparse_paths_main(self.server.address, reps=1, layers=2, device="cpu",
                                       shapes=((16, 2, 300),), kv_dtypes=("bf16",),
                                       launcher=lambda c: FakeLauncher(c, "dsa"))
        self.assertEqual([r["name"] for r in rows], ["sparse_bf16_h16_b2_s300"])
        self.assertGreater(rows[0]["us"], 0)

    def test_shared_read_ends_are_sglangs_dsa_backends(self):
        import enum
        import sys
        import types
        mod = types.ModuleType(sb._sglang.BACKEND_MODULE)
        mod.SharedReadEnds = enum.Enum("SharedReadEnds", ["IN_REPLAY", "UNKNOWN"])
        saved = sys.modules.get(sb._sglang.BACKEND_MODULE)
        sys.modules[sb._sglang.BACKEND_MODULE] = mod
        self.addCleanup(lambda: sys.modules.pop(sb._sglang.BACKEND_MODULE) if saved is None else
                        sys.modules.__setitem__(sb._sglang.BACKEND_MODULE, saved))
        _, b, _, _ = self.make()
        self.assertIs(b.shared_read_ends(st.ForwardMode.DECODE), mod.SharedReadEnds.UNKNOWN)
        b.fallback.shared_read_ends = lambda fm: mod.SharedReadEnds.IN_REPLAY
        self.assertIs(b.shared_read_ends(st.ForwardMode.DECODE), mod.SharedReadEnds.IN_REPLAY)

    def test_create_backend(self):
        mr = dsa.dsa_runner(device=self.device, context_len=4096, max_tokens=4096)
        with mock.patch.dict(os.environ, {sb.ENV_KERNEL_BACKEND: ""}):
            b = sb.create_backend(mr, launcher=object(), fallback=dsa.TorchDSABackend(mr))
        self.assertIsInstance(b, sd.AttnplugDSABackend)
        self.assertEqual(b.kernel_backend, "dsa")
        self.assertIs(b.needs_cpu_seq_lens, False)
        # A dense backend made for it refuses, saying why.
        d = sb.AttnplugMLABackend(mr, launcher=object(), fallback=dsa.TorchDSABackend(mr))
        self.assertIn("AttnplugDSABackend", d._why_not())


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU")
class DSAGPUTest(_DSABase):
    """The dsa plugin's sparse kernels through AttnplugDSABackend at
    DeepSeek-V3.2's context length over a pool of 32768 tokens, against
    float64 (outputs poisoned before each replay)."""

    def make(self, heads=16, kv_dtype=None):
        mr = dsa.dsa_runner(heads=heads, layers=2, context_len=V32_CONTEXT, max_tokens=32768, device="cuda",
                            kv_dtype=kv_dtype)
        b = sd.AttnplugDSABackend(mr, kernel_backend="dsa", client=self.client, fallback=dsa.TorchDSABackend(mr))
        self.addCleanup(b.close)
        return mr, b, dsa.DSALoop(mr, seed=heads)

    def test_eager_paths_match_the_reference(self):
        for heads, kv in ((16, None), (128, None), (16, "fp8"), (128, "fp8")):
            mr, b, loop = self.make(heads, torch.float8_e4m3fn if kv else None)
            loop.start([5, 3000, 2100, 700, 9000])
            for batch in (loop.decode_batch, lambda: loop.verify_batch(2), lambda: loop.extend_batch([40, 1, 200, 7, 64])):
                fb = batch()
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(int(fb.out_cache_loc.shape[0])) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs)
                err = self.check(b, loop, fb, inputs, outs)
                print("dsa %s heads %d %s: rel err %.2e" % (fb.forward_mode.name, heads, kv or "bf16", err))
                loop.advance()
            stats = b.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)
            self.assertEqual(stats["sparse_layers"], 6, stats)

    def test_graph_steps_match_the_reference(self):
        for protocol, kv, q in (("2026", None, 1), ("legacy", None, 2), ("2026", "fp8", 1), ("legacy", "fp8", 1)):
            mr, b, loop = self.make(16, torch.float8_e4m3fn if kv else None)
            b.init_cuda_graph_state(8, 16)
            loop.start([5, 3000, 2100, 700, 9000, 64])
            mode = st.ForwardMode.TARGET_VERIFY if q > 1 else st.ForwardMode.DECODE
            static = loop.inputs(8 * q)
            runner = st.GraphRunner(b, 8, mode=mode, q=q, protocol=protocol)
            runner.capture(lambda fb: loop.forward(b, fb, [static] * 2))
            worst = 0.0
            for _ in range(3):
                fb = loop.verify_batch(q) if q > 1 else loop.decode_batch()
                loop.refresh([static], 6 * q)
                for o in runner.outputs:
                    o.fill_(float("nan"))
                outs = runner.replay(fb)
                torch.cuda.synchronize()
                worst = max(worst, self.check(b, loop, runner.static_batch(), [static] * 2, outs, tokens=6 * q))
                loop.advance()
            print("dsa graph %s q %d %s: rel err %.2e" % (protocol, q, kv or "bf16", worst))
            stats = b.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)

    def test_draft_steps_match_the_reference(self):
        # DeepSeek-V3.2's MTP chain draft of 4 tokens (3 steps) through
        # AttnplugDSAMultiStepDraftBackend, eager and replayed from the
        # draft's CUDA graph in both protocols, outputs poisoned first.
        for protocol, kv in ((None, None), ("2026", None), ("legacy", "fp8")):
            mr = dsa.dsa_runner(heads=16, layers=2, context_len=V32_CONTEXT, max_tokens=32768, device="cuda",
                                kv_dtype=torch.float8_e4m3fn if kv else None)
            d = sd.AttnplugDSAMultiStepDraftBackend(mr, 1, 4, fallback=dsa.TorchDSAMultiStepBackend(mr, 1, 4),
                                                    kernel_backend="dsa", client=self.client)
            self.addCleanup(d.close)
            loop = dsa.DSALoop(mr, seed=7)
            loop.start([5, 3000, 2100, 700, 9000, 64])
            worst = 0.0
            if protocol is None:
                fb = loop.draft_batch(4)
                d.init_forward_metadata(fb)
                inputs = [[loop.inputs(6) for _ in loop.layers] for _ in range(3)]
                worst = self.check_draft(d, loop, fb, inputs, loop.draft_forward(d, fb, inputs, 4), 6)
                loop.advance()
            else:
                d.init_cuda_graph_state(8, 32)
                static = [[loop.inputs(8) for _ in loop.layers] for _ in range(3)]
                runner = st.GraphRunner(d, 8, protocol=protocol, draft_steps=4)
                runner.capture(lambda fb: [o for step in loop.draft_forward(d, fb, static, 4) for o in step])
                for _ in range(3):
                    fb = loop.draft_batch(4)
                    for step in static:
                        loop.refresh(step, 6)
                    for o in runner.outputs:
                        o.fill_(float("nan"))
                    outs = runner.replay(fb)
                    torch.cuda.synchronize()
                    worst = max(worst, self.check_draft(d, loop, runner.static_batch(), static,
                                                        [outs[2 * i:2 * i + 2] for i in range(3)], 6))
                    loop.advance()
            print("dsa draft steps %s %s: rel err %.2e" % (protocol or "eager", kv or "bf16", worst))
            stats = d.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)

    def test_short_prefill_on_the_plugin(self):
        mr, b, loop = self.make(16)
        loop.start([0, 300])
        fb = loop.extend_batch([30, 100])
        b.init_forward_metadata(fb)
        self.assertTrue(b.use_mha)
        H = 16
        q, k, v = loop.randn(130, H, 192), loop.randn(430, H, 192), loop.randn(430, H, 128)
        out = loop.forward_mha(b, fb, 0, q, k, v, loop.randn(130))
        err = rel_error(out, reference_mha(q, k, v, loop.mha_layers[0].scaling, [30, 400], [30, 100]))
        print("dsa short prefill (MHA_ONE_SHOT): rel err %.2e" % err)
        self.assertLess(err, TOLERANCE)
        self.assertEqual(self.paths(b), {"prefill": (1, 0)})


if __name__ == "__main__":
    unittest.main()
