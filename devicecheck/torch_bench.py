# torch's figures for attnplug bench --gpu: copy bandwidth, bf16 matmul
# rate, absorbed-MLA decode and extend as bmm-softmax-bmm, and causal
# prefill through scaled_dot_product_attention, on the shapes read from
# stdin (JSON: {"decode": [{name, heads, seq_lens, q_lens, scale}],
# "prefill": [{name, heads, seq_lens, q_lens, scale}]}). Prints one JSON
# line.
import json
import sys


def main():
    try:
        import torch
    except Exception as e:  # no torch: say so
        print(json.dumps({"error": "no torch: %s" % e}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return
    spec = json.load(sys.stdin)
    shapes = spec.get("decode") or []
    dev = torch.device("cuda")

    def bench(fn, reps=9, iters=10):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / iters)
        ts.sort()
        return ts[len(ts) // 2]  # ms

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), iters=4)
    copy_tbs = 2 * n / (ms / 1000) / 1e12
    del src, dst
    d = 8192
    a = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
    b = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
    ms = bench(lambda: a @ b, iters=5)
    mm = 2 * d**3 / (ms / 1000) / 1e12
    del a, b

    out = {}
    for s in shapes:
        h, lens, scale = s["heads"], s["seq_lens"], s["scale"]
        ql = (s.get("q_lens") or [1])[0]  # a uniform batch: 1 (decode), or an extend's new tokens
        bsz, smax = len(lens), max(lens)
        # Layers: enough copies that one pass exceeds the L2, as in the Go run
        # (an extend's products are its cost: two).
        kv_bytes = bsz * smax * 576 * 2
        copies = max(1, min(61 if ql == 1 else 2, (512 << 20) // max(kv_bytes, 1)))
        try:
            kvs = [torch.randn(bsz, smax, 576, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
            q = torch.randn(bsz, ql * h, 576, device=dev, dtype=torch.bfloat16)  # row t*h + head
            mask = None
            idx = torch.arange(smax, device=dev)[None, None, :]
            if ql > 1:  # causal within the extend: token t sees the keys up to len - ql + t
                t = torch.arange(ql * h, device=dev) // h
                mask = idx > (torch.tensor(lens, device=dev)[:, None, None] - ql + t[None, :, None])
            elif min(lens) != smax:
                mask = idx >= torch.tensor(lens, device=dev)[:, None, None]
            state = {"i": 0}

            def step():
                kv = kvs[state["i"] % copies]
                state["i"] += 1
                sc = torch.bmm(q, kv.transpose(1, 2)).float() * scale
                if mask is not None:
                    sc = sc.masked_fill(mask, float("-inf"))
                p = torch.softmax(sc, dim=-1).to(torch.bfloat16)
                return torch.bmm(p, kv[:, :, :512])

            # As attnplug's kernels are timed: the layers of a step captured
            # in a CUDA graph and replayed, so launches cost nothing.
            n = max(copies, 10 if ql == 1 else 2)

            def all_layers():
                for _ in range(n):
                    step()

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                all_layers()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                all_layers()
            out[s["name"]] = bench(g.replay, iters=1) * 1000 / n
            del g
            del kvs, q
        except torch.cuda.OutOfMemoryError:
            out[s["name"]] = 0
        torch.cuda.empty_cache()
    import torch.nn.functional as F

    pre = {}
    note = ""
    for s in spec.get("prefill") or []:
        h, lens, scale = s["heads"], s["seq_lens"], s["scale"]
        try:
            qs = [torch.randn(1, h, n, 192, device=dev, dtype=torch.bfloat16) for n in lens]
            ks = [torch.randn(1, h, n, 192, device=dev, dtype=torch.bfloat16) for n in lens]
            vs = [torch.randn(1, h, n, 128, device=dev, dtype=torch.bfloat16) for n in lens]

            def run():
                for q, k, v in zip(qs, ks, vs):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

            try:
                run()
            except RuntimeError as e:  # a backend without v != qk head dims: pad v
                note = "v padded to 192: %s" % str(e).split("\n")[0][:120]
                vs = [torch.nn.functional.pad(v, (0, 64)) for v in vs]
            pre[s["name"]] = bench(run, reps=7, iters=3) * 1000
            del qs, ks, vs
        except torch.cuda.OutOfMemoryError:
            pre[s["name"]] = 0
        torch.cuda.empty_cache()
    print(json.dumps({"torch": torch.__version__, "copy_tb_s": copy_tbs, "matmul_tflop_s": mm, "decode_us": out,
                      "prefill_us": pre, "sdpa_note": note}))


main()
