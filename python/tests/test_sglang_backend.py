"""attnplug.sglang_backend: the sglang attention backend that runs a plugin's
kernels, driven through the stand-ins of attnplug_testing.standins as
sglang's model runner drives a backend.

Without torch: the module imports, its contract attributes, and the
registration in sglang's mechanisms (stand-in sglang modules). With torch,
on the CPU or a GPU (FakeKernelTest): every DeepSeek path through a real
``attnplug serve`` whose fa3 plugin makes the plans (the plan request, its
bound and its key are the server's) and kernels that are torch code reading
exactly the tensors the plans bind, checked against the plans' own specs:
eager decode, target verify, absorbed-MLA extend, MHA prefill (one shot,
and the new tokens of a chunked prefix with their LSE), both CUDA-graph
protocols' hooks at DeepSeek-V3's context length, the fallback's paths and
reasons, strict mode, a unified KV pool, a server killed for real. With a
CUDA GPU (BackendGPUTest): the plugin's real kernels against a float64
reference computed from the stand-in pools (16 and 128 heads, page sizes 1
and 64, ragged batches, both of DeepSeek's call forms); a 61-layer decode
step captured through each protocol's CUDA-graph hooks and replayed 200
steps with growing lengths, no RPC after warm-up; a plugin swapped under
the running serve; a server killed."""

import importlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import types
import unittest
from unittest import mock

import serve
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug import sglang_mla as sb_mla
from attnplug_testing import handlers
from attnplug_testing import standins as st

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:  # the CPU suite runs without torch
    torch = None
    HAVE_GPU = False

ROOT = serve.ROOT
TOLERANCE = 1e-2  # relative Frobenius error: bf16 inputs and output


class Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def warnings(self, needle=""):
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING and needle in r.getMessage()]


def record_logs(test, name="attnplug.sglang_backend"):
    rec = Recorder()
    logger = logging.getLogger(name)
    logger.addHandler(rec)
    test.addCleanup(logger.removeHandler, rec)
    return rec


# ---------------------------------------------------------------- without torch


class ContractTest(unittest.TestCase):
    """What the backend says of itself to sglang, in pure Python."""

    def test_modes_as_sglang_main(self):
        m = st.ForwardMode
        self.assertTrue(m.TARGET_VERIFY.is_extend() and not m.TARGET_VERIFY.is_extend_without_speculative())
        self.assertTrue(m.DRAFT_EXTEND_V2.is_extend(include_draft_extend_v2=True))
        self.assertFalse(m.DRAFT_EXTEND_V2.is_extend())
        self.assertTrue(m.IDLE.is_decode_or_idle() and m.DECODE.is_cuda_graph())
        self.assertEqual([x.name for x in m][:6], ["EXTEND", "DECODE", "MIXED", "IDLE", "TARGET_VERIFY",
                                                   "DRAFT_EXTEND_V2"])

    def test_backend_is_exported_lazily(self):
        import attnplug.sglang as aps
        self.assertIs(aps.AttnplugMLABackend, sb.AttnplugMLABackend)
        self.assertIs(aps.register_backend, sb.register_backend)
        with self.assertRaises(AttributeError):
            aps.TorchMLABackend  # test code: attnplug_testing.torch_mla, never installed

    def test_contract_attributes(self):
        B = sb.AttnplugMLABackend
        # No path reads seq_lens_cpu: MLA steps are planned for their shape.
        self.assertIs(B.needs_cpu_seq_lens, False)
        self.assertIs(B.use_captured_forward_metadata_for_breakable_cuda_graph, False)
        self.assertIs(B.supports_full_cuda_graph_chunked_prefix, False)
        self.assertIsNone(B.kv_index_translator)
        self.assertEqual(sb.PATHS, ("decode", "verify", "extend", "draft", "prefill", "chunked_prefix"))
        e = sb.FallbackRefused("decode", "no plan: x")
        self.assertEqual((e.path, e.reason), ("decode", "no plan: x"))
        self.assertIn("decode path would run the fallback: no plan: x", str(e))


class SglangModules(unittest.TestCase):
    """Stand-in sglang modules for a test (the real ones are not installed
    here): module() makes one; those of other tests are put back after."""

    def setUp(self):
        # Stand-in sglang modules of other tests stay as they were; these
        # tests start from none.
        self.saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
        for k in self.saved:
            del sys.modules[k]
        self.addCleanup(self.restore)

    def restore(self):
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(self.saved)

    def module(self, name, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            p = sys.modules.get(parent)
            if p is None:
                p = sys.modules[parent] = types.ModuleType(parent)
            setattr(p, parts[i], sys.modules.get(".".join(parts[:i + 1])))
        return mod


class RegistrationTest(SglangModules):
    """register_backend() in each sglang mechanism."""

    def test_attention_registry_and_choices(self):
        handlers_mod = handlers.sglang_module(None)
        backends = {}

        def register_attention_backend(name):
            def deco(fn):
                backends[name] = fn
                return fn
            return deco

        choices = ["triton", "fa3"]
        self.module("sglang.srt.layers.attention.attention_registry", ATTENTION_BACKENDS=backends,
                    register_attention_backend=register_attention_backend)
        self.module("sglang.srt.server_args", ATTENTION_BACKEND_CHOICES=choices,
                    add_attention_backend_choices=choices.extend)
        self.assertEqual(sb.register_backend(), "attention_registry")
        self.assertIs(backends["attnplug"], sb.create_backend)
        self.assertEqual(choices.count("attnplug"), 1)
        # DeepSeek's dispatch of the name answers as the kernel backend's rules.
        reg = handlers_mod.AttentionBackendRegistry
        h = reg.get_handler("attnplug")
        self.assertIsNot(h, reg.get_handler("triton"))
        _, attn, fb = handlers.apply(handlers.generate(__import__("random").Random(4)), handlers_mod)
        reg.register("fa3", lambda a, f: handlers_mod.AttnForwardMethod.MHA_NPU)
        self.assertIs(h(attn, fb), handlers_mod.AttnForwardMethod.MHA_NPU)
        # Again: nothing doubles.
        sb.sglang_plugin()
        self.assertEqual(choices.count("attnplug"), 1)

    def test_older_sglang_model_runner(self):
        made = []

        class ModelRunner:
            def _get_attention_backend_from_str(self, backend_str):
                made.append(backend_str)
                return "sglang's " + backend_str

        self.module("sglang.srt.model_executor.model_runner", ModelRunner=ModelRunner)
        mla = ["flashinfer", "fa3", "triton"]
        chunked = ["flashinfer", "fa3"]
        sys.modules["sglang.srt.model_executor.model_runner"].__dict__.update(
            MLA_ATTENTION_BACKENDS=mla, CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS=chunked,
            add_mla_attention_backend=mla.append)
        self.assertEqual(sb.register_backend(), "model_runner")
        self.assertEqual(sb.register_backend(), "model_runner")
        # sglang's checks of the backends of MLA models and of the chunked
        # prefix cache take the name (the fallback, fa3's, runs chunks).
        self.assertEqual((mla.count("attnplug"), chunked.count("attnplug")), (1, 1))
        sb.register_backend("other", kernel_backend="triton")
        self.assertEqual((mla.count("other"), chunked.count("other")), (1, 0))
        self.assertEqual(ModelRunner()._get_attention_backend_from_str("triton"), "sglang's triton")
        orig = sb.create_backend
        try:
            sb.create_backend = lambda runner: ("attnplug backend", runner)
            runner = ModelRunner()
            self.assertEqual(runner._get_attention_backend_from_str("attnplug"), ("attnplug backend", runner))
            sb.register_backend("other", kernel_backend="triton")
            self.assertEqual(runner._get_attention_backend_from_str("other"), ("attnplug backend", runner))
        finally:
            sb.create_backend = orig

    def test_no_sglang(self):
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        self.assertIsNone(sb.register_backend())

    def test_entry_point_declared(self):
        with open(os.path.join(ROOT, "python", "pyproject.toml")) as f:
            text = f.read()
        self.assertIn('[project.entry-points."sglang.srt.plugins"]', text)
        self.assertIn('attnplug = "attnplug.sglang_backend:sglang_plugin"', text)
        mod, fn = "attnplug.sglang_backend:sglang_plugin".split(":")
        self.assertTrue(callable(getattr(importlib.import_module(mod), fn)))



# ---------------------------------------------------------------- on the GPU


def reference(kv, req_to_token, rpi, kv_lens, q, scale, q_lens):
    """float64 absorbed MLA over sglang's pool: request i's keys are the
    slots req_to_token[rpi[i], :kv_lens[i]] of kv [slots, 1, 576] (values:
    their first 512 columns); its q_lens[i] queries, rows of q [tokens,
    heads, 576] in order, see the keys up to kv_len - q_len + t."""
    out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.float64, device=q.device)
    flat = kv.reshape(-1, kv.shape[-1])
    row = 0
    for r, L, m in zip(rpi, kv_lens, q_lens):
        keys = flat[req_to_token[r, :L].long()].double()
        s = torch.einsum("thd,kd->thk", q[row:row + m].double(), keys) * scale
        limit = L - m + torch.arange(m, device=q.device)
        mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
        s = s.masked_fill(~mask[:, None, :], float("-inf"))
        out[row:row + m] = torch.einsum("thk,kd->thd", torch.softmax(s, dim=-1), keys[:, :512])
        row += m
    return out


