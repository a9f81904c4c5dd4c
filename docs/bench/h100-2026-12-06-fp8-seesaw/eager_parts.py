"""An eager decode layer through AttnplugMLABackend.forward_decode, by
parts, on a GPU host: run from python/ with PYTHONPATH=.:testing and the
path of an attnplug binary (a serve is started from it). The same layers
as attnplug_testing.bench's eager table (batch 1, 4096 cached, page 64,
DeepSeek's split q, 8 layers a pass, strict), each part timed alone over
the same passes: the whole layer; the stand-in pool's write; the layer with
the plan's launch_layer a no-op (the class's own work and the write); the
launches alone on the layer's bound tensors; torch.empty of the output; the
current stream's handle."""
import statistics, sys, time

import torch
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug_testing import standins as st
from attnplug_testing.bench import _start_server
from attnplug_testing.torch_mla import TorchMLABackend

LAYERS, PASSES, REPS = 8, 50, 20


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
    return statistics.median(ts)


def main(binary):
    proc, _, address = _start_server(binary)
    try:
        for heads in (16, 128):
            mr = st.ModelRunner.make(heads=heads, layers=LAYERS, page_size=64, context_len=8192, max_requests=1)
            client = Client(address, timeout=120)
            b = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=client, fallback=TorchMLABackend(mr), strict=True)
            loop = st.DecodeLoop(mr, seed=1)
            loop.start([4095])
            fb = loop.decode_batch()
            b.init_forward_metadata(fb)
            calls = []
            for layer in loop.layers:
                qn, qr, kn, kr = loop.inputs(1)
                calls.append((layer, qn.transpose(0, 1).contiguous().transpose(0, 1), qr, kn, kr))
            pool = mr.token_to_kv_pool

            def layers_pass():
                for layer, qn, qr, kn, kr in calls:
                    b.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr)

            def writes_pass():
                for layer, _, _, kn, kr in calls:
                    pool.set_mla_kv_buffer(layer, fb.out_cache_loc, kn, kr)

            full = timed(layers_pass)
            write = timed(writes_pass)
            prep = b._fwd.prepared
            bound = dict(b._fwd.bound)

            def launches_pass():
                for _ in calls:
                    prep.launch_layer(bound)

            launch = timed(launches_pass)
            prep.launch_layer = lambda t, stream=None: None
            own = timed(layers_pass)
            del prep.launch_layer
            dev = torch.device("cuda")

            def empty_pass():
                for _ in calls:
                    torch.empty(1, heads, 512, dtype=torch.bfloat16, device=dev)

            def stream_pass():
                for _ in calls:
                    torch.cuda.current_stream(dev).cuda_stream

            empty, stream = timed(empty_pass), timed(stream_pass)
            assert b.stats()["fallback_layers"] == 0, b.stats()
            print("h%d_b1_s4096 us a layer: layer %.1f, pool write %.1f, layer with no launch %.1f (class %.1f), "
                  "launch_layer alone %.1f, torch.empty %.1f, current stream %.1f"
                  % (heads, full, write, own, own - write, launch, empty, stream), flush=True)
            b.close()
            client.close()
    finally:
        proc.kill()


if __name__ == "__main__":
    main(sys.argv[1])
