"""Host time of the parts of an eager forward_decode on a GPU (batch 1,
16 heads, 4096 cached): each part timed alone in a loop, no sync inside."""
import cProfile, io, pstats, sys, time
import torch
sys.path[:0] = [".", "testing", "tests"]
import serve
from attnplug import Client
from attnplug import sglang_backend as sb
from attnplug_testing import standins as st
from attnplug_testing.torch_mla import TorchMLABackend

srv = serve.Server().start()
c = Client(srv.address, timeout=60)
for heads in (16, 128):
    mr = st.ModelRunner.make(heads=heads, layers=8, page_size=64, context_len=8192, max_requests=1)
    b = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=c, fallback=TorchMLABackend(mr), strict=True)
    loop = st.DecodeLoop(mr, seed=1)
    loop.start([4095])
    fb = loop.decode_batch()
    b.init_forward_metadata(fb)
    calls = []
    for layer in loop.layers:
        qn, qr, kn, kr = loop.inputs(1)
        calls.append((layer, qn.transpose(0, 1).contiguous().transpose(0, 1), qr, kn, kr))
    layer, qn, qr, kn, kr = calls[0]
    b.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr)
    f = b._fwd
    p = f.prepared
    t = dict(f.bound)
    pool = mr.token_to_kv_pool

    def timeit(name, fn, n=2000):
        fn(); torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        host = (time.perf_counter_ns() - t0) / 1000 / n
        torch.cuda.synchronize()
        wall = (time.perf_counter_ns() - t0) / 1000 / n
        print("  h%-3d %-34s host %6.2f us  with sync %6.2f us" % (heads, name, host, wall))

    timeit("forward_decode (write on)", lambda: b.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr))
    timeit("forward_decode (write off)", lambda: b.forward_decode(qn, kn, kn, layer, fb, save_kv_cache=False, q_rope=qr, k_rope=kr))
    timeit("pool.set_mla_kv_buffer", lambda: pool.set_mla_kv_buffer(layer, fb.out_cache_loc, kn, kr))
    timeit("torch.cat q", lambda: torch.cat([qn.reshape(1, heads, 512), qr.reshape(1, heads, 64)], dim=-1))
    qbuf = torch.empty(1, heads, 576, dtype=torch.bfloat16, device="cuda")
    timeit("torch.cat q out=", lambda: torch.cat([qn.reshape(1, heads, 512), qr.reshape(1, heads, 64)], dim=-1, out=qbuf))
    timeit("torch.empty out", lambda: torch.empty(1, heads, 512, dtype=torch.bfloat16, device="cuda"))
    timeit("get_key_buffer.view", lambda: pool.get_key_buffer(0).view(-1, 64, 576))
    timeit("prepared.launch_layer", lambda: p.launch_layer(t))
    used = p._reads["layer"][2]
    timeit("prepared._bind", lambda: p._bind(t, used))
    raw = torch._C._cuda_getCurrentRawStream
    timeit("raw stream", lambda: raw(0))
    timeit("current_stream().cuda_stream", lambda: torch.cuda.current_stream().cuda_stream)
    import ctypes
    ptrs = p._bind(t, used)
    s = ctypes.c_void_p(raw(0))
    steps = [x for x in p._steps if not x.launch.per_batch]
    timeit("steps run (%d launches)" % len(steps), lambda: [x.run(p._drv, ptrs, s) for x in steps])
    drv = p._drv
    cur = ctypes.c_void_p()
    timeit("ctypes cuCtxGetCurrent", lambda: drv.cuCtxGetCurrent(ctypes.byref(cur)))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(500):
        b.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr)
    pr.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(14)
    print("\n".join(l[:150] for l in out.getvalue().splitlines()[:36]))
    b.close()
c.close()
srv.cleanup()