def rel_error(got, want):
    got = got.double().reshape(want.shape)
    return (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item()


def reference_mha(q, k, v, scale, seq_lens, q_lens):
    """float64 causal MHA over ragged q [tokens, heads, dqk], k and v [keys,
    heads, d]: request i's q_lens[i] queries see its seq_lens[i] keys up to
    seq_len - q_len + t. Returns (out [tokens, heads, dv], lse [tokens,
    heads])."""
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float64, device=q.device)
    row = key = 0
    for L, m in zip(seq_lens, q_lens):
        s = torch.einsum("thd,khd->htk", q[row:row + m].double(), k[key:key + L].double()) * scale
        limit = L - m + torch.arange(m, device=q.device)
        mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
        s = s.masked_fill(~mask[None], float("-inf"))
        lse[row:row + m] = torch.logsumexp(s, -1).transpose(0, 1)
        out[row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v[key:key + L].double())
        row += m
        key += L
    return out, lse


def merge_state(o1, lse1, o2, lse2):
    """sglang's merge_state_v2 in float64: the attention over the keys of
    both states ([tokens, heads, d] outputs, [tokens, heads] LSE; an LSE of
    -inf weighs nothing)."""
    m = torch.maximum(lse1, lse2)
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)
    return (o1 * w1[..., None] + o2 * w2[..., None]) / (w1 + w2)[..., None], m + torch.log(w1 + w2)


def check_chunked_prefix(case, b, loop, layer, fb, q, kn, vn, out_new, lse_new):
    """MHA_CHUNKED_KV as sglang's DeepSeek model runs it over an extend of
    [5, 11] new tokens after prefixes of [30, 7], with a chunk capacity of
    40 (chunks of 20 keys a request): each prefix chunk through the
    backend (attn_attend_prefix_cache), checked against float64 without a
    mask, then merged with the new tokens' (out_new, lse_new) as the model
    merges them: the whole is causal attention over every key."""
    H = layer.tp_q_head_num
    fb.extend_prefix_lens_cpu = [30, 7]
    fb._max_chunk_capacity = 40
    fb.prepare_chunked_prefix_cache_info()
    case.assertEqual((fb.prefix_chunk_len, fb.num_prefix_chunks), (20, 2))
    kp, vp = loop.randn(37, H, 192), loop.randn(37, H, 128)  # the prefixes, request by request
    acc_o, acc_lse = out_new.view(16, H, 128).double(), lse_new.double()
    fb.mha_return_lse = True
    fb.set_attn_attend_prefix_cache(True)
    for c, keys in enumerate(([20, 7], [10, 0])):
        fb.set_prefix_chunk_idx(c)
        rows = [torch.arange(c * 20, c * 20 + n) + start for n, start in zip(keys, (0, 30))]
        rows = torch.cat(rows).to(kp.device)
        with st.forward_context(st.ForwardContext(b)):
            o, l = layer.forward(q.reshape(16, -1), kp[rows], vp[rows], fb, save_kv_cache=False)
        want = torch.zeros(16, H, 128, dtype=torch.float64, device=q.device)
        want_lse = torch.full((16, H), float("-inf"), dtype=torch.float64, device=q.device)
        row = key = 0
        for n, m in zip(keys, (5, 11)):
            if n:
                sc = torch.einsum("thd,khd->htk", q[row:row + m].double(), kp[rows][key:key + n].double()) * layer.scaling
                want_lse[row:row + m] = torch.logsumexp(sc, -1).transpose(0, 1)
                want[row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(sc, -1), vp[rows][key:key + n].double())
            row, key = row + m, key + n
        case.assertLess(rel_error(o, want), TOLERANCE, "prefix chunk %d" % c)
        case.assertEqual(tuple(l.shape), (16, H))
        finite = torch.isfinite(want_lse)
        case.assertTrue(torch.equal(torch.isfinite(l), finite), "prefix chunk %d: the LSE of a request without keys" % c)
        case.assertLess((l.double()[finite] - want_lse[finite]).abs().max().item(), 1e-3)
        acc_o, acc_lse = merge_state(o.view(16, H, 128).double(), l.double(), acc_o, acc_lse)
    fb.set_attn_attend_prefix_cache(False)
    fb.mha_return_lse = None
    k_all = torch.cat([kp[:30], kn[:5], kp[30:], kn[5:]])
    v_all = torch.cat([vp[:30], vn[:5], vp[30:], vn[5:]])
    want, want_lse = reference_mha(q, k_all, v_all, layer.scaling, [35, 18], [5, 11])
    case.assertLess(rel_error(acc_o, want), TOLERANCE, "the merged chunks and new tokens")
    case.assertLess((acc_lse - want_lse).abs().max().item(), 1e-3)


@unittest.skipUnless(torch is not None, "needs torch")
class DraftFactoryTest(SglangModules):
    """register_backend() gives sglang's DraftBackendFactory (a stand-in of
    main's, and one of the releases whose entries answer the backend
    itself) the attnplug entries of a draft model's backends."""

    def runner(self):
        return st.ModelRunner.make(heads=16, layers=1, page_size=64, context_len=1024, max_requests=4,
                                   device="cuda" if HAVE_GPU else "cpu")

    def factory_module(self, base):
        cls = type("DraftBackendFactory", (base,), {})
        self.module("sglang.srt.speculative.draft_utils", DraftBackendFactory=cls)
        return cls

    def test_main(self):
        from attnplug_testing.torch_mla import TorchMLABackend, TorchMLAMultiStepDraftBackend
        mr = self.runner()
        Factory = self.factory_module(st.DraftBackendFactory)
        with self.assertRaises(ValueError) as cm:  # sglang alone: no draft backend of the name
            Factory(mr, 1, 3).create_decode_backend()
        self.assertIn("attnplug", str(cm.exception))
        sb.register_backend()
        sb.register_backend()  # again: wrapped once
        f = Factory(mr, 1, 3)
        d = f.create_decode_backend()
        self.assertIsInstance(d, sb.AttnplugMLAMultiStepDraftBackend)
        self.assertEqual(len(d.attn_backends), 2)
        self.assertEqual([n for n, _ in f.made], ["fa3"], "the fallback: sglang's multi-step backend of fa3")
        self.assertIs(d.fallback, f.made[0][1])
        for i, b in enumerate(d.attn_backends):
            self.assertIs(b.fallback, d.fallback.attn_backends[i])
            self.assertEqual((b.speculative_step_id, b.decode_attention_backend_str), (i, "attnplug"))
        self.assertEqual(d.decode_attention_backend_str, "attnplug")
        e = f.create_draft_extend_backend()
        self.assertIsInstance(e, sb.AttnplugMLABackend)
        self.assertIsNone(e.speculative_step_id)
        self.assertIsNone(Factory(mr, 1, 1).create_decode_backend(), "one step: no multi-step backend, as sglang")
        # A tree of drafts: sglang's own multi-step backend, with a warning;
        # strict refuses it at boot.
        rec = record_logs(self)
        self.assertIsInstance(Factory(mr, 2, 3).create_decode_backend(), TorchMLAMultiStepDraftBackend)
        self.assertEqual(len(rec.warnings("a tree of drafts (--speculative-eagle-topk 2)")), 1, rec.warnings())
        os.environ[sb.ENV_STRICT] = "1"
        self.addCleanup(os.environ.pop, sb.ENV_STRICT, None)
        with self.assertRaises(sb.FallbackRefused):
            Factory(mr, 2, 3).create_decode_backend()
        self.assertIsInstance(Factory(mr, 1, 3).create_draft_extend_backend(), sb.AttnplugMLABackend)
        # Other names are sglang's.
        mr.server_args.decode_attention_backend = mr.server_args.prefill_attention_backend = "triton"
        self.assertIsInstance(Factory(mr, 1, 3).create_draft_extend_backend(), TorchMLABackend)

    def test_releases_whose_entries_answer_the_backend(self):
        from attnplug_testing.torch_mla import TorchMLAMultiStepDraftBackend

        class Older:  # sglang's DraftBackendFactory before the (stamp, backend) entries
            def __init__(self, server_args, draft_model_runner, topk, speculative_num_steps):
                self.server_args = server_args
                self.draft_model_runner = draft_model_runner
                self.topk = topk
                self.speculative_num_steps = speculative_num_steps

            def _create_backend(self, backend_name, backend_map, error_template):
                backend_type = getattr(self.server_args, backend_name)
                if backend_type is None:
                    backend_type = self.server_args.attention_backend
                if backend_type not in backend_map:
                    raise ValueError(error_template.format(backend_type=backend_type))
                return backend_map[backend_type]()

            def create_decode_backend(self):
                return self._create_backend("decode_attention_backend", {"fa3": self._create_fa3_decode_backend},
                                            "EAGLE is not supported in decode attention backend {backend_type}")

            def _create_fa3_decode_backend(self):
                return TorchMLAMultiStepDraftBackend(self.draft_model_runner, self.topk, self.speculative_num_steps)

        mr = self.runner()
        Factory = self.factory_module(Older)
        sb.register_backend()
        d = Factory(mr.server_args, mr, 1, 4).create_decode_backend()
        self.assertIsInstance(d, sb.AttnplugMLAMultiStepDraftBackend)
        self.assertEqual(len(d.attn_backends), 3)
        self.assertIsInstance(d.fallback, TorchMLAMultiStepDraftBackend)


