"""attnplug.device.PlanSource against a real attnplug serve, without torch
or a GPU: the modules and plans of a name for a device the client
describes, kept as the server says they hold (a step's plan for every step
of its shape up to its bound, a plan request's for that request), refusals
kept, a hot swap of the plugin
seen through Watch (the next plan gets the new plugin's modules), a server
that goes away. The plugin is the liar test plugin (internal/testplugins/
liar), whose fake device code needs no compiler; $ATTNPLUG_LIAR_BIN names
it, else it is built with go."""

import os
import shutil
import signal
import subprocess
import tempfile
import unittest

import serve
from attnplug import Client, NoPlan, ServerError, ServerUnavailable
from attnplug.device import PlanSource

H200 = {"platform": "cuda", "name": "NVIDIA H200", "compute_capability": 90, "sms": 132,
        "max_threads_per_block": 1024, "max_shared_per_block": 232448, "max_grid": [2147483647, 65535, 65535]}


_LIAR = []


def liar_binary():
    """The liar plugin: $ATTNPLUG_LIAR_BIN, else bin/test's, else built with
    go once per process."""
    env = os.environ.get("ATTNPLUG_LIAR_BIN")
    if env:
        return env
    built = os.path.join(serve.BIN, "test", "attnplug-backend-liar")
    if os.access(built, os.X_OK):
        return built
    if not _LIAR:
        out = os.path.join(tempfile.mkdtemp(prefix="ap-liar-"), "attnplug-backend-liar")
        subprocess.run(["go", "build", "-o", out, "./internal/testplugins/liar"], cwd=serve.ROOT, check=True)
        _LIAR.append(out)
    return _LIAR[0]


