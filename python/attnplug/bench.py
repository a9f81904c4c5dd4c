"""python -m attnplug.bench --gpu: each DeepSeek path's plan, as
attnplug.sglang_backend asks attnplug serve for it (a step:
Client.plan_step), launched on this GPU from Python (attnplug.device) and
timed beside torch on the same tensors.

The paths, for DeepSeek-V3's dims on a rank of --heads heads, a batch of
--batch requests of --cached keys each, pages of 64:

- decode (one query token a request) and verify (4 draft tokens): the MLA
  plan of a graph step, its scheduler and a layer per replay; a draft
  model's steps run the decode plan;
- extend: absorbed MLA of 130 new tokens a request over the cache;
- fp8: the decode over an fp8_e4m3 pool with the layer's scale;
- sparse: DeepSeek-V3.2's sparse decode (the dsa plugin), each token over
  2048 of its request's keys;
- prefill: MHA_ONE_SHOT, 4 requests of 1024 new tokens (192/128 head dims);
- chunked_prefix: one prefix chunk of MHA_CHUNKED_KV, 256 new tokens a
  request over 2048 keys of its prefix, no mask, with the LSE.

Each is replayed from a CUDA graph of 8 launches and timed by CUDA
events (the median of --reps replays, per launch); torch's column is the
same attention on the same tensors as a user would write it (the keys
gathered, FP8 rows dequantised, bf16 matmuls and softmax in float32;
torch's scaled_dot_product_attention for the prefills), in a CUDA graph
too. Where sglang is importable, the decode row also times sglang's own
MLA decode kernel, its triton backend's ``decode_attention_fwd``, on the
same pool and queries (the pages as its per-token slots, its default of 8
KV splits), in a CUDA graph: the sglang column. Outputs are compared with
torch's (relative error), so that a row times a plan that computes the
right thing. --json prints the rows as
JSON. It needs torch with CUDA and a running ``attnplug serve``
(--address, default $ATTNPLUG_ADDRESS, else serve's socket) whose
plugins serve --backend (default fa3) and dsa.
"""

import argparse
import json
import math
import sys

__all__ = ["main", "run"]

SCALE = 0.1352337788608801  # DeepSeek-V3's softmax scale (yarn's mscale at 192 dims)
PAGE = 64
LAUNCHES = 8  # launches a graph replay times
TOPK = 2048


class _Case:
    """One path's step, its tensors and torch's version of it."""

    def __init__(self, name, step, shape):
        self.name, self.step, self.shape = name, step, shape
        self.tensors = {}
        self.torch = None  # () -> torch's output, from the same tensors
        self.out = "out"
        self.sglang = None  # (run, its output): sglang's own kernel on the same tensors
        self.sglang_why = ""  # why there is none, for a row that would have it


def _model(heads, topk=0):
    return {"heads": heads, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128, "softmax_scale": SCALE, "index_topk": topk}


def _pool(pages, kv="bf16"):
    return {"page_size": PAGE, "slots": pages * PAGE, "max_tokens": pages * PAGE, "row_width": 163844,
            "context_len": 163840, "kv_dtype": kv}


