"""python -m attnplug.bench: its arguments without a GPU; its call of
sglang's own decode kernel (a stand-in of sglang's module with its
signature) with torch on the CPU; and with a CUDA GPU every path's plan
timed beside torch through a real attnplug serve, each row's output within
2e-2 of torch's, the decode row beside the stand-in's kernel too."""

import contextlib
import functools
import io
import json
import sys
import unittest
import unittest.mock

import serve
from attnplug import bench

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:
    HAVE_GPU = False


class ArgumentsTest(unittest.TestCase):
    def error(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            bench.main(argv)
        self.assertEqual(cm.exception.code, 2)
        return err.getvalue()

    def test_bad_arguments_are_named(self):
        self.assertIn("--gpu is required", self.error([]))
        self.assertIn("--heads 'x'", self.error(["--gpu", "--heads", "x"]))
        self.assertIn("--heads 0: want [1, 128]", self.error(["--gpu", "--heads", "16,0"]))
        self.assertIn("--cached 100: want [2048, 65536]", self.error(["--gpu", "--cached", "100"]))
        self.assertIn("--batch 100000", self.error(["--gpu", "--batch", "100000"]))


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU")
class BenchGPUTest(unittest.TestCase):
    def test_every_path_beside_torch(self):
        server = serve.Server().start()
        self.addCleanup(server.cleanup)
        out = io.StringIO()
        calls = []  # sglang's decode kernel: a stand-in of its module, torch code
        standin = {bench.SGLANG_DECODE: sglang_decode_module(torch, calls)}
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
                unittest.mock.patch.dict(sys.modules, standin):
            rc = bench.main(["--gpu", "--address", server.address, "--heads", "16", "--batch", "4", "--cached", "2048",
                             "--reps", "3", "--json"])
        self.assertEqual(rc, 0)
        rows = json.loads(out.getvalue())["rows"]
        self.assertEqual([r["path"] for r in rows],
                         ["decode", "verify", "extend", "fp8", "sparse", "prefill", "chunked_prefix"])
        for r in rows:
            self.assertLess(r["rel_err"], 2e-2, r)
            self.assertGreater(r["us"], 0, r)
            self.assertEqual("sglang_us" in r, r["path"] == "decode", r)
        self.assertEqual(rows[4]["backend"], "dsa")
        # The sglang column: the stand-in's kernel, replayed from a graph
        # and compared with torch's output on the same tensors.
        self.assertGreater(rows[0]["sglang_us"], 0)
        self.assertLess(rows[0]["sglang_rel_err"], 2e-2)
        self.assertEqual(tuple(calls[0]["o"].shape), (4, 16, 512))

    def test_sglang_kernel_failing_is_reported(self):
        """sglang's kernel raising on the decode row: the row keeps its
        attnplug and torch figures, a line says what failed, the bench
        ends well."""
        server = serve.Server().start()
        self.addCleanup(server.cleanup)

        def broken(*args, **kwargs):
            raise RuntimeError("out of shared memory (stand-in)")
        mod = sglang_decode_module(torch, [])
        mod.decode_attention_fwd = functools.wraps(mod.decode_attention_fwd)(broken)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
                unittest.mock.patch.dict(sys.modules, {bench.SGLANG_DECODE: mod}):
            rc = bench.main(["--gpu", "--address", server.address, "--heads", "16", "--batch", "2", "--cached", "2048",
                             "--reps", "2"])
        self.assertEqual(rc, 0, out.getvalue())
        text = out.getvalue()
        self.assertIn("sglang's decode_attention_fwd failed (RuntimeError: out of shared memory (stand-in))", text)
        self.assertIn("chunked_prefix", text)


def sglang_decode_module(torch, calls, extra=None):
    """A stand-in of sglang's triton decode module (attnplug.bench.SGLANG_DECODE)
    whose decode_attention_fwd has sglang's signature at the commit the bench
    follows (with one more required parameter, extra, when given) and is
    torch code capturable in a CUDA graph: every request of the same number
    of keys. calls gets each call's arguments."""
    import types

    def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits,
                             max_kv_splits, sm_scale, k_scale, v_scale, logit_cap=0.0, sinks=None,
                             xai_temperature_len=-1, **more):
        calls.append(dict(locals()))
        bs = q.shape[0]
        slots = kv_indices.view(bs, -1).long()
        k, v = k_buffer[slots, 0], v_buffer[slots, 0]
        s = torch.bmm(q, k.transpose(1, 2)).float() * (sm_scale * k_scale)
        o.copy_(torch.bmm(torch.softmax(s, -1).to(v.dtype), v) * v_scale)

    fwd = decode_attention_fwd
    if extra:
        def fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits, max_kv_splits,
                sm_scale, k_scale, v_scale, page_table):
            raise AssertionError("called with a parameter the bench does not know")
    m = types.ModuleType(bench.SGLANG_DECODE)
    m.decode_attention_fwd = fwd
    return m


