package devicecheck

import (
	"context"
	"fmt"
	"io"
	"slices"
)

// QuantResult is one row of the sparse and FP8 benchmark. Bytes count the
// query rows, the cached keys the kernel must read at their stored size
// (for a sparse row only the slots the indices select, once per query
// token; 656 bytes for DeepSeek-V3.2's FP8 tokens, 576 for a dense FP8
// cache, 1152 in bf16) and the outputs; FLOPs count 2 x heads x (576 +
// 512) per (query token, key attended).
type QuantResult struct {
	Name   string  `json:"name"`
	Heads  int     `json:"heads"`
	Batch  int     `json:"batch"`
	Tokens int64   `json:"query_tokens"`
	TopK   int     `json:"top_k"`
	KV     string  `json:"kv_cache"`
	Cached string  `json:"cached"`
	Plan   string  `json:"plan"`
	US     float64 `json:"us"`
	Spread float64 `json:"spread"`
	Bytes  float64 `json:"bytes"`
	FLOPs  float64 `json:"flops"`
	TBs    float64 `json:"tb_s"`
	TFLOPs float64 `json:"tflop_s"`
	// OfCopy and OfMatmul are TBs and TFLOPs over the floors.
	OfCopy   float64 `json:"of_copy_bandwidth"`
	OfMatmul float64 `json:"of_matmul_peak"`
	// BF16US is the same shape over a bf16 cache (dense FP8 rows), VsBF16
	// BF16US over US.
	BF16US float64 `json:"bf16_us,omitempty"`
	VsBF16 float64 `json:"speedup_vs_bf16,omitempty"`
	Check  string  `json:"check"`
	Error  string  `json:"error,omitempty"`
}

// QuantShapes are the sparse and FP8 benchmark's shapes whose names contain
// only: DeepSeek-V3.2's sparse decode (top-2048 of 16k cached tokens, 16
// and 128 heads, batch 1 to 128, bf16 and FP8 caches), the dense decode
// over an FP8 cache (8k cached, timed against the bf16 cache too), and the
// sparse prefill (1k and 4k new tokens, 128 heads).
func QuantShapes(only string) []Quant {
	rep := func(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }
	var cs []Quant
	for _, fp8 := range []bool{false, true} {
		kv := "bf16"
		if fp8 {
			kv = "fp8"
		}
		for _, h := range []int{16, 128} {
			for _, b := range []int{1, 16, 64, 128} {
				cs = append(cs, Quant{Name: fmt.Sprintf("sparse %s h%d b%d", kv, h, b), Heads: h, PageSize: 64,
					SeqLens: rep(b, 16384), QLens: rep(b, 1), TopK: 2048, FP8: fp8, Seed: 21, Graph: true})
			}
		}
	}
	for _, c := range []struct{ h, b int }{{16, 16}, {16, 64}, {16, 128}, {128, 64}} {
		cs = append(cs, Quant{Name: fmt.Sprintf("fp8 decode h%d b%d", c.h, c.b), Heads: c.h, PageSize: 64,
			SeqLens: rep(c.b, 8192), QLens: rep(c.b, 1), FP8: true, Seed: 22, Graph: true})
	}
	for _, n := range []int64{1024, 4096} {
		cs = append(cs, Quant{Name: fmt.Sprintf("sparse prefill %dk", n/1024), Heads: 128, PageSize: 64,
			SeqLens: []int64{8192}, QLens: []int64{n}, TopK: 2048, Seed: 23})
	}
	return slices.DeleteFunc(cs, func(c Quant) bool { return !Only(c.Name, only) })
}

// benchQuant checks (8 sampled rows against the float64 reference) and
// times every sparse and FP8 shape of cfg in captured graphs, against the
// floors f: the sparse ones planned by cfg.Sparse, the dense FP8 ones by
// cfg.Dense, and timed over a bf16 cache too.
func (e *Env) benchQuant(ctx context.Context, cfg BenchConfig, f Floors) []QuantResult {
	out := make([]QuantResult, 0, len(cfg.Quant))
	for _, c := range cfg.Quant {
		backend := cfg.Dense
		if c.TopK > 0 {
			backend = cfg.Sparse
		}
		r := QuantResult{Name: c.Name, Heads: c.Heads, Batch: len(c.SeqLens), TopK: c.TopK, KV: "bf16",
			Cached: fmt.Sprintf("%d", slices.Max(c.SeqLens))}
		if c.FP8 {
			r.KV = "fp8_e4m3"
		}
		us, cost, err := e.timeQuant(ctx, backend, c, &r)
		if err == nil && c.FP8 && c.TopK == 0 {
			twin := c
			twin.FP8 = false
			var tr QuantResult
			if r.BF16US, _, err = e.timeQuant(ctx, backend, twin, &tr); err == nil && us > 0 {
				r.VsBF16 = r.BF16US / us
			}
		}
		if err != nil {
			r.Error = err.Error()
			out = append(out, r)
			continue
		}
		r.US, r.Bytes, r.FLOPs = us, cost.Bytes, cost.FLOPs
		for _, q := range c.QLens {
			r.Tokens += q
		}
		r.TBs, r.TFLOPs = r.Bytes/us/1e6, r.FLOPs/us/1e6
		if f.CopyTBs > 0 {
			r.OfCopy = r.TBs / f.CopyTBs
		}
		if f.MatmulTFLOPs > 0 {
			r.OfMatmul = r.TFLOPs / f.MatmulTFLOPs
		}
		out = append(out, r)
	}
	return out
}

// timeQuant checks c (two cache copies, as layers) planned by backend and
// times it; it fills r's plan, spread and check.
func (e *Env) timeQuant(ctx context.Context, backend string, c Quant, r *QuantResult) (float64, Cost, error) {
	run, err := e.Run(ctx, backend, c, 2, 8)
	if run != nil {
		defer run.Close()
		r.Plan, r.Check = run.Prepared.Plan().Note, run.Check.String()
	}
	if err != nil {
		return 0, Cost{}, err
	}
	t, err := run.Time(20, 7)
	if err != nil {
		return 0, Cost{}, err
	}
	r.Spread = t.Spread
	return t.Median, run.Batch.Cost(), nil
}

// writeQuant writes the sparse and FP8 rows of rep for people.
func (rep *Report) writeQuant(w io.Writer) {
	if len(rep.Quant) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsparse MLA (top-k) and FP8 caches (576/512, page 64; bytes: the keys attended at their stored size)\n")
	fmt.Fprintf(w, "%-24s %5s %5s %6s %-9s %9s %7s %8s %7s %8s %9s %8s\n", "shape", "heads", "batch", "top_k", "cache", "us", "TB/s", "TFLOP/s", "%copy", "%matmul", "bf16 us", "vs bf16")
	for _, r := range rep.Quant {
		if r.Error != "" {
			fmt.Fprintf(w, "%-24s %5d %5d %6d %-9s  not reported: %s\n", r.Name, r.Heads, r.Batch, r.TopK, r.KV, r.Error)
			continue
		}
		twin := fmt.Sprintf("%9s %8s", "-", "-")
		if r.BF16US > 0 {
			twin = fmt.Sprintf("%9.1f %7.2fx", r.BF16US, r.VsBF16)
		}
		fmt.Fprintf(w, "%-24s %5d %5d %6d %-9s %9.1f %7.2f %8.1f %6.0f%% %7.0f%% %s\n", r.Name, r.Heads, r.Batch, r.TopK, r.KV,
			r.US, r.TBs, r.TFLOPs, 100*r.OfCopy, 100*r.OfMatmul, twin)
	}
}
