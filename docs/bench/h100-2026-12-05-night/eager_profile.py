"""Where an eager decode layer's host time goes: AttnplugMLABackend.forward_decode
at batch 1 (4096 cached, page 64, DeepSeek's split q, strict), its parts timed
alone on the same stand-in pools, and a cProfile of the layer without the
pool's write. Run from python/ with PYTHONPATH=<package>:testing and
--attnplug <bin>/attnplug; prints one table per package given."""
import argparse, cProfile, io, pstats, sys, time

p = argparse.ArgumentParser()
p.add_argument("--attnplug", required=True)
p.add_argument("--label", default="tree")
a = p.parse_args()

import torch
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug_testing import standins as st
from attnplug_testing.bench import _start_server
from attnplug_testing.torch_mla import TorchMLABackend

LAYERS, PASSES, REPS = 8, 50, 15


def timed(run):
    run()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPS):
        t0 = time.perf_counter_ns()
        for _ in range(PASSES):
            run()
        torch.cuda.synchronize()
        ts.append((time.perf_counter_ns() - t0) / 1000 / (PASSES * LAYERS))
    return sorted(ts)[len(ts) // 2]


proc, tmp, address = _start_server(a.attnplug)
try:
    for heads in (16, 128):
        mr = st.ModelRunner.make(heads=heads, layers=LAYERS, page_size=64, context_len=8192, max_requests=1)
        client = Client(address, timeout=120)
        backend = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=client, fallback=TorchMLABackend(mr), strict=True)
        loop = st.DecodeLoop(mr, seed=1)
        loop.start([4095])
        fb = loop.decode_batch()
        backend.init_forward_metadata(fb)
        calls = []
        for layer in loop.layers:
            qn, qr, kn, kr = loop.inputs(1)
            calls.append((layer, qn.transpose(0, 1).contiguous().transpose(0, 1), qr, kn, kr))
        pool = mr.token_to_kv_pool

        def full():
            for layer, qn, qr, kn, kr in calls:
                backend.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr)

        def nowrite():
            for layer, qn, qr, kn, kr in calls:
                backend.forward_decode(qn, kn, kn, layer, fb, save_kv_cache=False, q_rope=qr, k_rope=kr)

        def writes():
            for layer, _, _, kn, kr in calls:
                pool.set_mla_kv_buffer(layer, fb.out_cache_loc, kn, kr)

        nowrite()
        f = backend._fwd
        t = dict(f.bound)
        prepared = f.prepared

        def launches():  # the same tensors every layer: the launcher and the driver alone
            for _ in range(LAYERS):
                prepared.launch_layer(t)

        def empties():
            for _ in range(LAYERS):
                torch.empty(1, heads, 512, dtype=torch.bfloat16, device="cuda")

        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            launches()
            with torch.cuda.graph(g, stream=s):
                launches()
        torch.cuda.synchronize()
        kernel = timed(g.replay)
        row = {k: timed(fn) for k, fn in (("layer", full), ("no_write", nowrite), ("write", writes),
                                          ("launch_layer", launches), ("torch_empty", empties))}
        row["kernel_graph"] = kernel
        assert backend.stats()["fallback_layers"] == 0
        print("[%s] h%d_b1_s4096 us a layer: %s" % (a.label, heads, "  ".join("%s %.1f" % kv for kv in row.items())))
        print("[%s] h%d: layer - write - kernel = %.1f us (the goal: <= 25)" % (a.label, heads, row["layer"] - row["write"] - kernel))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            nowrite()
        pr.disable()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(14)
        print("\n".join(l for l in out.getvalue().splitlines() if l.strip())[:4000])
        backend.close()
        client.close()
finally:
    proc.terminate()
    proc.wait(15)