try:
    import torch as _torch
except ImportError:
    _torch = None


@unittest.skipUnless(_torch is not None, "needs torch")
class SglangDecodeTest(unittest.TestCase):
    """The sglang column's call of sglang's decode kernel, on the CPU: its
    arguments by sglang's names and shapes, the pages as per-token slots,
    and its output that of attention over each request's keys; a kernel
    taking a parameter the bench does not know is left out, saying so."""

    def setUp(self):
        torch = _torch
        self.bs, self.heads, self.keys = 2, 16, 70
        pages = 6
        kv = (torch.randn(pages, bench.PAGE, 576) * 0.5).to(torch.bfloat16)
        self.t = {"q": (torch.randn(self.bs, self.heads, 576) * 0.1).to(torch.bfloat16), "kv_cache": kv}
        table = torch.tensor([[3, 1], [5, 2]])
        self.rows = (table[:, :, None] * bench.PAGE + torch.arange(bench.PAGE)).view(self.bs, -1)[:, :self.keys]

    def test_arguments_and_output(self):
        torch = _torch
        calls = []
        mod = sglang_decode_module(torch, calls)
        with unittest.mock.patch.dict(sys.modules, {bench.SGLANG_DECODE: mod}):
            got, why = bench._sglang_decode(torch, self.t, self.rows, self.heads)
        self.assertEqual(why, None)
        run, o = got
        run()
        a = calls[0]
        self.assertEqual(a["kv_indptr"].tolist(), [0, self.keys, 2 * self.keys])
        self.assertEqual(a["kv_indices"].tolist(), self.rows.reshape(-1).tolist())
        self.assertEqual(tuple(a["attn_logits"].shape), (self.bs, self.heads, bench.SGLANG_KV_SPLITS, 512))
        self.assertEqual(tuple(a["attn_lse"].shape), (self.bs, self.heads, bench.SGLANG_KV_SPLITS))
        self.assertEqual(a["num_kv_splits"].tolist(), [bench.SGLANG_KV_SPLITS] * self.bs)
        self.assertEqual((a["max_kv_splits"], a["sm_scale"], a["k_scale"], a["v_scale"]),
                         (bench.SGLANG_KV_SPLITS, bench.SCALE, 1.0, 1.0))
        self.assertEqual(tuple(a["v_buffer"].shape[1:]), (1, 512))
        self.assertEqual(a["v_buffer"].data_ptr(), a["k_buffer"].data_ptr())
        kv = self.t["kv_cache"].view(-1, 576).double()
        for b in range(self.bs):
            k = kv[self.rows[b]]
            p = torch.softmax(self.t["q"][b].double() @ k.T * bench.SCALE, -1)
            want = p @ k[:, :512]
            err = (torch.linalg.norm(o[b].double() - want) / torch.linalg.norm(want)).item()
            self.assertLess(err, 1e-2, b)

    def test_unknown_parameter_is_named(self):
        torch = _torch
        mod = sglang_decode_module(torch, [], extra=True)
        with unittest.mock.patch.dict(sys.modules, {bench.SGLANG_DECODE: mod}):
            got, why = bench._sglang_decode(torch, self.t, self.rows, self.heads)
        self.assertIsNone(got)
        self.assertIn("takes page_table", why)

    def test_sglang_absent(self):
        with unittest.mock.patch.dict(sys.modules, {bench.SGLANG_DECODE: None}):
            got, why = bench._sglang_decode(_torch, self.t, self.rows, self.heads)
        self.assertIsNone(got)
        self.assertIn("not importable", why)