@unittest.skipUnless(torch is not None, "needs torch")
class FakeKernelTest(unittest.TestCase):
    """Every DeepSeek path of the backend (steps asked, page tables,
    lengths and query offsets built from sglang's tensors, KV written, the
    graph hooks of both protocols, the fallback) with the fa3 plugin's real
    plans from a real serve and kernels that are torch code reading the
    tensors a plan binds (attnplug_testing.fake_kernels): on the GPU where
    there is one, else on the CPU."""

    device = "cuda" if HAVE_GPU else "cpu"

    @classmethod
    def setUpClass(cls):
        serve.require_binaries()
        cls.server = serve.Server().start()
        cls.client = Client(cls.server.address, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def make(self, heads=16, layers=2, page=64, context_len=1024, max_requests=8, backend="fa3", client=None,
             runner=None, **kw):
        from attnplug_testing.fake_kernels import FakeLauncher
        from attnplug_testing.torch_mla import TorchMLABackend
        mr = runner or st.ModelRunner.make(heads=heads, layers=layers, page_size=page, context_len=context_len,
                                           max_requests=max_requests, device=self.device)
        launcher = FakeLauncher(client or self.client, backend)
        self.addCleanup(launcher.close)
        kw.setdefault("fallback", TorchMLABackend(mr))
        b = sb.AttnplugMLABackend(mr, kernel_backend=backend, launcher=launcher, **kw)
        return mr, b, launcher

    def check(self, mr, fb, inputs, outs, q_len, extra, layers=(0, 1), q_lens=None):
        pool = mr.token_to_kv_pool
        rpi = fb.req_pool_indices.tolist()
        kv_lens = [n + extra for n in fb.seq_lens.tolist()]
        for i in layers:
            q = torch.cat(inputs[i][:2], dim=-1)
            written = pool.get_key_buffer(i)[fb.out_cache_loc].squeeze(1)
            self.assertTrue(torch.equal(written, torch.cat(inputs[i][2:], dim=-1).squeeze(1)), "KV of layer %d" % i)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, rpi, kv_lens, q,
                             mr.model_config.scaling, q_lens or [q_len] * len(rpi))
            self.assertLess(rel_error(outs[i], want), TOLERANCE, "layer %d" % i)

    def paths(self, b):
        return {p: (c["plugin"], c["fallback"]) for p, c in b.stats()["paths"].items() if c["plugin"] or c["fallback"]}

    def test_eager_decode_verify_extend(self):
        for heads, page in ((16, 64), (128, 1), (16, 16)):
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
            # One plan for the batch shape, whatever the lengths: the
            # server's, which holds up to what the pool admits.
            self.assertEqual(lch.source.stats["plan_requests"], 1, "one plan for the batch shape")
            step = lch.steps[0]
            self.assertEqual((step["mode"], step["method"], step["batch"]), ("DECODE", "MLA",
                                                                            {"size": 5, "graph": True, "query_tokens": 1}))
            self.assertNotIn("seq_lens", step["batch"], "an MLA step sends no lengths")
            p = next(iter(lch.prepared.values()))
            # Queries offered split, and fa3's kernel takes them so: views of
            # DeepSeek's q nope and q rope (or of a 576-wide q), no copy.
            self.assertTrue(step["query_split"])
            self.assertTrue(p.declares("q_nope") and p.declares("q_rope") and not p.declares("q"))
            self.assertEqual(p.max_seq_len, 1024)  # min(context_len, the pool's tokens, req_to_token's row)
            self.assertEqual(p.pages_per_request, -(-1024 // page))
            for n in (2, 4):
                fb = loop.verify_batch(n)
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size * n) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=(n == 2))
                self.check(mr, fb, inputs, outs, n, n)
                loop.advance()
            # Absorbed MLA over the cache (an extend with a prefix): the
            # plugin's MLA plan for the batch's query tokens.
            fb = loop.extend_batch([3, 9, 1, 30, 2])
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(45) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check(mr, fb, inputs, outs, None, 0, q_lens=[3, 9, 1, 30, 2])
            loop.advance()
            # An extend of more query tokens a request than a work request
            # holds (the host's launch.MaxQLen, 64): the same plugin plan,
            # cut into work requests by the server's plan.
            fb = loop.extend_batch([130, 2, 65, 1, 64])
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(262) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check(mr, fb, inputs, outs, None, 0, q_lens=[130, 2, 65, 1, 64])
            loop.advance()
            self.assertEqual(self.paths(b), {"decode": (6, 0), "verify": (4, 0), "extend": (4, 0)})
            self.assertEqual(lch.batch_launches, 7, "one scheduler launch a step")
            self.assertEqual(b.stats()["steps_prepared"], 7)

    def test_mha_prefill(self):
        mr, b, lch = self.make()
        loop = st.DecodeLoop(mr, seed=1)
        loop.start([0, 0])
        layer = loop.mha_layers[0]
        H = layer.tp_q_head_num
        # MHA over the new tokens (no prefix): one causal pass.
        fb = loop.extend_batch([30, 7])
        b.init_forward_metadata(fb)
        q, k, v = loop.randn(37, H, 192), loop.randn(37, H, 192), loop.randn(37, H, 128)
        with st.forward_context(st.ForwardContext(b)):
            out = layer.forward(q.reshape(37, -1), k, v, fb, save_kv_cache=False)
        want, _ = reference_mha(q, k, v, layer.scaling, [30, 7], [30, 7])
        self.assertLess(rel_error(out, want), TOLERANCE)
        self.assertEqual(lch.steps[-1]["method"], "MHA_ONE_SHOT")
        self.assertEqual(lch.steps[-1]["batch"], {"size": 2, "seq_lens": [30, 7], "q_lens": [30, 7]})
        loop.advance()
        # MHA_ONE_SHOT over a prefix: k and v hold every key of a request.
        fb = loop.extend_batch([5, 11])
        b.init_forward_metadata(fb)
        keys = [35, 18]
        q, k, v = loop.randn(16, H, 192), loop.randn(53, H, 192), loop.randn(53, H, 128)
        with st.forward_context(st.ForwardContext(b)):
            out = layer.forward(q.reshape(16, -1), k, v, fb, save_kv_cache=False)
        want, _ = reference_mha(q, k, v, layer.scaling, keys, [5, 11])
        self.assertLess(rel_error(out, want), TOLERANCE)
        # The new tokens of MHA_CHUNKED_KV: over themselves, with their LSE.
        fb.mha_return_lse = True
        kn, vn = loop.randn(16, H, 192), loop.randn(16, H, 128)
        with st.forward_context(st.ForwardContext(b)):
            out, lse = layer.forward(q.reshape(16, -1), kn, vn, fb, save_kv_cache=False)
        want, want_lse = reference_mha(q, kn, vn, layer.scaling, [5, 11], [5, 11])
        self.assertLess(rel_error(out, want), TOLERANCE)
        self.assertEqual(tuple(lse.shape), (16, H))
        self.assertLess((lse.double() - want_lse).abs().max().item(), 1e-3)
        self.assertEqual(self.paths(b), {"prefill": (3, 0)})
        check_chunked_prefix(self, b, loop, layer, fb, q, kn, vn, out, lse)
        self.assertEqual(self.paths(b), {"prefill": (3, 0), "chunked_prefix": (2, 0)})
        self.assertEqual(lch.steps[-1]["method"], "MHA_CHUNKED_KV")
        self.assertEqual(lch.steps[-1]["batch"], {"size": 2, "seq_lens": [10, 0], "q_lens": [5, 11], "prefix_chunk": True})

    def graph_loop(self, protocol, q=1, steps=6, layers=4, context_len=1024, max_tokens=None, page=64):
        mr = st.ModelRunner.make(heads=16, layers=layers, page_size=page, context_len=context_len, max_requests=8,
                                 max_tokens=max_tokens, device=self.device)
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
        plans = lch.source.stats["plan_requests"]
        self.assertEqual(plans, 1)
        for _ in range(steps):
            fb = loop.verify_batch(q) if q > 1 else loop.decode_batch()
            loop.refresh([static], 3 * q)
            outs = runner.replay(fb)
            rows = 3 * q
            self.check(mr, fb, [[x[:rows] for x in static]] * layers, [o[:rows] for o in outs], q, q if q > 1 else 0,
                       layers=(0, layers - 1))
            loop.advance()
        self.assertEqual(lch.source.stats["plan_requests"], plans, "no plan asked at replay")
        self.assertEqual(b.stats()["fallback_layers"], 0)
        return mr, b, lch

    def test_graph_hooks_2026_protocol(self):
        self.graph_loop("2026")
        self.graph_loop("2026", q=3)

    def test_graph_hooks_legacy_protocol(self):
        self.graph_loop("legacy")
        self.graph_loop("legacy", q=2)

    def test_deepseek_v3_context_length_in_a_graph(self):
        # DeepSeek-V3's 163840 tokens of context over a pool of fewer: the
        # plan holds for what the pool admits, and no layer falls back.
        _, b, lch = self.graph_loop("2026", context_len=163840, max_tokens=64 * 300, steps=3)
        p = next(iter(lch.prepared.values()))
        self.assertEqual((p.max_seq_len, p.pages_per_request), (64 * 300, 300))
        self.assertEqual(b.stats()["paths"]["decode"]["fallback"], 0)

    def test_no_plan_falls_back_with_one_warning_and_strict_refuses(self):
        rec = record_logs(self)
        # aiter's plugin ships no device code: every step is refused.
        mr, b, lch = self.make(backend="aiter")
        loop = st.DecodeLoop(mr, seed=2)
        loop.start([5, 500])
        for _ in range(3):
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(2) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check(mr, fb, inputs, outs, 1, 0)
            loop.advance()
        self.assertEqual(len(rec.warnings("the fallback runs decode layers")), 1, rec.warnings())
        self.assertEqual(self.paths(b), {"decode": (0, 6)})
        self.assertIn("no plan", b.stats()["paths"]["decode"]["last_reason"])
        self.assertEqual(lch.source.stats["plan_requests"], 0)
        # Strict: the layer raises instead, naming the path and why.
        mr, b, _ = self.make(backend="aiter", strict=True)
        loop = st.DecodeLoop(mr, seed=2)
        loop.start([5, 500])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        with self.assertRaises(sb.FallbackRefused) as cm:
            loop.forward(b, fb, [loop.inputs(2) for _ in loop.layers])
        self.assertEqual(cm.exception.path, "decode")
        self.assertIn("no plan", cm.exception.reason)
        # A capture the plugin has no plan for: counted, and strict refuses it.
        mr, b, _ = self.make(backend="aiter")
        b.init_cuda_graph_state(4, 4)
        st.GraphRunner(b, 4, device=self.device, dry=True).capture(lambda fb: [])
        self.assertEqual(b.stats()["refused_at_capture"], 1)
        mr, b, _ = self.make(backend="aiter", strict=True)
        b.init_cuda_graph_state(4, 4)
        with self.assertRaises(sb.FallbackRefused):
            st.GraphRunner(b, 4, device=self.device, dry=True).capture(lambda fb: [])

    def test_a_step_that_fails_to_prepare_falls_back_counted(self):
        # The scheduler's launch fails (a module that does not load, a
        # tensor refused): an eager step runs the fallback with the
        # reason its layers count; inside a capture the step is refused
        # loudly, for the fallback's metadata of that moment would be
        # replayed stale.
        from attnplug_testing.fake_kernels import FakePrepared

        def broken(self, tensors, stream=None):
            raise RuntimeError("the scheduler's module did not load")

        mr, b, _ = self.make()
        loop = st.DecodeLoop(mr, seed=3)
        loop.start([5, 500])
        fb = loop.decode_batch()
        with mock.patch.object(FakePrepared, "launch_batch", broken):
            b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        outs = loop.forward(b, fb, inputs)
        self.check(mr, fb, inputs, outs, 1, 0)
        self.assertEqual(self.paths(b), {"decode": (0, 2)})
        self.assertIn("step preparation failed: RuntimeError: the scheduler's module did not load",
                      b.stats()["paths"]["decode"]["last_reason"])
        mr, b, _ = self.make()
        loop = st.DecodeLoop(mr, seed=3)
        loop.start([5, 500])
        fb = loop.decode_batch()
        b._out_graph(fb, in_capture=True, eager=False)
        with mock.patch.object(FakePrepared, "launch_batch", broken), mock.patch.object(sb_mla, "_capturing", lambda torch: True):
            with self.assertRaises(sb.FallbackRefused) as cm:
                b.init_forward_metadata_in_graph(fb)
        self.assertIn("captured step of batch 2", cm.exception.reason)
        self.assertEqual(b.stats()["refused_at_capture"], 1)

    def test_a_layer_that_fails_in_a_capture_is_refused(self):
        # A captured plugin step whose layer cannot run the kernel raises,
        # counted, instead of making the fallback's metadata inside the
        # capture.
        from attnplug_testing.fake_kernels import FakePrepared

        def broken(self, tensors, stream=None):
            raise RuntimeError("launch failed")

        mr, b, _ = self.make()
        loop = st.DecodeLoop(mr, seed=4)
        loop.start([5, 500])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        with mock.patch.object(FakePrepared, "launch_layer", broken), mock.patch.object(sb_mla, "_capturing", lambda torch: True):
            with self.assertRaises(sb.FallbackRefused) as cm:
                loop.forward(b, fb, [loop.inputs(2) for _ in loop.layers])
        self.assertIn("a layer of a captured step of batch 2: the plugin's kernel failed: RuntimeError: launch failed",
                      cm.exception.reason)
        self.assertEqual((self.paths(b), b.stats()["refused_at_capture"]), ({}, 1))

    def test_strict_from_the_environment(self):
        os.environ[sb.ENV_STRICT] = "1"
        self.addCleanup(os.environ.pop, sb.ENV_STRICT, None)
        _, b, _ = self.make()
        self.assertTrue(b.strict)
        _, b, _ = self.make(strict=False)
        self.assertFalse(b.strict)

    def test_server_killed_falls_back_with_one_warning(self):
        rec = record_logs(self)
        s = serve.Server().start()
        self.addCleanup(s.cleanup)
        c = Client(s.address, timeout=5)
        self.addCleanup(c.close)
        mr, b, lch = self.make(client=c)
        loop = st.DecodeLoop(mr, seed=3)
        loop.start([5, 500, 7])

        def step():
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check(mr, fb, inputs, outs, 1, 0)
            loop.advance()

        step()
        s.kill()
        step()  # a kept plan: the plugin still runs
        self.assertEqual(self.paths(b), {"decode": (4, 0)})
        loop.start([50])  # a new batch size: no plan, no server
        for _ in range(3):
            step()
        self.assertEqual(self.paths(b), {"decode": (4, 6)})
        # One warning that the server went away, one that the fallback runs
        # decode layers, whatever the steps.
        self.assertEqual(len(rec.warnings("the server is unreachable (")), 1, rec.warnings())
        self.assertEqual(len(rec.warnings("the fallback runs decode layers")), 1, rec.warnings())
        self.assertIn("unreachable", b.stats()["paths"]["decode"]["last_reason"])

    def test_unified_kv_pool_runs_the_fallback(self):
        mr, b, lch = self.make()
        st.KVIndexTranslator(is_translating=True).bind_and_verify_backends([b])
        loop = st.DecodeLoop(mr, seed=4)
        loop.start([5, 60])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
        self.assertEqual(self.paths(b), {"decode": (0, 2)})
        self.assertIn("unified", b.stats()["paths"]["decode"]["last_reason"])
        self.assertEqual(lch.source.stats["plan_requests"], 0)
        mr, b, _ = self.make()
        st.KVIndexTranslator(is_translating=False).bind_and_verify_backends([b])
        loop = st.DecodeLoop(mr, seed=4)
        loop.start([5, 60])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
        self.assertEqual(self.paths(b), {"decode": (2, 0)})

    def test_a_dense_backend_of_a_sparse_model_is_the_fallbacks(self):
        # DeepSeek-V3.2 given to the dense backend (create_backend makes
        # AttnplugDSABackend for it: test_sglang_dsa): every layer falls
        # back, saying why.
        mr = st.ModelRunner.make(heads=16, layers=2, page_size=64, context_len=1024, max_requests=8,
                                 device=self.device)
        mr.model_config.index_topk = 2048
        mr, b, lch = self.make(runner=mr)
        loop = st.DecodeLoop(mr, seed=5)
        loop.start([5, 60])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
        self.assertEqual(self.paths(b), {"decode": (0, 2)})
        self.assertIn("index_topk 2048", b.stats()["paths"]["decode"]["last_reason"])
        self.assertIn("AttnplugDSABackend", b.stats()["paths"]["decode"]["last_reason"])
        self.assertEqual(lch.steps, [])

    def test_a_lone_draft_decode_is_the_fallbacks(self):
        # A draft model's decode given to a backend that is no step of a
        # multi-step draft backend: which drafts it reads is not known.
        mr, b, _ = self.make()
        loop = st.DecodeLoop(mr, seed=6)
        loop.start([5, 60])
        fb = loop.decode_batch()
        fb.spec_info = st.EagleDraftInput()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        self.check(mr, fb, inputs, loop.forward(b, fb, inputs), 1, 0)
        self.assertEqual(self.paths(b), {"draft": (0, 2)})
        self.assertIn("outside attnplug's multi-step draft backend", b.stats()["paths"]["draft"]["last_reason"])

    def make_draft(self, steps=3, page=64, backend="fa3", context_len=1024, max_tokens=None, **kw):
        from attnplug_testing.fake_kernels import FakeLauncher
        from attnplug_testing.torch_mla import TorchMLAMultiStepDraftBackend
        mr = st.ModelRunner.make(heads=16, layers=2, page_size=page, context_len=context_len, max_requests=8,
                                 max_tokens=max_tokens, device=self.device)
        launcher = FakeLauncher(self.client, backend)
        self.addCleanup(launcher.close)
        d = sb.AttnplugMLAMultiStepDraftBackend(mr, 1, steps, fallback=TorchMLAMultiStepDraftBackend(mr, 1, steps),
                                                kernel_backend=backend, launcher=launcher, **kw)
        return mr, d, launcher

    def check_draft(self, mr, fb, inputs, outs, steps, rows=None):
        """Step i of a chain draft wrote its layers' KV to the drafts' slots
        of column i and read each request's keys and drafts 0 to i."""
        per_step = fb.out_cache_loc.view(int(fb.batch_size), steps).t()
        self.assertEqual(len(outs), steps - 1)
        for i in range(steps - 1):
            view = types.SimpleNamespace(req_pool_indices=fb.req_pool_indices, seq_lens=fb.seq_lens,
                                         out_cache_loc=per_step[i])
            ins = [[x[:rows] for x in layer] for layer in inputs[i]] if rows else inputs[i]
            self.check(mr, view, ins, [o[:rows] for o in outs[i]] if rows else outs[i], 1, i + 1)

    def test_draft_decode_steps(self):
        for page in (64, 1):
            mr, d, lch = self.make_draft(page=page)
            self.assertEqual([b.speculative_step_id for b in d.attn_backends], [0, 1])
            loop = st.DecodeLoop(mr, seed=page + 3)
            loop.start([1, 37, 300, 64])
            for _ in range(2):
                fb = loop.draft_batch(3)
                d.init_forward_metadata(fb)
                inputs = [[loop.inputs(4) for _ in loop.layers] for _ in range(2)]
                self.check_draft(mr, fb, inputs, loop.draft_forward(d, fb, inputs, 3), 3)
                loop.advance()
            # The steps share one launcher and the plan of the batch shape;
            # each runs the plan's scheduler for its own lengths.
            self.assertEqual(lch.source.stats["plan_requests"], 1)
            self.assertEqual((lch.steps[0]["mode"], lch.steps[0]["batch"]),
                             ("DECODE", {"size": 4, "graph": True, "query_tokens": 1}))
            self.assertEqual(lch.batch_launches, 4, "one scheduler launch a draft step")
            self.assertEqual(self.paths(d), {"draft": (8, 0)})
            self.assertEqual(d.fallback.calls, [])

    def draft_graph(self, protocol, **kw):
        mr, d, lch = self.make_draft(**kw)
        d.init_cuda_graph_state(4, 16)
        loop = st.DecodeLoop(mr, seed=12)
        loop.start([3, 100, 600])
        static = [[loop.inputs(4) for _ in loop.layers] for _ in range(2)]

        def run(fb):
            return [o for outs in loop.draft_forward(d, fb, static, 3) for o in outs]

        runner = st.GraphRunner(d, 4, protocol=protocol, device=self.device, dry=True, draft_steps=3)
        runner.capture(run)
        self.assertEqual(lch.source.stats["plan_requests"], 1)
        for _ in range(3):
            fb = loop.draft_batch(3)
            for step in static:
                loop.refresh(step, 3)
            outs = runner.replay(fb)
            self.check_draft(mr, fb, static, [outs[:2], outs[2:]], 3, rows=3)
            loop.advance()
        self.assertEqual(lch.source.stats["plan_requests"], 1, "no plan asked at replay")
        self.assertEqual(d.stats()["fallback_layers"], 0)
        self.assertEqual(d.fallback.calls, ["init_cuda_graph_state"])
        return lch

    def test_draft_graph_hooks_2026_protocol(self):
        self.draft_graph("2026")

    def test_draft_graph_hooks_legacy_protocol(self):
        self.draft_graph("legacy")

    def test_draft_at_deepseek_v3_context_length(self):
        # The draft's graph at DeepSeek-V3's 163840 tokens of context over a
        # pool of fewer: its steps' plan holds for what the pool admits.
        lch = self.draft_graph("2026", context_len=163840, max_tokens=64 * 300)
        p = next(iter(lch.prepared.values()))
        self.assertEqual((p.max_seq_len, p.pages_per_request), (64 * 300, 300))

    def test_draft_without_a_plan_runs_sglangs_multi_step_backend(self):
        rec = record_logs(self)
        mr, d, _ = self.make_draft(backend="aiter")  # no device code: no plan
        loop = st.DecodeLoop(mr, seed=4)
        loop.start([5, 500])
        fb = loop.draft_batch(3)
        d.init_forward_metadata(fb)
        self.assertEqual(d.fallback.calls, ["init_forward_metadata"], "the fallback's metadata, once a batch")
        inputs = [[loop.inputs(2) for _ in loop.layers] for _ in range(2)]
        self.check_draft(mr, fb, inputs, loop.draft_forward(d, fb, inputs, 3), 3)
        self.assertEqual(self.paths(d), {"draft": (0, 4)})
        self.assertIn("no plan", d.stats()["paths"]["draft"]["last_reason"])
        self.assertEqual(len(rec.warnings("the fallback runs draft layers")), 2, rec.warnings())  # one a step
        mr, d, _ = self.make_draft(backend="aiter", strict=True)
        loop = st.DecodeLoop(mr, seed=4)
        loop.start([5, 500])
        fb = loop.draft_batch(3)
        d.init_forward_metadata(fb)
        with self.assertRaises(sb.FallbackRefused) as cm:
            loop.draft_forward(d, fb, [[loop.inputs(2) for _ in loop.layers] for _ in range(2)], 3)
        self.assertEqual(cm.exception.path, "draft")
        with self.assertRaises(ValueError) as cm:
            sb.AttnplugMLAMultiStepDraftBackend(mr, 2, 3)
        self.assertIn("topk 2", str(cm.exception))

    def test_only_named_calls_reach_the_fallback(self):
        _, b, _ = self.make()
        b.fallback.init_mha_chunk_metadata = lambda fb: "prepared"
        self.assertEqual(b.init_mha_chunk_metadata(None), "prepared")
        with self.assertRaises(AttributeError):
            b.forward_decode_with_some_other_name  # not the fallback's, whatever it has
        b.fallback.some_other_name = 1
        with self.assertRaises(AttributeError):
            b.some_other_name

    def test_shared_read_ends(self):
        import enum
        mod = types.ModuleType(sb._sglang.BACKEND_MODULE)
        mod.SharedReadEnds = enum.Enum("SharedReadEnds", ["IN_REPLAY", "UNKNOWN"])
        saved = sys.modules.get(sb._sglang.BACKEND_MODULE)
        sys.modules[sb._sglang.BACKEND_MODULE] = mod
        self.addCleanup(lambda: sys.modules.pop(sb._sglang.BACKEND_MODULE) if saved is None else
                        sys.modules.__setitem__(sb._sglang.BACKEND_MODULE, saved))
        _, b, _ = self.make()
        self.assertIs(b.shared_read_ends(st.ForwardMode.DECODE), mod.SharedReadEnds.IN_REPLAY)
        self.assertIs(b.shared_read_ends(st.ForwardMode.TARGET_VERIFY), mod.SharedReadEnds.IN_REPLAY)
        self.assertIs(b.shared_read_ends(st.ForwardMode.EXTEND), mod.SharedReadEnds.UNKNOWN)

    def test_split_queries_are_bound_in_place(self):
        # DeepSeek's q nope (the transpose of the absorbing bmm) and q rope
        # (a slice of the projected queries) reach a plan that takes them
        # split as views of the same memory, strides and all; a 576-wide q
        # as two views of itself; a plan of whole queries gets one
        # contiguous q of both.
        heads, tokens = 16, 3
        _, b, _ = self.make(heads=heads)

        class Split:
            @staticmethod
            def declares(name):
                return name in ("q_nope", "q_rope")

        class Whole:
            @staticmethod
            def declares(name):
                return name == "q"

        bf = torch.bfloat16
        q_nope = torch.randn(heads, tokens, 512, dtype=bf).transpose(0, 1)
        q_rope = torch.randn(tokens, heads, 192, dtype=bf)[..., 128:]
        t = {}
        b._queries(t, Split, q_nope, q_rope, tokens)
        self.assertEqual((t["q_nope"].data_ptr(), t["q_nope"].stride()), (q_nope.data_ptr(), (512, tokens * 512, 1)))
        self.assertEqual((t["q_rope"].data_ptr(), t["q_rope"].stride()), (q_rope.data_ptr(), (heads * 192, 192, 1)))
        self.assertNotIn("q", t)
        # DeepSeek's three-dimensional tensors are bound as they are (no
        # view made at each layer); a q nope of [tokens, heads * 512] gets
        # a view of its memory.
        self.assertIs(t["q_nope"], q_nope)
        self.assertIs(t["q_rope"], q_rope)
        flat = torch.randn(tokens, heads * 512, dtype=bf)
        b._queries(t, Split, flat, q_rope, tokens)
        self.assertEqual((t["q_nope"].shape, t["q_nope"].data_ptr()), ((tokens, heads, 512), flat.data_ptr()))
        whole = torch.randn(tokens, heads * 576, dtype=bf)
        t = {}
        b._queries(t, Split, whole, None, tokens)
        self.assertEqual((t["q_nope"].data_ptr(), t["q_rope"].data_ptr()), (whole.data_ptr(), whole.data_ptr() + 512 * 2))
        t = {}
        b._queries(t, Whole, q_nope, q_rope, tokens)
        self.assertTrue(t["q"].is_contiguous())
        self.assertTrue(torch.equal(t["q"], torch.cat([q_nope, q_rope], dim=-1)))

    def test_the_cache_view_is_made_once_a_buffer(self):
        # The pool hands a bf16 layer's buffer as the same tensor at every
        # call: its [pages, page_size, 576] view is made once; a buffer of
        # another object (an FP8 pool's view of its storage, a pool
        # replaced) gets a view of its own.
        mr, b, _ = self.make(heads=16)
        pool = mr.token_to_kv_pool
        kv = b._kv_view(0)
        self.assertEqual((kv.shape[1:], kv.data_ptr()), ((64, 576), pool.get_key_buffer(0).data_ptr()))
        self.assertIs(b._kv_view(0), kv)
        self.assertIsNot(b._kv_view(1), kv)
        buf = pool.get_key_buffer(0)
        pool.get_key_buffer = lambda layer_id: buf.view(buf.shape)
        other = b._kv_view(0)
        self.assertIsNot(other, kv)
        self.assertEqual((other.shape, other.data_ptr()), (kv.shape, kv.data_ptr()))

    @unittest.skipUnless(torch is not None and hasattr(torch, "float8_e4m3fn"), "needs torch with float8_e4m3fn")
    def test_fp8_pool(self):
        mr = st.ModelRunner.make(heads=16, layers=2, page_size=64, context_len=1024, max_requests=8,
                                 device=self.device, kv_dtype=torch.float8_e4m3fn)
        mr, b, lch = self.make(runner=mr)
        loop = st.DecodeLoop(mr, seed=8)
        loop.start([5, 300])
        fb = loop.decode_batch()
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(2) for _ in loop.layers]
        loop.forward(b, fb, inputs)
        self.assertEqual(lch.steps[0]["pool"]["kv_dtype"], "fp8_e4m3")
        self.assertEqual(self.paths(b), {"decode": (2, 0)})
        self.assertEqual(b.stats()["fp8_layers"], 2)