class CountingClient(Client):
    """A Client that counts the calls of the Kernels service."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = {"kernel_modules": 0, "plan_kernel": 0, "plan_step": 0}

    def kernel_modules(self, backend, device):
        self.calls["kernel_modules"] += 1
        return super().kernel_modules(backend, device)

    def plan_kernel(self, request):
        self.calls["plan_kernel"] += 1
        return super().plan_kernel(request)

    def plan_step(self, step):
        self.calls["plan_step"] += 1
        return super().plan_step(step)


def decode_request(batch=2, heads=16):
    return {"method": "MLA", "dtype": "bf16", "graph": True,
            "dims": {"heads": heads, "head_dim_qk": 576, "head_dim_v": 512, "softmax_scale": 0.1},
            "shape": {"seq_lens": [100 + i for i in range(batch)], "q_lens": [1] * batch, "page_size": 64,
                      "num_pages": 512, "max_seq_len": 4096}}


def decode_step(batch=4, graph=True, seq_lens=None, method="MLA", mode="DECODE"):
    """A step of a DeepSeek-V3 rank of 16 heads over a pool of 32768
    tokens in pages of 64."""
    b = {"size": batch, "query_tokens": 1}
    if graph:
        b["graph"] = True
    if seq_lens is not None:
        b["seq_lens"] = list(seq_lens)
    return {"mode": mode, "method": method,
            "model": {"heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                      "v_head_dim": 128, "softmax_scale": 0.1},
            "pool": {"page_size": 64, "slots": 32768, "max_tokens": 32768, "row_width": 163844,
                     "context_len": 163840, "kv_dtype": "bf16"},
            "batch": b}


class PlanSourceTest(unittest.TestCase):
    def setUp(self):
        self.tree = tempfile.mkdtemp(prefix="ap-plans-")
        self.addCleanup(shutil.rmtree, self.tree, True)
        host = serve.copy_tree(self.tree)
        self.liar = liar_binary()
        self.plugin = os.path.join(self.tree, "plugins", "attnplug-backend-liar")
        shutil.copy2(self.liar, self.plugin)
        self.log = os.path.join(self.tree, "liar.log")
        self.server = serve.Server(host=host, env={"ATTNPLUG_LIE_LOG": self.log}).start()
        self.addCleanup(self.server.cleanup)
        self.client = CountingClient(self.server.address, timeout=5)
        self.addCleanup(self.client.close)
        self.source = PlanSource(self.client, "liar", H200, retry_s=60)
        self.addCleanup(self.source.close)
        serve.wait_until(lambda: self.source.route is not None, what="the route of liar")

    def calls(self):
        with open(self.log) as f:
            return f.read().split()

    def test_plans_kept_and_new_modules_after_a_swap(self):
        src = self.source
        req = src.request(decode_request())
        plan, version = src.plan(req)
        self.assertEqual(version, 0)
        self.assertEqual([t.name for t in plan.tensors][:2], ["q", "kv_cache"])
        self.assertTrue(plan.key)
        mods, _ = src.modules()
        self.assertEqual([m.name for m in mods], ["liar_mla"])
        self.assertIs(src.plan(req)[0], plan)
        self.assertEqual(self.calls(), ["modules", "plan"])
        self.assertEqual(self.client.calls, {"kernel_modules": 1, "plan_kernel": 1, "plan_step": 0})

        # A rebuilt binary (another SHA-256) swapped in under the running serve.
        shutil.copy2(self.liar, self.plugin + ".new")
        with open(self.plugin + ".new", "ab") as f:
            f.write(b"\0rebuilt\0")
        os.replace(self.plugin + ".new", self.plugin)
        old_sha = src.route[3]
        self.server.signal(signal.SIGHUP)
        serve.wait_until(lambda: src.version == 1, what="the source to see the swap")
        self.assertNotEqual(src.route[3], old_sha)
        _, version = src.plan(req)
        self.assertEqual(version, 1)
        src.modules()
        self.assertEqual(self.client.calls, {"kernel_modules": 2, "plan_kernel": 2, "plan_step": 0})
        self.assertEqual(self.calls()[-2:], ["modules", "plan"], "the new plugin process answered")
        self.assertEqual(src.stats["route_changes"], 1)

    def test_steps_kept_as_the_server_says_they_hold(self):
        # fa3's MLA plan reads no lengths: it holds for every step of its
        # shape up to the bound the server gives.
        src = PlanSource(self.client, "fa3", H200, follow=False)
        self.addCleanup(src.close)
        sp, _ = src.step(src.request(decode_step()))
        # The bound is what the pool admits (the least of the context, the
        # pool's tokens and req_to_token's row); the page table's room.
        self.assertEqual((sp.max_seq_len, sp.pages_per_request), (32768, 512))
        self.assertEqual(sp.request.shape.max_seq_len, 32768)
        for _ in range(3):
            self.assertIs(src.step(src.request(decode_step()))[0], sp)
        self.assertEqual(self.client.calls["plan_step"], 1)
        # Another batch size: another plan.
        self.assertIsNot(src.step(src.request(decode_step(batch=8)))[0], sp)
        self.assertEqual(self.client.calls["plan_step"], 2)
        # An MHA prefill's plan reads its lengths: kept for those alone.
        mha = decode_step(batch=2, graph=False, seq_lens=[30, 7], method="MHA_ONE_SHOT", mode="EXTEND")
        mha["batch"]["q_lens"] = [30, 7]
        del mha["batch"]["query_tokens"]
        sp, _ = src.step(src.request(mha))
        self.assertEqual(sp.max_seq_len, 0)
        self.assertIs(src.step(src.request(mha))[0], sp)
        self.assertEqual(self.client.calls["plan_step"], 3)
        mha["batch"]["seq_lens"] = mha["batch"]["q_lens"] = [31, 7]
        self.assertIsNot(src.step(src.request(mha))[0], sp)
        self.assertEqual(self.client.calls["plan_step"], 4)
        # A malformed step: the server names the field.
        bad = decode_step()
        bad["pool"]["kv_dtype"] = "fp4"
        with self.assertRaises(ServerError) as cm:
            src.step(src.request(bad))
        self.assertIn("pool.kv_dtype", str(cm.exception))

    def test_refusals_kept(self):
        src = self.source
        req = src.request(dict(decode_request(), method="MHA"))  # liar runs MLA only
        with self.assertRaises(NoPlan):
            src.plan(req)
        n = self.client.calls["plan_kernel"]
        for _ in range(5):
            with self.assertRaises(NoPlan):
                src.plan(req)
        self.assertEqual(self.client.calls["plan_kernel"], n)

    def test_server_gone(self):
        src = self.source
        req = src.request(decode_request())
        plan, _ = src.plan(req)
        self.server.kill()
        self.assertIs(src.plan(req)[0], plan, "a kept plan answers without the server")
        other = src.request(decode_request(batch=3))
        with self.assertRaises(ServerUnavailable):
            src.plan(other)
        n = self.client.calls["plan_kernel"]
        for _ in range(5):
            with self.assertRaises(ServerUnavailable):
                src.plan(other)
        self.assertEqual(self.client.calls["plan_kernel"], n, "no call while the server is known to be down")


if __name__ == "__main__":
    unittest.main()
