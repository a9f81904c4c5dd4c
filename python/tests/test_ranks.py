"""Tensor-parallel ranks sharing one ``attnplug serve``: two rank processes,
spawned as sglang spawns its schedulers, each with its own
AttnplugMLABackend over its own stand-in pool (64 heads a rank: TP2 of
DeepSeek-V3's 128), one in each CUDA-graph protocol, asking one real serve
for their plans. Each rank's outputs are checked against float64 at
sampled steps, with no fallback layer and one plan request per batch
shape; then a plugin swapped under the serve reaches both ranks at their
next plan; then the serve is killed and each rank falls back with one
warning. The kernels are torch code over the server's plans
(attnplug_testing.fake_kernels): on the CPU, or each rank's GPU where
there is one per rank."""

import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import unittest

import serve

try:
    import torch
except ImportError:  # the CPU suite runs without torch
    torch = None

HEADS = 64  # a rank's share of DeepSeek-V3's 128 heads at TP2
LAYERS = 4
BATCH = 4
STEPS = 8
TIMEOUT = 120


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _wait(event, what):
    if not event.wait(TIMEOUT):
        raise TimeoutError("rank: no %s within %ds" % (what, TIMEOUT))


def rank_main(rank, address, results, swapped, killed):
    """One rank: its backend, a captured step replayed STEPS times (its
    protocol: rank 0 the 2026 one, rank 1 the legacy one), then a new batch
    size after the swap, then another after the kill. Puts (phase, dict)
    on results; an exception is put as ("error", text)."""
    try:
        _rank(rank, address, results, swapped, killed)
    except BaseException as exc:  # the parent reads it; the process ends
        import traceback
        results.put((rank, "error", "".join(traceback.format_exception(exc))))


def _rank(rank, address, results, swapped, killed):
    from attnplug import Client
    from attnplug import sglang_backend as sb
    from attnplug_testing import standins as st
    from attnplug_testing.fake_kernels import FakeLauncher
    from attnplug_testing.torch_mla import TorchMLABackend
    from test_sglang_backend import TOLERANCE, reference, rel_error

    device = "cpu"
    if torch.cuda.is_available() and torch.cuda.device_count() > rank:
        torch.cuda.set_device(rank)
        device = "cuda:%d" % rank
    warnings = _Warnings()
    logging.getLogger("attnplug.sglang_backend").addHandler(warnings)
    client = Client(address, timeout=10)
    launcher = FakeLauncher(client, "fa3", follow=True)
    serve.wait_until(lambda: launcher.source.route is not None, timeout=TIMEOUT, what="the route of fa3")
    mr = st.ModelRunner.make(heads=HEADS, layers=LAYERS, page_size=64, context_len=2048, max_requests=8, device=device)
    b = sb.AttnplugMLABackend(mr, kernel_backend="fa3", launcher=launcher, fallback=TorchMLABackend(mr))
    b.init_cuda_graph_state(BATCH, BATCH)
    loop = st.DecodeLoop(mr, seed=100 + rank)
    loop.start([3 + rank, 150, 700 + 50 * rank])
    static = loop.inputs(BATCH)
    runner = st.GraphRunner(b, BATCH, protocol=("2026", "legacy")[rank], device=device, dry=True)
    runner.capture(lambda fb: loop.forward(b, fb, [static] * LAYERS))
    worst = 0.0
    for step in range(STEPS):
        fb = loop.decode_batch()
        for t, f in zip(static, loop.inputs(3)):
            t.zero_()
            t[:3].copy_(f)
        for o in runner.outputs:
            o.fill_(float("nan"))
        outs = runner.replay(fb)
        if step in (0, STEPS - 1):
            pool = mr.token_to_kv_pool
            for i in (0, LAYERS - 1):
                q = torch.cat(static[:2], dim=-1)[:3]
                want = reference(pool.get_key_buffer(i), mr.req_to_token_pool.req_to_token, fb.req_pool_indices.tolist(),
                                 fb.seq_lens.tolist(), q, mr.model_config.scaling, [1] * 3)
                err = rel_error(outs[i][:3], want)
                if not err < TOLERANCE:
                    raise AssertionError("rank %d step %d layer %d: relative error %.3g" % (rank, step, i, err))
                worst = max(worst, err)
        loop.advance()
    stats = b.stats()
    results.put((rank, "graph", {"stats": stats, "worst": worst, "heads": launcher.steps[0]["model"]["heads"],
                                 "device": device}))

    def eager_steps(n):
        for _ in range(n):
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            loop.forward(b, fb, [loop.inputs(fb.batch_size) for _ in loop.layers])
            loop.advance()

    _wait(swapped, "swap")
    serve.wait_until(lambda: launcher.source.version == 1, timeout=TIMEOUT, what="rank %d to see the swap" % rank)
    loop.start([20])  # a new batch size: a plan of the new plugin
    eager_steps(2)
    results.put((rank, "swap", {"stats": b.stats(), "version": launcher.source.version}))

    _wait(killed, "kill")
    loop.start([30])  # another batch size: no plan, no server
    eager_steps(3)
    results.put((rank, "kill", {"stats": b.stats(), "warnings": list(warnings.messages)}))
    launcher.close()
    client.close()


