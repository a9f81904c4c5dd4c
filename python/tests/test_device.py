"""attnplug.device on a GPU: the fa3 plugin's MLA decode, planned through a
real attnplug serve (a step's plan, and a plan request's) and launched on
torch tensors, against a float64
reference (outputs poisoned first), inside a captured CUDA graph over
growing lengths. Skipped where torch or a CUDA GPU is missing (the
dispatch-only package needs neither)."""

import unittest

import serve

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:  # the CPU-only tests run without torch
    torch = None
    HAVE_GPU = False

SCALE = 0.1352337788608801
TOLERANCE = 1e-2  # relative Frobenius error of bf16 inputs and output


def reference(q, kv, page_table, seq_lens, page_size, heads, scale=SCALE):
    """fp64 absorbed-MLA decode: q [b, heads, 576], the keys of request i
    the first seq_lens[i] rows of its pages; values are their first 512
    columns."""
    out = torch.empty(q.shape[0], heads, 512, dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[0], heads, dtype=torch.float64, device=q.device)
    flat = kv.reshape(-1, 576).double()
    for i, n in enumerate(seq_lens):
        pages = page_table[i]
        rows = (pages[torch.arange(n, device=q.device) // page_size] * page_size
                + torch.arange(n, device=q.device) % page_size)
        k = flat[rows]
        s = (q[i].double() @ k.T) * scale
        lse[i] = torch.logsumexp(s, dim=-1)
        out[i] = torch.softmax(s, dim=-1) @ k[:, :512]
    return out, lse


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU")
class LauncherTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from attnplug import Client
        cls.server = serve.Server().start()
        cls.client = Client(cls.server.address, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def batch(self, heads, page_size, seq_lens, max_seq_len, seed=0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        b = len(seq_lens)
        per = -(-max_seq_len // page_size)
        num_pages = b * per + 3
        perm = torch.randperm(num_pages, generator=g, device="cuda").to(torch.int32)
        page_table = perm[:b * per].reshape(b, per)
        t = {
            "q": torch.randn(b, heads, 576, generator=g, device="cuda").to(torch.bfloat16),
            "kv_cache": torch.randn(num_pages, page_size, 576, generator=g, device="cuda").to(torch.bfloat16),
            "kv_indptr": torch.arange(0, (b + 1) * per, per, dtype=torch.int32, device="cuda"),
            "kv_indices": page_table.reshape(-1).contiguous(),
            "seq_lens": torch.tensor(seq_lens, dtype=torch.int32, device="cuda"),
            "qo_indptr": torch.arange(b + 1, dtype=torch.int32, device="cuda"),
            "out": torch.empty(b, heads, 512, dtype=torch.bfloat16, device="cuda"),
            "lse": torch.empty(b, heads, dtype=torch.float32, device="cuda"),
        }
        req = {"backend": "fa3", "method": "MLA", "dtype": "bf16", "graph": True,
               "dims": {"heads": heads, "head_dim_qk": 576, "head_dim_v": 512, "softmax_scale": SCALE},
               "shape": {"seq_lens": list(seq_lens), "q_lens": [1] * b, "page_size": page_size,
                         "num_pages": num_pages, "max_seq_len": max_seq_len}}
        return t, req, page_table

    @staticmethod
    def step_of(req):
        """The step of an engine whose pool and page table admit exactly
        req's max_seq_len keys a request, over req's pages: its plan is
        req's, made by the server."""
        s, d = req["shape"], req["dims"]
        bound = s["max_seq_len"]
        return {"mode": "DECODE", "method": "MLA",
                "model": {"heads": d["heads"], "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                          "v_head_dim": 128, "softmax_scale": d["softmax_scale"]},
                "pool": {"page_size": s["page_size"], "slots": s["num_pages"] * s["page_size"],
                         "max_tokens": s["num_pages"] * s["page_size"], "row_width": bound, "context_len": bound,
                         "kv_dtype": "bf16"},
                "batch": {"size": len(s["seq_lens"]), "query_tokens": 1, "graph": True}}

    def check(self, t, page_table, seq_lens, page_size, heads):
        want, want_lse = reference(t["q"], t["kv_cache"], page_table, seq_lens, page_size, heads)
        got = t["out"].double()
        self.assertFalse(torch.isnan(got).any().item(), "outputs left unwritten (poison)")
        err = (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item()
        lse_err = (t["lse"].double() - want_lse).abs().max().item()
        self.assertLess(err, TOLERANCE)
        self.assertLess(lse_err, 1e-3)
        return err

    def test_decode_matches_the_reference_and_replays_in_a_graph(self):
        from attnplug.device import Launcher
        first = None
        for heads, page_size, b in ((16, 64, 16), (128, 1, 4), (128, 64, 64)):
            launcher = Launcher(self.client, "fa3")
            if first is None:
                first = launcher
            else:  # the images the first Launcher loaded, not loaded again
                self.assertEqual({n: id(m) for n, m in launcher.modules().items()},
                                 {n: id(m) for n, m in first.modules().items()})
                self.assertEqual(launcher.stats["images_loaded"], 0)
            seq = [100 + 37 * i for i in range(b)]
            t, req, table = self.batch(heads, page_size, seq, 4096, seed=heads + b)
            st = self.step_of(req)
            step = launcher.step(st)
            self.assertTrue(step.holds_for_batch())
            self.assertEqual((step.max_seq_len, step.pages_per_request), (4096, -(-4096 // page_size)))
            t["out"].fill_(float("nan"))
            step.launch(t)
            torch.cuda.synchronize()
            err = self.check(t, table, seq, page_size, heads)

            # A step captured once: advance seq_lens on the device, the
            # scheduler, two layers; replayed for growing lengths.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm up outside the capture
                    step.launch_batch(t)
                    step.launch_layer(t)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                t["seq_lens"].add_(1)
                step.launch_batch(t)
                step.launch_layer(t)
                step.launch_layer(t)
            t["seq_lens"].copy_(torch.tensor(seq, dtype=torch.int32))
            torch.cuda.synchronize()
            before = launcher.stats["plan_requests"]
            for s in range(1, 51):
                self.assertIs(launcher.step(st), step)  # the same plan for the batch shape
                if s % 25 == 0:
                    t["out"].fill_(float("nan"))
                graph.replay()
                if s % 25 == 0:
                    torch.cuda.synchronize()
                    self.check(t, table, [n + s for n in seq], page_size, heads)
            self.assertEqual(launcher.stats["plan_requests"], before)
            print("heads %d page %d batch %d: rel err %.2e; 50 graph replays, %d plan request(s)"
                  % (heads, page_size, b, err, launcher.stats["plan_requests"]))

    def test_mismatched_tensors_are_refused_before_any_launch(self):
        from attnplug.device import Launcher, TensorMismatch
        launcher = Launcher(self.client, "fa3")
        t, req, _ = self.batch(16, 64, [100, 200], 1024)
        step = launcher.plan(req)
        for name, bad in (("q", t["q"].float()), ("out", t["out"][:1]), ("kv_cache", t["kv_cache"].cpu()),
                          ("q", t["q"].transpose(0, 1).contiguous().transpose(0, 1))):
            with self.assertRaises(TensorMismatch) as ctx:
                step.launch(dict(t, **{name: bad}))
            self.assertIn(name, str(ctx.exception))
        with self.assertRaises(TensorMismatch):
            step.launch({k: v for k, v in t.items() if k != "lse"})


if __name__ == "__main__":
    unittest.main()
