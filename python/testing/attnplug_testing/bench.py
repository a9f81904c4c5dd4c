"""python -m attnplug_testing.bench: the cost of one handler call of attnplug.sglang
after warm-up, next to sglang's own handler in the same run, and the RPCs
of a 61-layer forward pass. With --gpu: the plugin's MLA decode launched
from Python (attnplug.device) on torch tensors, next to torch's
bmm-softmax-bmm on the same tensors (gpu_main), and an eager decode layer
through AttnplugMLABackend beside its kernel time (eager_main).

Both registries answer the same stand-in layers and batches in one process:
sglang's own attention_backend_handler.py (the reference file, or the one
of an installed sglang), loaded with stand-in imports, and that module's
registry after attnplug.sglang.install(), asking a real attnplug serve
(--address, or one started from --attnplug). A call is what sglang's
DeepSeek layer does per layer: get_handler(backend)(attn, forward_batch).
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from attnplug import sglang as aps
from attnplug.bench import _graph, _timed
from attnplug_testing import handlers as testing

LAYERS = 61


def _workloads():
    """(label, backend, request) of the passes measured: decode and
    prefill batches of the common backends, and a name nobody serves."""
    def req(backend, mode, prefix, seq):
        return {
            "backend": backend, "forward_mode": mode, "extend_prefix_lens": prefix, "seq_lens": seq,
            "max_chunk_capacity": 131072, "mla_prefill_cp": False,
            "layer": {"chunked_prefix_cache_threshold": 8192, "disable_chunked_prefix_cache": False,
                      "flashinfer_mla_disable_ragged": False, "rocm_fused_decode_mla": False, "use_dsa": False,
                      "fused_qkv_a_proj_with_mqa": True, "intel_amx": False},
            "runtime": {"platform": "cuda", "piecewise_cuda_graph": False, "breakable_cuda_graph": False,
                        "deterministic_inference": False, "dsa_use_mha": False, "two_batch_overlap": False},
        }
    decode = [1000 + 37 * i for i in range(64)]
    out = []
    for backend in ("fa3", "flashinfer", "trtllm_mla", "dsa", "triton"):
        out.append(("decode x64", backend, req(backend, "DECODE", None, decode)))
        out.append(("extend x4", backend, req(backend, "EXTEND", [0, 512, 9000, 0], [800, 1600, 9800, 300])))
    return out


def _reference(path):
    if path:
        return path
    found = testing.reference_path()
    if found:
        return found
    spec = importlib.util.find_spec(aps.HANDLER_MODULE) if importlib.util.find_spec("sglang") else None
    return spec.origin if spec is not None else None


def _start_server(binary):
    d = tempfile.mkdtemp(prefix="ap-bench-")
    sock = os.path.join(d, "s.sock")
    proc = subprocess.Popen([binary, "serve", "--listen", "unix://" + sock, "--metrics-listen", "",
                             "--match-hardware=false"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, ATTNPLUG_CACHE_DIR=d))
    for line in proc.stderr:
        if "listening on" in line:
            break
    else:
        raise SystemExit("attnplug serve did not start")
    return proc, d, "unix://" + sock


def _time_pass(get_handler, backend, attns, fb, passes):
    t0 = time.perf_counter_ns()
    for _ in range(passes):
        for a in attns:
            get_handler(backend)(a, fb)
    return (time.perf_counter_ns() - t0) / (passes * len(attns))


#: The decode shapes of --gpu: (heads, batch, cached tokens), page size 64;
#: attnplug bench --gpu has rows of the same names.
GPU_SHAPES = ((16, 1, 4096), (16, 16, 4096), (16, 64, 4096), (128, 1, 4096), (128, 16, 4096), (128, 64, 4096))


def gpu_main(address, reps=20):
    """Times, per shape, from Python through attnplug.device: the layer's
    launches replayed in a CUDA graph of 61 layers (the device's time per
    layer, by CUDA events), the host's time of a step's graph replay call,
    and of one layer's launch_layer call without a graph; and torch's
    bmm-softmax-bmm on the same tensors (pages gathered), in a CUDA graph
    too. Prints a table; returns its rows."""
    import torch
    from attnplug import Client
    from attnplug.device import Launcher
    client = Client(address, timeout=120)
    launcher = Launcher(client, "fa3")
    scale, page, rows = 0.1352337788608801, 64, []
    print("attnplug_testing.bench --gpu: fa3's MLA decode through attnplug.device on %s, page size %d" % (torch.cuda.get_device_name(), page))
    print("%-16s %9s %12s %14s %12s %9s %8s" % ("shape", "layer us", "61-layer us", "replay call us", "launch us", "torch us", "vs torch"))
    for heads, b, s in GPU_SHAPES:
        per = s // page
        n_pages = b * per
        table = torch.randperm(n_pages, device="cuda", dtype=torch.int32).reshape(b, per)
        t = {"q": torch.randn(b, heads, 576, device="cuda").to(torch.bfloat16),
             "kv_cache": torch.randn(n_pages, page, 576, device="cuda").to(torch.bfloat16),
             "kv_indptr": torch.arange(0, (b + 1) * per, per, dtype=torch.int32, device="cuda"),
             "kv_indices": table.reshape(-1).contiguous(),
             "seq_lens": torch.full((b,), s, dtype=torch.int32, device="cuda"),
             "qo_indptr": torch.arange(b + 1, dtype=torch.int32, device="cuda"),
             "out": torch.empty(b, heads, 512, dtype=torch.bfloat16, device="cuda"),
             "lse": torch.empty(b, heads, dtype=torch.float32, device="cuda")}
        step = launcher.plan({"method": "MLA", "dtype": "bf16", "graph": True,
                              "dims": {"heads": heads, "head_dim_qk": 576, "head_dim_v": 512, "softmax_scale": scale},
                              "shape": {"seq_lens": [s] * b, "q_lens": [1] * b, "page_size": page,
                                        "num_pages": n_pages, "max_seq_len": s}})
        step.launch(t)
        torch.cuda.synchronize()
        # Host time of one layer's launches without a graph.
        t0 = time.perf_counter_ns()
        for _ in range(100):
            step.launch_layer(t)
        launch_us = (time.perf_counter_ns() - t0) / 100 / 1000
        torch.cuda.synchronize()

        def graph_of(body):
            return _graph(torch, body)

        def timed(g, n):
            return _timed(torch, g, n, reps)

        layers = graph_of(lambda: [step.launch_layer(t) for _ in range(LAYERS)])
        layer_us = timed(layers, LAYERS)
        whole = graph_of(lambda: (step.launch_batch(t), [step.launch_layer(t) for _ in range(LAYERS)]))
        step_us = timed(whole, 1)
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(20):
            whole.replay()
        replay_us = (time.perf_counter_ns() - t0) / 20 / 1000
        torch.cuda.synchronize()

        k = t["kv_cache"][table.long()].reshape(b, s, 576)

        def torch_layer():  # bf16 matmuls, scores and softmax in fp32, as attnplug bench --gpu's torch rows
            sc = torch.bmm(t["q"], k.transpose(1, 2)).float() * scale
            return torch.bmm(torch.softmax(sc, dim=-1).to(torch.bfloat16), k[:, :, :512])

        torch_us = timed(graph_of(lambda: [torch_layer() for _ in range(4)]), 4)
        name = "h%d_b%d_s%d" % (heads, b, s)
        rows.append({"name": name, "layer_us": layer_us, "step_us": step_us, "replay_call_us": replay_us,
                     "launch_layer_us": launch_us, "torch_us": torch_us})
        print("%-16s %9.1f %12.1f %14.1f %12.1f %9.1f %7.2fx" % (name, layer_us, step_us, replay_us, launch_us, torch_us, torch_us / layer_us))
    print("plan requests: %d for %d shapes" % (launcher.stats["plan_requests"], len(GPU_SHAPES)))
    client.close()
    kernel = {r["name"]: r["layer_us"] for r in rows}
    rows.extend(class_graph_main(address, kernel, reps=reps))
    rows.extend(eager_main(address, kernel, reps=reps))
    rows.extend(paths_main(address, reps=reps))
    rows.extend(sparse_paths_main(address, reps=reps))
    return rows


#: The shapes of the per-path table: heads, requests and cached tokens.
PATH_SHAPES = ((16, 16, 4096), (128, 16, 4096))


def _timer(torch, device):
    """A timer of fn run n times: CUDA events on a GPU, else the host's
    clock (a CPU run checks the code, not the figures)."""
    def timed(fn, n):
        fn()
        if str(device) == "cpu":
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            return (time.perf_counter_ns() - t0) / 1000 / n
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000 / n
    return timed


def paths_main(address, reps=20, layers=8, device="cuda", shapes=PATH_SHAPES, launcher=None):
    """Times each DeepSeek path through AttnplugMLABackend beside the
    same path through a torch backend (attnplug_testing.torch_mla: fp32
    bmm-softmax-bmm over the pool, SDPA-free causal MHA) on the same
    batch and inputs, each as sglang runs it: decode and target verify (4
    draft tokens) replayed from a CUDA graph of layers layers (the pool's
    write off: the class's own work), a chain draft's 3 steps from one
    graph (each writing its token's KV, as the draft model does), an
    absorbed-MLA extend of 130 new tokens a request over the cache and an
    MHA prefill of up to 1024 tokens a request, eager. Per layer (per step
    for the draft). Prints a table; returns its rows. launcher (a function of
    a Client) makes the backends' launcher: a test's fake one on the CPU."""
    import torch
    from attnplug import Client
    from attnplug import sglang_backend as sb
    from attnplug_testing import standins as st
    from attnplug_testing.torch_mla import TorchMLABackend, TorchMLAMultiStepDraftBackend
    timed = _timer(torch, device)
    graph = str(device) != "cpu"
    out = []
    print("\neach path through AttnplugMLABackend beside a torch backend on the same batch (us a layer)")
    print("%-10s %-22s %12s %10s %9s" % ("path", "shape", "attnplug us", "torch us", "vs torch"))
    for heads, b, s in shapes:
        client = Client(address, timeout=120)
        mr = st.ModelRunner.make(heads=heads, layers=1, page_size=64, context_len=s + 256, max_requests=max(b, 4),
                                 device=device)
        kw = {"kernel_backend": "fa3", "client": client, "strict": True}
        if launcher is not None:
            kw["launcher"] = launcher(client)
        ours = sb.AttnplugMLABackend(mr, fallback=TorchMLABackend(mr), **kw)
        theirs = TorchMLABackend(mr)
        loop = st.DecodeLoop(mr, seed=3)
        loop.start([s - 8] * b)
        layer = loop.layers[0]
        shape = "h%d_b%d_s%d" % (heads, b, s)

        def row(path, us, torch_us):
            out.append({"name": "%s_%s" % (path, shape), "path": path, "us": us, "torch_us": torch_us})
            print("%-10s %-22s %12.1f %10.1f %8.2fx" % (path, shape, us, torch_us, torch_us / us))

        def graphed(backend, mode, q, run, draft_steps=None):
            backend.init_cuda_graph_state(b, b * q * (draft_steps or 1))
            runner = st.GraphRunner(backend, b, mode=mode, q=q, device=device, dry=not graph, draft_steps=draft_steps)
            runner.capture(run)
            return runner

        for path, mode, q in (("decode", st.ForwardMode.DECODE, 1), ("verify", st.ForwardMode.TARGET_VERIFY, 4)):
            qn, qr, kn, kr = loop.inputs(b * q)
            qn = qn.transpose(0, 1).contiguous().transpose(0, 1)
            fb = loop.decode_batch() if q == 1 else loop.verify_batch(q)
            us = []
            for backend in (ours, theirs):
                def run(f, backend=backend):
                    call = backend.forward_decode if q == 1 else backend.forward_extend
                    return [call(qn, kn, kn, layer, f, save_kv_cache=False, q_rope=qr, k_rope=kr)
                            for _ in range(layers)]
                runner = graphed(backend, mode, q, run)
                runner.replay(fb)
                replay = runner.graph.replay if graph else (lambda r=runner, f=fb: r.replay(f))
                us.append(timed(replay, reps) / layers)
            loop.advance()
            row(path, *us)
        # A chain draft of 4 tokens: its 3 steps in one graph.
        steps, us = 4, []
        ins = [[loop.inputs(b)] for _ in range(steps - 1)]
        fb = loop.draft_batch(steps)
        ours_draft = sb.AttnplugMLAMultiStepDraftBackend(mr, 1, steps, fallback=TorchMLAMultiStepDraftBackend(mr, 1, steps),
                                                         **kw)
        for draft in (ours_draft, TorchMLAMultiStepDraftBackend(mr, 1, steps)):
            def run(f, draft=draft):
                return [o for step in loop.draft_forward(draft, f, ins, steps) for o in step]
            runner = graphed(draft, st.ForwardMode.DECODE, 1, run, draft_steps=steps)
            runner.replay(fb)
            replay = runner.graph.replay if graph else (lambda r=runner, f=fb: r.replay(f))
            us.append(timed(replay, reps) / (steps - 1))
        loop.advance()
        row("draft", *us)
        # Absorbed-MLA extend over the cache, eager.
        new = [130] * b
        fb = loop.extend_batch(new)
        qn, qr, kn, kr = loop.inputs(sum(new))
        us = []
        for backend in (ours, theirs):
            backend.init_forward_metadata(fb)
            us.append(timed(lambda backend=backend: backend.forward_extend(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr),
                            reps))
        row("extend", *us)
        # MHA prefill of new requests (no prefix), eager.
        pre = st.DecodeLoop(mr, seed=4)
        mlayer = pre.mha_layers[0]
        n = min(1024, s)
        mr.req_to_token_pool.free(list(loop.rpi))
        pre.start([0] * 4)
        fb = pre.extend_batch([n] * 4)
        q, k, v = pre.randn(4 * n, heads, 192), pre.randn(4 * n, heads, 192), pre.randn(4 * n, heads, 128)
        us = []
        for backend in (ours, theirs):
            backend.init_forward_metadata(fb)
            us.append(timed(lambda backend=backend: backend.forward_extend(q, k, v, mlayer, fb, save_kv_cache=False), reps))
        row("prefill", *us)
        for backend in (ours, ours_draft):
            stats = backend.stats()
            assert stats["fallback_layers"] == 0, stats
            backend.close()
        client.close()
    return out


def sparse_paths_main(address, reps=20, layers=8, device="cuda", shapes=PATH_SHAPES, kv_dtypes=("bf16", "fp8"),
                      launcher=None):
    """Times DeepSeek-V3.2's sparse decode (each token over its indexer's
    2048 keys) through AttnplugDSABackend replayed from a CUDA graph of
    layers layers, as sglang runs it (sglang's DSA backend's metadata, the
    stand-in's, in the same graph), beside torch on the same top-k: the
    keys gathered (FP8 rows dequantised), bmm-softmax-bmm. Per layer, over
    a bf16 and an FP8 pool. Prints a table; returns its rows."""
    import torch
    from attnplug import Client
    from attnplug import sglang_dsa as sd
    from attnplug_testing import dsa
    from attnplug_testing import standins as st
    timed = _timer(torch, device)
    graph = str(device) != "cpu"
    out = []
    print("\nsparse decode (top-2048) through AttnplugDSABackend beside torch on the same top-k (us a layer)")
    print("%-10s %-26s %12s %10s %9s" % ("path", "shape", "attnplug us", "torch us", "vs torch"))
    for heads, b, s in shapes:
        for kv in kv_dtypes:
            client = Client(address, timeout=120)
            mr = dsa.dsa_runner(heads=heads, layers=1, context_len=s + 256, max_requests=max(b, 4),
                                max_tokens=max(b, 4) * (s + 256), device=device,
                                kv_dtype=torch.float8_e4m3fn if kv == "fp8" else None)
            kw = {"kernel_backend": "dsa", "client": client, "strict": True}
            if launcher is not None:
                kw["launcher"] = launcher(client)
            ours = sd.AttnplugDSABackend(mr, fallback=dsa.TorchDSABackend(mr), **kw)
            loop = dsa.DSALoop(mr, seed=5)
            loop.start([s - 8] * b)
            layer = loop.layers[0]
            qn, qr, kn, kr = loop.inputs(b)
            q = torch.cat([qn, qr], dim=-1).reshape(b, -1)
            fb = loop.decode_batch()
            ours.init_forward_metadata(fb)
            with st.forward_context(st.ForwardContext(ours)):
                topk = loop.indexers[0](qr[:, 0, 0], kn[:, 0, 0], fb, mr.token_to_kv_pool)
            ours.init_cuda_graph_state(b, b)
            runner = st.GraphRunner(ours, b, device=device, dry=not graph)
            runner.capture(lambda f: [ours.forward_decode(q, None, None, layer, f, save_kv_cache=False,
                                                          topk_indices=topk) for _ in range(layers)])
            runner.replay(fb)
            replay = runner.graph.replay if graph else (lambda f=fb: runner.replay(f))
            us = timed(replay, reps) / layers
            cache = mr.token_to_kv_pool.get_key_buffer(0)
            slots = topk.clamp(min=0).long()
            valid = (topk >= 0)[:, None, :]
            qh = q.view(b, heads, 576)

            def torch_layer():  # gather (and dequantise), bf16 matmuls, softmax in fp32
                rows = cache[slots].reshape(b, slots.shape[1], -1)
                k = dsa.dequantize_rows(rows).view(b, -1, 576).to(torch.bfloat16) if kv == "fp8" else rows
                sc = (torch.bmm(qh, k.transpose(1, 2)).float() * layer.scaling).masked_fill(~valid, float("-inf"))
                return torch.bmm(torch.softmax(sc, -1).to(torch.bfloat16), k[:, :, :512])

            if graph:
                torch_layer()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(4):
                        torch_layer()
                torch_us = timed(g.replay, reps) / 4
            else:
                torch_us = timed(torch_layer, reps)
            name = "sparse_%s_h%d_b%d_s%d" % (kv, heads, b, s)
            out.append({"name": name, "path": "sparse", "us": us, "torch_us": torch_us})
            print("%-10s %-26s %12.1f %10.1f %8.2fx" % ("sparse", name[7:], us, torch_us, torch_us / us))
            stats = ours.stats()
            assert stats["fallback_layers"] == 0 and stats["sparse_layers"] > 0, stats
            ours.close()
            client.close()
    return out


def class_graph_main(address, kernel_us, reps=20, layers=LAYERS):
    """Times a decode step of layers layers through AttnplugMLABackend
    captured in a CUDA graph as sglang's runner captures it (the 2026
    protocol: init_forward_metadata_out_graph, then in the graph
    init_forward_metadata_in_graph and each layer's forward_decode with
    DeepSeek's split q and k; save_kv_cache off, so that only the class's
    own device work is timed: the q concatenation, the plan's scheduler
    once a step, the decode and the combine), replayed, beside the same
    shape's kernel time (kernel_us). Prints a table; returns its rows."""
    import torch
    from attnplug import Client
    from attnplug import sglang_backend as sb
    from attnplug_testing import standins as st
    from attnplug_testing.torch_mla import TorchMLABackend
    out = []
    print("\n%d-layer decode steps through AttnplugMLABackend in a CUDA graph (median of %d replays)" % (layers, reps))
    print("%-16s %12s %13s %9s" % ("shape", "class us", "kernel us", "over us"))
    for heads, b, s in GPU_SHAPES:
        mr = st.ModelRunner.make(heads=heads, layers=1, page_size=64, context_len=2 * s, max_requests=b)
        client = Client(address, timeout=120)
        backend = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=client, fallback=TorchMLABackend(mr), strict=True)
        backend.init_cuda_graph_state(b, b)
        loop = st.DecodeLoop(mr, seed=2)
        loop.start([s - 1] * b)
        qn, qr, kn, kr = loop.inputs(b)
        qn = qn.transpose(0, 1).contiguous().transpose(0, 1)
        layer = loop.layers[0]

        def run(fb):
            return [backend.forward_decode(qn, kn, kn, layer, fb, save_kv_cache=False, q_rope=qr, k_rope=kr)
                    for _ in range(layers)]

        runner = st.GraphRunner(backend, b)
        runner.capture(run)
        fb = loop.decode_batch()
        runner.replay(fb)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(reps):
            start.record()
            runner.graph.replay()
            end.record()
            end.synchronize()
            ts.append(start.elapsed_time(end) * 1000 / layers)
        us = sorted(ts)[len(ts) // 2]
        name = "h%d_b%d_s%d" % (heads, b, s)
        k = kernel_us.get(name, 0.0)
        stats = backend.stats()
        assert stats["fallback_layers"] == 0, stats
        out.append({"name": name + "_class_graph", "class_layer_us": us, "layer_us": k, "over_us": us - k})
        print("%-16s %12.1f %13.1f %9.1f" % (name, us, k, us - k))
        backend.close()
        client.close()
    return out


#: The shapes of the eager measurement: batch 1 at 4096 cached, the
#: backend's eager target (its kernel time plus 25 us).
EAGER_SHAPES = ((16, 1, 4096), (128, 1, 4096))


def eager_main(address, kernel_us, reps=20, layers=8, passes=50):
    """Times an eager decode layer through AttnplugMLABackend: the call
    sglang's RadixAttention makes of it (forward_decode with DeepSeek's
    split q and k, the q nope a transpose, writing the new token's KV into
    the pool, on the plugin's plan; strict, so no layer runs the
    fallback), over stand-in pools, a pass of layers then a synchronize,
    next to the same shape's kernel time replayed in a graph (kernel_us, by
    name) and to the pool's write alone (the stand-in's set_mla_kv_buffer,
    sglang's part of the call, which every backend makes), the two timed
    in turn, a pass of each a round, so that the class's time (the layer's
    less the write's) is the median of each round's difference: on a host
    whose Python speed drifts, medians taken apart moved by 10-15 us. Prints
    a table; returns its rows."""
    import torch
    from attnplug import Client
    from attnplug import sglang_backend as sb
    from attnplug_testing import standins as st
    from attnplug_testing.torch_mla import TorchMLABackend
    out = []
    print("\neager decode layers through AttnplugMLABackend.forward_decode (%d layers a pass, %d passes, median of %d)"
          % (layers, passes, reps))
    print("%-16s %9s %13s %9s %14s %9s %17s" % ("shape", "eager us", "kernel us", "write us", "over kernel us",
                                                "class us", "class - kernel us"))

    def one(run):
        t0 = time.perf_counter_ns()
        for _ in range(passes):
            run()
        torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / 1000 / (passes * layers)

    def timed(run_a, run_b):
        """The medians of run_a's and run_b's time a layer, and of their
        difference, over reps rounds of one pass each."""
        for run in (run_a, run_b):
            run()
        torch.cuda.synchronize()
        a, b = [], []
        for _ in range(reps):
            a.append(one(run_a))
            b.append(one(run_b))
        med = lambda xs: sorted(xs)[len(xs) // 2]
        return med(a), med(b), med([x - y for x, y in zip(a, b)])

    for heads, b, s in EAGER_SHAPES:
        mr = st.ModelRunner.make(heads=heads, layers=layers, page_size=64, context_len=2 * s, max_requests=b)
        client = Client(address, timeout=120)
        backend = sb.AttnplugMLABackend(mr, kernel_backend="fa3", client=client, fallback=TorchMLABackend(mr), strict=True)
        loop = st.DecodeLoop(mr, seed=1)
        loop.start([s - 1] * b)
        fb = loop.decode_batch()
        backend.init_forward_metadata(fb)
        calls = []
        for layer in loop.layers:
            qn, qr, kn, kr = loop.inputs(b)
            calls.append((layer, qn.transpose(0, 1).contiguous().transpose(0, 1), qr, kn, kr))
        pool = mr.token_to_kv_pool

        def layers_pass():
            for layer, qn, qr, kn, kr in calls:
                backend.forward_decode(qn, kn, kn, layer, fb, q_rope=qr, k_rope=kr)

        def writes_pass():
            for layer, _, _, kn, kr in calls:
                pool.set_mla_kv_buffer(layer, fb.out_cache_loc, kn, kr)

        eager, write, ours = timed(layers_pass, writes_pass)
        name = "h%d_b%d_s%d" % (heads, b, s)
        k = kernel_us.get(name, 0.0)
        stats = backend.stats()
        assert stats["fallback_layers"] == 0, stats
        # The layer is host-bound at batch 1 (its kernel runs under the
        # next layer's host work), so the class's own host time is the
        # layer's less the write's (ours, the median of the rounds'
        # differences), and the goal (kernel + 25 us) is judged on it: the
        # write is sglang's, every backend's.
        out.append({"name": name + "_eager", "eager_layer_us": eager, "layer_us": k, "pool_write_us": write,
                    "host_us": eager - k, "class_us": ours, "class_over_kernel_us": ours - k})
        print("%-16s %9.1f %13.1f %9.1f %14.1f %9.1f %17.1f" % (name, eager, k, write, eager - k, ours, ours - k))
        backend.close()
        client.close()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnplug_testing.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--address", help="a running attnplug serve (default: start one from --attnplug)")
    p.add_argument("--attnplug", default=shutil.which("attnplug") or "bin/attnplug",
                   help="the attnplug binary to start serve from (default: attnplug on PATH, else bin/attnplug)")
    p.add_argument("--reference", help="sglang's attention_backend_handler.py (default: $ATTNPLUG_REFERENCE, "
                                       "../shared/reference, or the installed sglang's)")
    p.add_argument("--passes", type=int, default=400, help="61-layer passes per measurement (default 400)")
    p.add_argument("--repeat", type=int, default=5, help="measurements per row; the fastest counts (default 5)")
    p.add_argument("--gpu", action="store_true", help="time the plugin's MLA decode launched from Python on this GPU (needs torch)")
    args = p.parse_args(argv)
    if args.passes < 1 or args.repeat < 1:
        p.error("--passes and --repeat must be at least 1")
    if args.gpu:
        proc = tmp = None
        address = args.address
        if address is None:
            if not os.access(args.attnplug, os.X_OK):
                p.error("no attnplug binary at %s: give --address or --attnplug" % args.attnplug)
            proc, tmp, address = _start_server(args.attnplug)
        try:
            gpu_main(address)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(15)
                shutil.rmtree(tmp, ignore_errors=True)
        return 0
    ref = _reference(args.reference)
    if ref is None:
        p.error("no sglang handler code to compare with: give --reference or set $ATTNPLUG_REFERENCE")
    proc = tmp = None
    address = args.address
    if address is None:
        if not os.access(args.attnplug, os.X_OK):
            p.error("no attnplug binary at %s: give --address or --attnplug (make build makes bin/attnplug)" % args.attnplug)
        proc, tmp, address = _start_server(args.attnplug)
    try:
        module = testing.sglang_module(ref)
        sglang_get = module.AttentionBackendRegistry.get_handler  # sglang's own, bound before install
        reg = aps.install(address, module=module)
        ours_get = module.AttentionBackendRegistry.get_handler
        print("attnplug_testing.bench: sglang's %s vs attnplug.sglang via %s; %d layers, best of %d x %d passes"
              % (os.path.basename(ref), address, LAYERS, args.repeat, args.passes))
        print("%-12s %-11s %12s %12s %7s %13s" % ("backend", "batch", "sglang ns", "attnplug ns", "ratio", "RPCs/pass"))
        ratios, warm_rpcs = [], 0
        for label, backend, req in _workloads():
            _, attn, fb = testing.apply(req, module)
            attns = [testing.Attn(fused_qkv_a_proj_with_mqa=True) for _ in range(LAYERS)]
            for a in attns:  # warm-up pass, and the answers must agree
                if ours_get(backend)(a, fb).name != sglang_get(backend)(a, fb).name:
                    raise SystemExit("%s %s: attnplug and sglang disagree" % (backend, label))
            rpcs0 = reg.stats()["rpcs"]
            best_s = best_o = float("inf")
            for _ in range(args.repeat):
                best_s = min(best_s, _time_pass(sglang_get, backend, attns, fb, args.passes))
                best_o = min(best_o, _time_pass(ours_get, backend, attns, fb, args.passes))
            warm_rpcs += reg.stats()["rpcs"] - rpcs0
            rpcs = (reg.stats()["rpcs"] - rpcs0) / (args.repeat * args.passes)
            ratios.append(best_o / best_s)
            print("%-12s %-11s %12.0f %12.0f %6.2fx %13.3f" % (backend, label, best_s, best_o, best_o / best_s, rpcs))
        ratios.sort()
        print("median ratio %.2fx, worst %.2fx (target <= 2x); RPCs in all warm passes: %d (target 0)"
              % (ratios[len(ratios) // 2], ratios[-1], warm_rpcs))
        aps.uninstall(module)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