def _mla_cases(torch, heads, bs, cached, dev):
    """decode, verify, extend and fp8: the paged pool, each request's pages
    shuffled, the page table, lengths and query offsets as the backend
    builds them."""
    per = -(-(cached + 256) // PAGE)
    pages = bs * per + 1
    cases = []
    for name, q, kv in (("decode", 1, "bf16"), ("verify", 4, "bf16"), ("extend", 130, "bf16"), ("fp8", 1, "fp8_e4m3")):
        mode = {"decode": "DECODE", "verify": "TARGET_VERIFY", "extend": "EXTEND", "fp8": "DECODE"}[name]
        batch = {"size": bs, "graph": True}
        if name == "extend":
            batch["q_lens"] = [q] * bs
        else:
            batch["query_tokens"] = q
        c = _Case(name, {"mode": mode, "method": "MLA", "model": _model(heads), "pool": _pool(pages, kv),
                         "batch": batch}, "h%d_b%d_s%d" % (heads, bs, cached))
        c.q, c.kv = q, kv
        cases.append(c)
    return cases, pages, per


def _bind_mla(torch, c, prepared, pages, per, cached, dev):
    bs = c.step["batch"]["size"]
    heads = c.step["model"]["heads"]
    q = c.q
    tokens = bs * q
    room = int(prepared.pages_per_request)
    lens = [cached + q] * bs
    table = torch.zeros(bs, room, dtype=torch.int32, device=dev)
    order = torch.randperm(pages - 1, device=dev).to(torch.int32) + 1
    table[:, :per] = order[:bs * per].view(bs, per)
    kv = torch.randn(pages, PAGE, 576, device=dev) * 0.5
    t = {"kv_indptr": torch.arange(0, (bs + 1) * room, room, dtype=torch.int32, device=dev),
         "kv_indices": table.view(-1).contiguous(),
         "seq_lens": torch.tensor(lens, dtype=torch.int32, device=dev),
         "qo_indptr": torch.arange(0, (bs + 1) * q, q, dtype=torch.int32, device=dev),
         "q": (torch.randn(tokens, heads, 576, device=dev) * 0.1).to(torch.bfloat16),
         "out": torch.empty(tokens, heads, 512, dtype=torch.bfloat16, device=dev),
         "lse": torch.empty(tokens, heads, dtype=torch.float32, device=dev)}
    if c.kv == "fp8_e4m3":
        t["kv_cache"] = kv.to(torch.float8_e4m3fn)
        t["kv_scale"] = torch.full((1,), 0.5, dtype=torch.float32, device=dev)
    else:
        t["kv_cache"] = kv.to(torch.bfloat16)
    c.tensors = t
    rows = (table[:, :per].long()[:, :, None] * PAGE + torch.arange(PAGE, device=dev)).view(bs, -1)[:, :lens[0]]
    if c.name == "decode":
        c.sglang, c.sglang_why = _sglang_decode(torch, t, rows, heads)
    causal = torch.arange(lens[0], device=dev)[None, :] <= (lens[0] - q + torch.arange(q, device=dev))[:, None]
    mask = causal.repeat_interleave(heads, 0)[None]  # [1, q*heads, keys]: rows token-major

    def torch_layer():
        if c.kv == "fp8_e4m3":  # (gathered as bytes, then dequantised)
            k = t["kv_cache"].view(torch.uint8).view(-1, 576)[rows].view(torch.float8_e4m3fn)
            k = (k.to(torch.float32) * t["kv_scale"]).to(torch.bfloat16)
        else:
            k = t["kv_cache"].view(-1, 576)[rows]
        qq = t["q"].view(bs, q * heads, 576)
        s = torch.bmm(qq, k.transpose(1, 2)).float() * SCALE
        s = s.masked_fill(~mask, float("-inf"))
        return torch.bmm(torch.softmax(s, -1).to(torch.bfloat16), k[:, :, :512]).view(tokens, heads, 512)
    c.torch = torch_layer


#: sglang's own MLA decode kernel: its triton backend's, called as that
#: backend calls it, followed at sgl-project/sglang
#: python/sglang/srt/layers/attention/triton_ops/decode_attention.py
#: 03cd2ec4af85b66be8ef025238bc73c165416bdb.
SGLANG_DECODE = "sglang.srt.layers.attention.triton_ops.decode_attention"
SGLANG_KV_SPLITS = 8  # sglang's --triton-attention-num-kv-splits default


def _sglang_decode(torch, t, rows, heads):
    """sglang's own decode kernel over the decode row's tensors t (rows: each
    request's token slots), or (None, why) where sglang is not importable
    or its kernel takes arguments this bench does not know."""
    import importlib
    import inspect
    try:
        fwd = importlib.import_module(SGLANG_DECODE).decode_attention_fwd
    except Exception as exc:  # sglang absent, or broken here
        return None, "sglang's decode kernel is not importable (%s)" % type(exc).__name__
    bs, keys = rows.shape
    dev = t["q"].device
    k = t["kv_cache"].view(-1, 1, 576)
    args = {"q": t["q"].view(bs, heads, 576), "k_buffer": k, "v_buffer": k[..., :512],
            "o": torch.empty(bs, heads, 512, dtype=torch.bfloat16, device=dev),
            "kv_indptr": torch.arange(0, (bs + 1) * keys, keys, dtype=torch.int32, device=dev),
            "kv_indices": rows.reshape(-1).to(torch.int32).contiguous(),
            "attn_logits": torch.empty(bs, heads, SGLANG_KV_SPLITS, 512, dtype=torch.float32, device=dev),
            "attn_lse": torch.empty(bs, heads, SGLANG_KV_SPLITS, dtype=torch.float32, device=dev),
            "num_kv_splits": torch.full((bs,), SGLANG_KV_SPLITS, dtype=torch.int32, device=dev),
            "max_kv_splits": SGLANG_KV_SPLITS, "sm_scale": SCALE, "k_scale": 1.0, "v_scale": 1.0}
    try:
        params = inspect.signature(fwd).parameters.values()
    except (TypeError, ValueError):
        return None, "sglang's decode_attention_fwd has no signature to read"
    unknown = [p.name for p in params if p.default is p.empty and p.name not in args
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if unknown:
        return None, "sglang's decode_attention_fwd takes %s, which this bench does not know" % ", ".join(unknown)
    takes = {p.name for p in params}
    call = {n: v for n, v in args.items() if n in takes}
    return (lambda: fwd(**call), args["o"]), None


def _sparse_case(torch, heads, bs, cached, dev):
    pages = bs * -(-cached // PAGE) + 1
    c = _Case("sparse", {"mode": "DECODE", "method": "MLA", "model": _model(heads, TOPK), "pool": _pool(pages),
                         "batch": {"size": bs, "graph": True, "query_tokens": 1}}, "h%d_b%d_s%d" % (heads, bs, cached))
    c.backend, c.pages = "dsa", pages
    return c


def _bind_sparse(torch, c, bs, cached, dev):
    heads = c.step["model"]["heads"]
    per = -(-cached // PAGE)
    slots = (torch.arange(bs, device=dev)[:, None] * per * PAGE + PAGE
             + torch.stack([torch.randperm(cached, device=dev)[:TOPK] for _ in range(bs)]))
    t = {"q": (torch.randn(bs, heads, 576, device=dev) * 0.1).to(torch.bfloat16),
         "kv_cache": (torch.randn(c.pages, PAGE, 576, device=dev) * 0.5).to(torch.bfloat16),
         "topk_indices": slots.to(torch.int32).contiguous(),
         "out": torch.empty(bs, heads, 512, dtype=torch.bfloat16, device=dev),
         "lse": torch.empty(bs, heads, dtype=torch.float32, device=dev)}
    c.tensors = t

    def torch_layer():
        k = t["kv_cache"].view(-1, 576)[t["topk_indices"].long()]
        s = torch.bmm(t["q"], k.transpose(1, 2)).float() * SCALE
        return torch.bmm(torch.softmax(s, -1).to(torch.bfloat16), k[:, :, :512])
    c.torch = torch_layer


def _prefill_cases(heads):
    one = _Case("prefill", {"mode": "EXTEND", "method": "MHA_ONE_SHOT", "model": _model(heads), "pool": _pool(1),
                            "batch": {"size": 4, "seq_lens": [1024] * 4, "q_lens": [1024] * 4}},
                "h%d_4x1024" % heads)
    chunk = _Case("chunked_prefix", {"mode": "EXTEND", "method": "MHA_CHUNKED_KV", "model": _model(heads),
                                     "pool": _pool(1), "batch": {"size": 4, "seq_lens": [2048] * 4, "q_lens": [256] * 4,
                                                                 "prefix_chunk": True}},
                  "h%d_4x256_over_2048" % heads)
    return [one, chunk]


def _bind_prefill(torch, c, dev):
    b = c.step["batch"]
    heads = c.step["model"]["heads"]
    n, m = b["seq_lens"][0], b["q_lens"][0]
    r = len(b["seq_lens"])
    t = {"q": (torch.randn(r * m, heads, 192, device=dev) * 0.3).to(torch.bfloat16),
         "k": (torch.randn(r * n, heads, 192, device=dev) * 0.3).to(torch.bfloat16),
         "v": torch.randn(r * n, heads, 128, device=dev).to(torch.bfloat16),
         "out": torch.empty(r * m, heads, 128, dtype=torch.bfloat16, device=dev),
         "lse": torch.empty(r * m, heads, dtype=torch.float32, device=dev)}
    c.tensors = t
    causal = not b.get("prefix_chunk")
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_layer():
        q = t["q"].view(r, m, heads, 192).transpose(1, 2)
        k = t["k"].view(r, n, heads, 192).transpose(1, 2)
        v = t["v"].view(r, n, heads, 128).transpose(1, 2)
        # (the queries of a causal pass are the last m of the n keys')
        mask = None
        if causal and m != n:
            mask = torch.arange(n, device=dev)[None, :] <= (n - m + torch.arange(m, device=dev))[:, None]
        o = sdpa(q, k, v, attn_mask=mask, is_causal=causal and m == n, scale=SCALE)
        return o.transpose(1, 2).reshape(r * m, heads, 128)
    c.torch = torch_layer


def _graph(torch, body):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g


def _timed(torch, g, n, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    ts = []
    for _ in range(reps):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end) * 1000 / n)
    return sorted(ts)[len(ts) // 2]


def _cases(torch, heads, bs, cached, dev):
    mla, pages, per = _mla_cases(torch, heads, bs, cached, dev)
    out = [(c, lambda c, p: _bind_mla(torch, c, p, pages, per, cached, dev)) for c in mla]
    sparse = _sparse_case(torch, heads, bs, cached, dev)
    out.append((sparse, lambda c, p: _bind_sparse(torch, c, bs, cached, dev)))
    out += [(c, lambda c, p: _bind_prefill(torch, c, dev)) for c in _prefill_cases(heads)]
    return out


def run(client, backend="fa3", heads=(16, 128), batch=16, cached=4096, reps=20, out=sys.stdout):
    """Times every path for each of heads; returns the rows (dicts: path,
    shape, plan, us, torch_us, rel_err; sglang_us and sglang_rel_err on the
    decode rows where sglang is importable)."""
    import torch
    from attnplug.device import Launcher
    if not torch.cuda.is_available():
        raise RuntimeError("attnplug.bench --gpu needs torch with a CUDA GPU")
    dev = torch.device("cuda", torch.cuda.current_device())
    launchers = {}
    rows = []
    print("attnplug.bench --gpu: each path's plan through attnplug.device on %s, beside torch on the same tensors "
          "(us a launch)" % torch.cuda.get_device_name(), file=out)
    print("%-15s %-22s %12s %10s %9s %9s %10s %10s" % ("path", "shape", "attnplug us", "torch us", "vs torch", "rel err",
                                                       "sglang us", "vs sglang"), file=out)
    why, sglang_failed = "", None
    for h in heads:
        for c, bind in _cases(torch, h, batch, cached, dev):
            name = getattr(c, "backend", backend)
            lch = launchers.get(name)
            if lch is None:
                lch = launchers[name] = Launcher(client, name, dev.index)
            torch.manual_seed(0)
            prepared = lch.step(c.step)
            bind(c, prepared)
            t = c.tensors
            if prepared.tensors_read("batch"):
                def step(p=prepared, t=t):
                    p.launch_batch(t)
                    for _ in range(LAUNCHES):
                        p.launch_layer(t)
            else:
                def step(p=prepared, t=t):
                    for _ in range(LAUNCHES):
                        p.launch(t)
            t[c.out].fill_(float("nan"))
            us = _timed(torch, _graph(torch, step), LAUNCHES, reps)
            want = c.torch()
            torch.cuda.synchronize()
            got = t[c.out].double().reshape(want.shape)
            err = (torch.linalg.norm(got - want.double()) / torch.linalg.norm(want.double())).item()
            torch_us = _timed(torch, _graph(torch, lambda: [c.torch() for _ in range(2)]), 2, reps)
            row = {"path": c.name, "shape": c.shape, "backend": name, "plan": prepared.plan.note, "us": us,
                   "torch_us": torch_us, "rel_err": err}
            sg, failed = "", None
            if c.sglang is not None and not sglang_failed:
                try:
                    row["sglang_us"], row["sglang_rel_err"] = _time_sglang(torch, c.sglang, want, reps)
                    sg = " %10.1f %9.2fx" % (row["sglang_us"], row["sglang_us"] / us)
                except Exception as exc:  # sglang's kernel, not this bench's: reported, not fatal
                    failed = sglang_failed = "%s: %s" % (type(exc).__name__, exc)
            why = why or c.sglang_why
            rows.append(row)
            print("%-15s %-22s %12.1f %10.1f %8.2fx %9.2e%s" % (c.name, c.shape, us, torch_us, torch_us / us, err, sg),
                  file=out)
            if not math.isfinite(err) or err > 2e-2:
                print("  %s %s: attnplug and torch disagree (relative error %.2e)" % (c.name, c.shape, err), file=out)
            if "sglang_rel_err" in row and not row["sglang_rel_err"] <= 2e-2:
                print("  %s %s: sglang's kernel and torch disagree (relative error %.2e)" % (c.name, c.shape,
                                                                                        row["sglang_rel_err"]), file=out)
            if failed:
                print("  %s %s: sglang's decode_attention_fwd failed (%s); no sglang column from here on"
                      % (c.name, c.shape, failed), file=out)
            c.tensors, c.sglang = {}, None
            torch.cuda.empty_cache()
    for lch in launchers.values():
        lch.close()
    if why and not any("sglang_us" in r for r in rows):
        print("(no sglang column: %s)" % why, file=out)
    return rows


def _time_sglang(torch, sglang, want, reps):
    """sglang's kernel timed as the rows are (a graph of LAUNCHES launches),
    and its output's relative error against torch's."""
    run, o = sglang
    o.fill_(float("nan"))
    us = _timed(torch, _graph(torch, lambda: [run() for _ in range(LAUNCHES)]), LAUNCHES, reps)
    got = o.double().reshape(want.shape)
    return us, (torch.linalg.norm(got - want.double()) / torch.linalg.norm(want.double())).item()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnplug.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", action="store_true", help="time each path's plan on this CUDA GPU (required)")
    p.add_argument("--address", help="attnplug serve's address (default $ATTNPLUG_ADDRESS, else serve's socket)")
    p.add_argument("--backend", default="fa3", help="the name whose plugin runs the dense paths (default fa3)")
    p.add_argument("--heads", default="16,128", help="query heads on a rank, comma-separated (default 16,128)")
    p.add_argument("--batch", type=int, default=16, help="requests of the decode paths (default 16)")
    p.add_argument("--cached", type=int, default=4096, help="keys a request holds (default 4096)")
    p.add_argument("--reps", type=int, default=20, help="graph replays a row; the median counts (default 20)")
    p.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    args = p.parse_args(argv)
    if not args.gpu:
        p.error("--gpu is required: the bench times the plugins' plans on a CUDA GPU")
    try:
        heads = tuple(int(x) for x in args.heads.split(","))
    except ValueError:
        p.error("--heads %r: want integers separated by commas" % args.heads)
    for flag, v, lo, hi in (("--heads", min(heads), 1, 128), ("--heads", max(heads), 1, 128),
                            ("--batch", args.batch, 1, 256), ("--cached", args.cached, TOPK, 65536),
                            ("--reps", args.reps, 1, 10000)):
        if not lo <= v <= hi:
            p.error("%s %d: want [%d, %d]" % (flag, v, lo, hi))
    from attnplug.client import Client
    client = Client(args.address, timeout=120)
    try:
        rows = run(client, args.backend, heads, args.batch, args.cached, args.reps,
                   out=sys.stderr if args.json else sys.stdout)
    except RuntimeError as exc:
        print("attnplug.bench: %s" % exc, file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.json:
        json.dump({"rows": rows}, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