@unittest.skipUnless(torch is not None, "needs torch")
class RanksTest(unittest.TestCase):
    def setUp(self):
        serve.require_binaries()
        self.tree = tempfile.mkdtemp(prefix="ap-ranks-")
        self.addCleanup(shutil.rmtree, self.tree, True)
        self.server = serve.Server(host=serve.copy_tree(self.tree)).start()
        self.addCleanup(self.server.cleanup)

    def collect(self, results, phase, ranks=(0, 1)):
        got = {}
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(ranks):
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail("no %s result from ranks %s within %ds" % (phase, sorted(set(ranks) - set(got)), TIMEOUT))
            rank, what, value = results.get(timeout=left)
            if what == "error":
                self.fail("rank %d failed:\n%s" % (rank, value))
            self.assertEqual(what, phase, "rank %d" % rank)
            got[rank] = value
        return got

    def test_two_ranks_share_one_serve(self):
        ctx = multiprocessing.get_context("spawn")  # as sglang starts its schedulers
        results, swapped, killed = ctx.Queue(), ctx.Event(), ctx.Event()
        procs = [ctx.Process(target=rank_main, args=(r, self.server.address, results, swapped, killed), daemon=True)
                 for r in (0, 1)]
        for p in procs:
            p.start()
        self.addCleanup(lambda: [p.kill() for p in procs if p.is_alive()])

        graph = self.collect(results, "graph")
        for r, g in graph.items():
            s = g["stats"]
            self.assertEqual(g["heads"], HEADS, "rank %d plans for its own heads" % r)
            self.assertEqual(s["fallback_layers"], 0, "rank %d: %s" % (r, s))
            self.assertEqual(s["paths"]["decode"]["plugin"], (2 + STEPS) * LAYERS + LAYERS,
                             "rank %d: two warm-up runs, the capture and the replays" % r)
            self.assertEqual(s["plan_requests"], 1, "rank %d: one plan for its batch size" % r)

        # A rebuilt fa3 plugin (another SHA-256) swapped in under the running serve.
        plugin = os.path.join(self.tree, "plugins", "attnplug-backend-fa3")
        shutil.copy2(plugin, plugin + ".new")
        with open(plugin + ".new", "ab") as f:
            f.write(b"\0rebuilt\0")
        os.replace(plugin + ".new", plugin)
        self.server.signal(signal.SIGHUP)
        swapped.set()
        swap = self.collect(results, "swap")
        for r, g in swap.items():
            s = g["stats"]
            self.assertEqual((g["version"], s["route_changes"]), (1, 1), "rank %d saw the swap" % r)
            self.assertEqual(s["fallback_layers"], 0, "rank %d: %s" % (r, s))
            self.assertEqual(s["plan_requests"], 2, "rank %d: the new batch size asked the new plugin" % r)

        self.server.kill()
        killed.set()
        kill = self.collect(results, "kill")
        for r, g in kill.items():
            s = g["stats"]
            self.assertEqual(s["paths"]["decode"]["fallback"], 3 * LAYERS, "rank %d: %s" % (r, s))
            unreachable = [m for m in g["warnings"] if "the server is unreachable (" in m]
            self.assertEqual(len(unreachable), 1, "rank %d: %s" % (r, g["warnings"]))
        for p in procs:
            p.join(TIMEOUT)
            self.assertEqual(p.exitcode, 0)


if __name__ == "__main__":
    unittest.main()