class CountingClient(Client):
    """A Client that counts every call it makes of the server."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rpcs = 0

    def _call(self, *args, **kwargs):
        self.rpcs += 1
        return super()._call(*args, **kwargs)


#: The GPU tests' model and pool: DeepSeek-V3's context length over a pool
#: of fewer tokens, as sglang's is on most GPUs (max_total_num_tokens <
#: context_len): every plan must hold for what the pool admits.
DEEPSEEK_V3_CONTEXT = 163840
POOL_TOKENS = 32768


def deepseek_runner(heads=16, layers=2, page=64, max_requests=8, **kw):
    """A stand-in ModelRunner of DeepSeek-V3's context length over a pool of
    POOL_TOKENS tokens."""
    return st.ModelRunner.make(heads=heads, layers=layers, page_size=page, context_len=DEEPSEEK_V3_CONTEXT,
                               max_requests=max_requests, max_tokens=POOL_TOKENS, **kw)


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU")
class BackendGPUTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = serve.Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def backend(self, mr, **kw):
        from attnplug_testing.torch_mla import TorchMLABackend
        client = kw.pop("client", None) or CountingClient(self.server.address, timeout=120)
        kw.setdefault("fallback", TorchMLABackend(mr))
        b = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=client, **kw)
        self.addCleanup(b.close)
        return b, client

    def check_mla(self, loop, mr, fb, inputs, outs, layers, q_len, extra):
        pool = mr.token_to_kv_pool
        rpi = fb.req_pool_indices.tolist()
        kv_lens = [n + extra for n in fb.seq_lens.tolist()]
        worst = 0.0
        for i in layers:
            q_nope, q_rope, k_nope, k_rope = inputs[i]
            q = torch.cat([q_nope, q_rope], dim=-1)
            # The new tokens' KV is where sglang's MLA backends write it.
            written = pool.get_key_buffer(i)[fb.out_cache_loc].squeeze(1)
            self.assertTrue(torch.equal(written, torch.cat([k_nope, k_rope], dim=-1).squeeze(1)), "layer %d" % i)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, rpi, kv_lens, q,
                             mr.model_config.scaling, [q_len] * len(rpi))
            self.assertFalse(torch.isnan(outs[i]).any().item())
            err = rel_error(outs[i], want)
            self.assertLess(err, TOLERANCE, "layer %d" % i)
            worst = max(worst, err)
        return worst

    def test_decode_and_verify_match_the_reference(self):
        for heads, page in ((16, 64), (128, 1), (16, 1), (128, 64)):
            mr = deepseek_runner(heads=heads, page=page)
            b, client = self.backend(mr)
            loop = st.DecodeLoop(mr, seed=heads + page)
            loop.start([1, 37, 700, 2047, 64, 3000])
            for split in (True, False):
                fb = loop.decode_batch()
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=split)
                err = self.check_mla(loop, mr, fb, inputs, outs, range(2), 1, 0)
                loop.advance()
                print("decode heads %d page %d %s: rel err %.2e" % (heads, page, "split" if split else "576", err))
            for n in (2, 3, 4):
                fb = loop.verify_batch(n)
                b.init_forward_metadata(fb)
                inputs = [loop.inputs(fb.batch_size * n) for _ in loop.layers]
                outs = loop.forward(b, fb, inputs, split=(n % 2 == 0))
                err = self.check_mla(loop, mr, fb, inputs, outs, range(2), n, n)
                loop.advance()
                print("verify %d heads %d page %d: rel err %.2e" % (n, heads, page, err))
            self.assertEqual(b._fwd.prepared.max_seq_len, POOL_TOKENS, "the plan holds for what the pool admits")
            stats = b.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)
            self.assertEqual(stats["plugin_layers"], 2 * 5, stats)

    def check_draft(self, loop, mr, fb, inputs, outs, rows):
        """Step i of a chain draft of rows requests: its layers' KV in the
        drafts' slots of column i, its output over the keys and drafts 0 to
        i against float64. Returns the worst relative error."""
        steps = len(outs) + 1
        per_step = fb.out_cache_loc.view(rows, steps).t()
        worst = 0.0
        for i in range(steps - 1):
            view = types.SimpleNamespace(req_pool_indices=fb.req_pool_indices, seq_lens=fb.seq_lens,
                                         out_cache_loc=per_step[i])
            ins = [[x[:rows] for x in layer] for layer in inputs[i]]
            worst = max(worst, self.check_mla(loop, mr, view, ins, [o[:rows] for o in outs[i]], range(2), 1, i + 1))
        return worst

    def test_draft_steps_match_the_reference(self):
        # An MTP/EAGLE chain draft of 4 tokens (3 draft steps) through the
        # multi-step draft backend, eager and replayed from a CUDA graph of
        # sglang's draft runner, outputs poisoned before each replay.
        # DeepSeek-V3's context length over a pool of 32768 tokens.
        for heads, page in ((16, 64), (128, 1)):
            mr = deepseek_runner(heads=heads, page=page)
            client = CountingClient(self.server.address, timeout=120)
            from attnplug_testing.torch_mla import TorchMLAMultiStepDraftBackend
            d = sb.AttnplugMLAMultiStepDraftBackend(mr, 1, 4, fallback=TorchMLAMultiStepDraftBackend(mr, 1, 4),
                                                    kernel_backend="fa3", client=client)
            self.addCleanup(d.close)
            loop = st.DecodeLoop(mr, seed=heads + page + 1)
            loop.start([1, 37, 700, 2047, 64, 3000])
            fb = loop.draft_batch(4)
            d.init_forward_metadata(fb)
            inputs = [[loop.inputs(6) for _ in loop.layers] for _ in range(3)]
            worst = self.check_draft(loop, mr, fb, inputs, loop.draft_forward(d, fb, inputs, 4), 6)
            loop.advance()
            p = d.attn_backends[0]._fwd.prepared
            self.assertEqual(p.max_seq_len, POOL_TOKENS, "the plan holds for what the pool admits")
            print("draft steps heads %d page %d eager: rel err %.2e" % (heads, page, worst))
            d.init_cuda_graph_state(8, 8 * 4)
            static = [[loop.inputs(8) for _ in loop.layers] for _ in range(3)]
            runner = st.GraphRunner(d, 8, draft_steps=4)
            runner.capture(lambda fb: [o for step in loop.draft_forward(d, fb, static, 4) for o in step])
            rpcs = client.rpcs
            for _ in range(3):
                fb = loop.draft_batch(4)
                for step in static:
                    loop.refresh(step, 6)
                for o in runner.outputs:
                    o.fill_(float("nan"))
                outs = runner.replay(fb)
                torch.cuda.synchronize()
                worst = max(worst, self.check_draft(loop, mr, fb, static, [outs[2 * i:2 * i + 2] for i in range(3)], 6))
                loop.advance()
            print("draft steps heads %d page %d graph: rel err %.2e" % (heads, page, worst))
            self.assertEqual(client.rpcs, rpcs, "RPCs at replay")
            stats = d.stats()
            self.assertEqual(stats["fallback_layers"], 0, stats)
            self.assertEqual(stats["paths"]["draft"]["plugin"], 3 * 2 * (1 + 3), stats)  # eager; 2 warm-ups and the capture

    @unittest.skipUnless(torch is not None and hasattr(torch, "float8_e4m3fn"), "needs torch with float8_e4m3fn")
    def test_fp8_pool_matches_the_reference(self):
        # sglang's --kv-cache-dtype fp8_e4m3: the plugin's FP8 plan over the
        # pool as sglang stores it, against float64 of the stored values.
        mr = deepseek_runner(kv_dtype=torch.float8_e4m3fn)
        b, _ = self.backend(mr)
        loop = st.DecodeLoop(mr, seed=21)
        loop.start([1, 37, 700, 2047, 64])
        pool = mr.token_to_kv_pool
        for n in (1, 2, 4):
            fb = loop.decode_batch() if n == 1 else loop.verify_batch(n)
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(fb.batch_size * n) for _ in loop.layers]
            for split in (True, False):
                outs = loop.forward(b, fb, inputs, split=split)
                for i in range(2):
                    q = torch.cat(inputs[i][:2], dim=-1)
                    kv_lens = [x + (n if n > 1 else 0) for x in fb.seq_lens.tolist()]
                    want = reference(pool.get_key_buffer(i).float(), mr.req_to_token_pool.req_to_token,
                                     fb.req_pool_indices.tolist(), kv_lens, q, mr.model_config.scaling, [n] * fb.batch_size)
                    err = rel_error(outs[i], want)
                    self.assertLess(err, TOLERANCE, "fp8 q_len %d layer %d" % (n, i))
                print("fp8 cache, %d query token(s) a request, %s form: rel err %.2e" % (n, "split" if split else "576", err))
            loop.advance()
        stats = b.stats()
        self.assertEqual(stats["fallback_layers"], 0, stats)
        self.assertEqual(stats["fp8_layers"], 12, stats)

    def test_extend_matches_the_reference(self):
        mr = deepseek_runner()
        b, _ = self.backend(mr)
        loop = st.DecodeLoop(mr, seed=3)
        loop.start([0, 0, 0])
        # MHA prefill without a prefix: the plugin's MHA plan.
        fb = loop.extend_batch([300, 17, 1000])
        b.init_forward_metadata(fb)
        layer = loop.mha_layers[0]
        T, H = 1317, layer.tp_q_head_num
        q = loop.randn(T, H, 192)
        k = loop.randn(T, H, 192)
        v = loop.randn(T, H, 128)
        with st.forward_context(st.ForwardContext(b)):
            out = layer.forward(q.reshape(T, -1), k, v, fb, save_kv_cache=False)
        want = torch.empty(T, H, 128, dtype=torch.float64, device="cuda")
        row = 0
        for m in (300, 17, 1000):
            s = torch.einsum("thd,khd->htk", q[row:row + m].double(), k[row:row + m].double()) * layer.scaling
            mask = torch.ones(m, m, dtype=torch.bool, device="cuda").tril()
            s = s.masked_fill(~mask, float("-inf"))
            want[row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v[row:row + m].double())
            row += m
        self.assertLess(rel_error(out, want), TOLERANCE)
        self.assertEqual(b.stats()["plugin_layers"], 1, b.stats())
        loop.advance()
        # Absorbed MLA over a prefix (the dispatch's MLA for an extend with a
        # prefix): the plugin's MLA plan for the batch's query tokens.
        fb = loop.extend_batch([5, 60, 1])
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(66) for _ in loop.layers]
        outs = loop.forward(b, fb, inputs)
        pool = mr.token_to_kv_pool
        for i in range(2):
            q = torch.cat(inputs[i][:2], dim=-1)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, fb.req_pool_indices.tolist(),
                             fb.seq_lens.tolist(), q, mr.model_config.scaling, [5, 60, 1])
            self.assertLess(rel_error(outs[i], want), TOLERANCE)
        loop.advance()
        # Extends of more query tokens a request than a work request holds
        # (launch.MaxQLen, 64): cut into work requests by the server's plan.
        fb = loop.extend_batch([700, 65, 129])
        b.init_forward_metadata(fb)
        inputs = [loop.inputs(894) for _ in loop.layers]
        outs = loop.forward(b, fb, inputs)
        for i in range(2):
            q = torch.cat(inputs[i][:2], dim=-1)
            want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, fb.req_pool_indices.tolist(),
                             fb.seq_lens.tolist(), q, mr.model_config.scaling, [700, 65, 129])
            err = rel_error(outs[i], want)
            self.assertLess(err, TOLERANCE)
            print("extend of [700, 65, 129] query tokens, layer %d: rel err %.2e" % (i, err))
        stats = b.stats()
        self.assertEqual((stats["paths"]["prefill"]["plugin"], stats["paths"]["extend"]["plugin"]), (1, 4), stats)
        self.assertEqual(stats["fallback_layers"], 0, stats)

    def test_chunked_prefix_matches_the_reference(self):
        # MHA_CHUNKED_KV as sglang's model runs it: the new tokens with
        # their LSE, then each prefix chunk, all on the plugin's kernels,
        # merged as the model merges them.
        mr = deepseek_runner()
        b, _ = self.backend(mr)
        loop = st.DecodeLoop(mr, seed=5)
        loop.start([0, 0])
        fb = loop.extend_batch([5, 11])
        b.init_forward_metadata(fb)
        layer = loop.mha_layers[0]
        H = layer.tp_q_head_num
        q, kn, vn = loop.randn(16, H, 192), loop.randn(16, H, 192), loop.randn(16, H, 128)
        fb.mha_return_lse = True
        with st.forward_context(st.ForwardContext(b)):
            out, lse = layer.forward(q.reshape(16, -1), kn, vn, fb, save_kv_cache=False)
        check_chunked_prefix(self, b, loop, layer, fb, q, kn, vn, out, lse)
        stats = b.stats()
        self.assertEqual((stats["paths"]["prefill"]["plugin"], stats["paths"]["chunked_prefix"]["plugin"]), (1, 2), stats)
        self.assertEqual(stats["fallback_layers"], 0, stats)

    def graph_steps(self, protocol, heads=16, page=64, bs=8, layers=61, steps=200):
        mr = deepseek_runner(heads=heads, layers=layers, page=page, max_requests=bs)
        b, client = self.backend(mr)
        b.init_cuda_graph_state(bs, bs)
        loop = st.DecodeLoop(mr, seed=7)
        loop.start([100 + 370 * i for i in range(bs)])
        static = loop.inputs(bs)  # one set of inputs for every layer, refreshed before each replay

        def run(fb):
            return loop.forward(b, fb, [static] * layers)

        runner = st.GraphRunner(b, bs, protocol=protocol)
        runner.capture(run)
        rpcs = None
        checked = 0
        sampled = {0, 1, steps // 2, steps - 1}
        for step in range(steps):
            fb = loop.decode_batch()
            for t, fresh in zip(static, loop.inputs(bs)):
                t.copy_(fresh)
            for o in runner.outputs:
                o.fill_(float("nan"))
            outs = runner.replay(fb)
            if step == 0:
                torch.cuda.synchronize()
                rpcs = client.rpcs  # warm-up done
            if step in sampled:
                torch.cuda.synchronize()
                self.check_mla(loop, mr, fb, [static] * layers, outs, (0, layers // 2, layers - 1), 1, 0)
                checked += 1
            loop.advance()
        torch.cuda.synchronize()
        self.assertEqual(client.rpcs, rpcs, "RPCs after warm-up")
        self.assertEqual(checked, len(sampled))
        stats = b.stats()
        self.assertEqual(stats["fallback_layers"], 0, stats)
        return stats

    def test_61_layer_step_in_a_graph_2026_protocol(self):
        stats = self.graph_steps("2026")
        print("2026 protocol:", stats)

    def test_61_layer_step_in_a_graph_legacy_protocol(self):
        stats = self.graph_steps("legacy")
        print("capture/replay protocol:", stats)

    def test_128_heads_page_1_in_a_graph(self):
        self.graph_steps("2026", heads=128, page=1, bs=4, layers=8, steps=40)

    def test_swapped_plugin_gives_new_modules(self):
        tree = tempfile.mkdtemp(prefix="ap-swap-")
        self.addCleanup(shutil.rmtree, tree, True)
        host = serve.copy_tree(tree)
        s = serve.Server(host=host).start()
        self.addCleanup(s.cleanup)
        mr = st.ModelRunner.make(heads=16, layers=2, page_size=64, context_len=4096, max_requests=4)
        b, client = self.backend(mr, client=CountingClient(s.address, timeout=120))
        loop = st.DecodeLoop(mr, seed=11)
        loop.start([10, 200, 3000])

        def step():
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check_mla(loop, mr, fb, inputs, outs, range(2), 1, 0)
            loop.advance()

        step()
        step()
        self.assertEqual(b.stats()["module_fetches"], 1)
        # A rebuilt fa3 plugin (another SHA-256) under the running serve.
        plugin = os.path.join(tree, "plugins", "attnplug-backend-fa3")
        shutil.copy2(plugin, plugin + ".new")
        with open(plugin + ".new", "ab") as f:
            f.write(b"\0rebuilt\0")
        os.replace(plugin + ".new", plugin)
        s.signal(signal.SIGHUP)
        serve.wait_until(lambda: b.launcher.source.version == 1, timeout=60, what="the launcher to see the swap")
        step()
        stats = b.stats()
        self.assertEqual((stats["module_fetches"], stats["module_loads"], stats["route_changes"]), (2, 2, 1), stats)
        self.assertEqual(stats["fallback_layers"], 0, stats)

    def test_server_killed_falls_back_with_one_warning(self):
        rec = record_logs(self)
        s = serve.Server().start()
        self.addCleanup(s.cleanup)
        mr = st.ModelRunner.make(heads=16, layers=2, page_size=64, context_len=4096, max_requests=8)
        b, client = self.backend(mr, client=CountingClient(s.address, timeout=2))
        loop = st.DecodeLoop(mr, seed=5)
        loop.start([10, 200, 3000])

        def step():
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            inputs = [loop.inputs(fb.batch_size) for _ in loop.layers]
            outs = loop.forward(b, fb, inputs)
            self.check_mla(loop, mr, fb, inputs, outs, range(2), 1, 0)
            loop.advance()

        step()
        s.kill()
        step()  # a kept plan: the plugin still runs
        self.assertEqual(b.stats()["fallback_layers"], 0)
        loop.start([50])  # a new batch size: no plan, no server
        for _ in range(3):
            step()
        self.assertEqual(b.stats()["fallback_layers"], 6, b.stats())
        self.assertEqual(len(rec.warnings("the server is unreachable (")), 1, rec.warnings())
        self.assertEqual(len(rec.warnings("the fallback runs decode layers")), 1, rec.warnings())


if __name__ == "__main__":
    unittest.main()
