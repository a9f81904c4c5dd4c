package devicehost

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Goal is one of the benchmark's targets (the kernels' issues: Hopper's
// data path, the sparse and FP8 kernels) judged on one run: every row the
// target covers against its goal, as measured against the same run's
// floors and torch.
type Goal struct {
	// Target says what is asked, for people.
	Target string `json:"target"`
	// Metric is the JSON field of the rows that is judged:
	// of_copy_bandwidth, of_matmul_peak, us, speedup_vs_torch or
	// speedup_vs_bf16.
	Metric string `json:"metric"`
	// Goal is the value every row must reach: at least it, or with AtMost
	// (times) at most it.
	Goal   float64 `json:"goal"`
	AtMost bool    `json:"at_most,omitempty"`
	// Rows are the rows judged, Min and Max their measured range, and
	// Worst the row farthest from the goal.
	Rows  []string `json:"rows"`
	Min   float64  `json:"min"`
	Max   float64  `json:"max"`
	Worst string   `json:"worst_row,omitempty"`
	// Met is whether every row reached the goal (and none is missing).
	Met bool `json:"met"`
	// ShortBy is how far the worst row is from the goal, as a fraction of
	// the goal: 0.04 is 4% short. 0 when met.
	ShortBy float64 `json:"short_by,omitempty"`
	// Missing are rows the target covers that report no figure: failed,
	// or no torch in the run.
	Missing []string `json:"missing,omitempty"`
	// LimitedBy is, for a target missed, what the profiles of the kernels
	// that run its rows say limits them, and which report under docs/bench
	// shows it: the last word of the people who measured, kept with the
	// targets.
	LimitedBy string `json:"limited_by,omitempty"`
}

// goalRow is one row's figure under a target's metric; ok is false when
// the row reports none.
type goalRow struct {
	name  string
	value float64
	ok    bool
}

// target is a Goal before it is judged: its rows are picked from a report;
// limit is what limits them (Goal.LimitedBy).
type target struct {
	text, metric string
	goal         float64
	atMost       bool
	rows         func(rep *Report, metric string) []goalRow
	limit        string
}

// What the profiles of the kernels say limits each target (the reports of
// docs/bench, listed in docs/bench/README.md).
const (
	limitDecode16 = "at short steps a layer's fixed cost: the decode's chain of dependent trips before its first tile " +
		"and after its last products, the fp32 partial outputs and the combine (timed by parts: 8-10 us of 28 at batch 16 " +
		"with 4096 cached keys; docs/bench/h200-2026-12-04-combine-rows.md)"
	limitDecode128 = "the 64-row body's serial chain: ncu (batch 132 x 4096) 33% of DRAM and 38-39% of SM throughput, " +
		"25% of the warps' samples waiting for wgmma results and 11% issuing them, 22% integer address arithmetic, " +
		"11% issuing cp.async; by ablation the softmax and the hand-offs of a tile add to its products instead of " +
		"running under them (docs/bench/h200-2026-12-03-wgmma.md, docs/bench/h200-2026-12-04-seesaw.md)"
	limitBatch1 = "chains of dependent trips, not bytes: timed by parts, the decode alone 6.2 us at 16 heads (1.1 us of " +
		"bytes at the copy rate) and 12.8 us at 128, the combine 3.2 and 5.2 us (0.7 us a launch); each item writes " +
		"32 KB (16 heads) or 128 KB (128 heads) of fp32 partial output that the combine reads back, and more or fewer " +
		"items measured slower (docs/bench/h200-2026-12-04-combine-rows.md)"
	limitPrefill  = "the tail of a grid of short causal blocks of uneven length (docs/bench/h200-2026-12-04-prefill.md)"
	limitSparse16 = "at batch 16 (16 tokens x 2048 keys) a layer's fixed cost, as the dense decode's at batch 16; batches " +
		"of 64 and more reach 76-94% of copy with the copies at eight threads a row (docs/bench/h200-2026-12-04-loaders.md)"
	limitSparseFP816 = "not profiled since DeepSeek-V3.2's rows moved into the loader's registers; by design the dense " +
		"FP8 body's limit, the conversion beside one consumer warpgroup's products (docs/bench/h200-2026-12-04-fp8-registers.md)"
	limitSparse128 = "the 64-row body's serial chain, as the dense 128-head decode's, over gathered rows " +
		"(docs/bench/h200-2026-12-04-seesaw.md)"
	limitDenseFP8 = "the consumer's products: by ablation a tile takes 2.63 us whole, 1.68 without the conversion and " +
		"1.43 without the products, so one consumer warpgroup allows 1.41x the bf16 cache; a second would need a third " +
		"f16 tile, 234 KB of shared memory against 227 (docs/bench/h200-2026-12-04-fp8-registers.md)"
	limitSparsePrefill = "the 64-row decode body it runs on, over gathered rows (docs/device.md, \"Sparse MLA\")"
)

// decodeRows are the decode rows that pick accepts, under the target's
// metric.
func decodeRows(pick func(BenchResult) bool) func(*Report, string) []goalRow {
	return func(rep *Report, metric string) []goalRow {
		var out []goalRow
		for _, r := range rep.Decode {
			if !pick(r) {
				continue
			}
			v := map[string]float64{"of_copy_bandwidth": r.OfCopy, "of_matmul_peak": r.OfMatmul, "us": r.US}[metric]
			out = append(out, goalRow{r.Name, v, r.Error == "" && v > 0})
		}
		return out
	}
}

// prefillRows are the prefill rows named in names, by their speed-up over
// torch's SDPA.
func prefillRows(names ...string) func(*Report, string) []goalRow {
	return func(rep *Report, _ string) []goalRow {
		var out []goalRow
		for _, r := range rep.Prefill {
			for _, n := range names {
				if r.Name == n {
					out = append(out, goalRow{r.Name, r.VsTorch, r.Error == "" && r.VsTorch > 0})
				}
			}
		}
		return out
	}
}

// quantRows are the sparse and FP8 rows whose names start with prefix and
// whose batch is at least minBatch, under the target's metric.
func quantRows(prefix string, minBatch int) func(*Report, string) []goalRow {
	return func(rep *Report, metric string) []goalRow {
		var out []goalRow
		for _, r := range rep.Quant {
			if !strings.HasPrefix(r.Name, prefix) || r.Batch < minBatch {
				continue
			}
			v := map[string]float64{"of_copy_bandwidth": r.OfCopy, "of_matmul_peak": r.OfMatmul, "speedup_vs_bf16": r.VsBF16}[metric]
			out = append(out, goalRow{r.Name, v, r.Error == "" && v > 0})
		}
		return out
	}
}

// targets are the benchmark's targets, in the order of the issues' tables.
func targets() []target {
	named := func(name string) func(BenchResult) bool {
		return func(r BenchResult) bool { return r.Name == name }
	}
	return []target{
		{"MLA decode, 16 heads, batch >= 16: >= 85% of the copy bandwidth", "of_copy_bandwidth", 0.85, false,
			decodeRows(func(r BenchResult) bool { return r.Heads == 16 && r.Batch >= 16 }), limitDecode16},
		{"MLA decode, 128 heads, batch >= 16: >= 55% of the bf16 matmul peak", "of_matmul_peak", 0.55, false,
			decodeRows(func(r BenchResult) bool { return r.Heads == 128 && r.Batch >= 16 }), limitDecode128},
		{"MLA decode, batch 1, 4096 cached, 16 heads: <= 7 us", "us", 7, true, decodeRows(named("h16_b1_s4096")), limitBatch1},
		{"MLA decode, batch 1, 4096 cached, 128 heads: <= 12 us", "us", 12, true, decodeRows(named("h128_b1_s4096")), limitBatch1},
		{"prefill, 128 heads, 4k-16k tokens: >= 1.0x torch SDPA", "speedup_vs_torch", 1, false,
			prefillRows("h128_prefill_4k", "h128_prefill_8k", "h128_prefill_16k"), limitPrefill},
		{"prefill, 16 heads, 1k tokens: >= 1.0x torch SDPA", "speedup_vs_torch", 1, false, prefillRows("h16_prefill_1k"), limitPrefill},
		{"sparse decode (bf16 cache), 16 heads, batch >= 16: >= 70% of the copy bandwidth", "of_copy_bandwidth", 0.70, false,
			quantRows("sparse bf16 h16 ", 16), limitSparse16},
		{"sparse decode (FP8 cache), 16 heads, batch >= 16: >= 70% of the copy bandwidth", "of_copy_bandwidth", 0.70, false,
			quantRows("sparse fp8 h16 ", 16), limitSparseFP816},
		{"sparse decode (bf16 cache), 128 heads, batch >= 16: >= 40% of the bf16 matmul peak", "of_matmul_peak", 0.40, false,
			quantRows("sparse bf16 h128 ", 16), limitSparse128},
		{"sparse decode (FP8 cache), 128 heads, batch >= 16: >= 40% of the bf16 matmul peak", "of_matmul_peak", 0.40, false,
			quantRows("sparse fp8 h128 ", 16), limitSparse128},
		{"dense decode over an FP8 cache, 16 heads, batch >= 16: >= 1.6x the bf16 cache", "speedup_vs_bf16", 1.6, false,
			quantRows("fp8 decode h16 ", 16), limitDenseFP8},
		{"sparse prefill, 128 heads: >= 40% of the bf16 matmul peak", "of_matmul_peak", 0.40, false,
			quantRows("sparse prefill ", 0), limitSparsePrefill},
	}
}

// Judge judges rep's rows against the benchmark's targets. A target none
// of whose rows the run has (a run of some shapes only) is left out.
func Judge(rep *Report) []Goal {
	var out []Goal
	for _, t := range targets() {
		rows := t.rows(rep, t.metric)
		if len(rows) == 0 {
			continue
		}
		g := Goal{Target: t.text, Metric: t.metric, Goal: t.goal, AtMost: t.atMost, Met: true, Min: math.Inf(1), Max: math.Inf(-1)}
		// short is a row's shortfall as a fraction of the goal (<= 0: met).
		short := func(v float64) float64 {
			if t.atMost {
				return v/t.goal - 1
			}
			return 1 - v/t.goal
		}
		worst := math.Inf(-1)
		for _, r := range rows {
			g.Rows = append(g.Rows, r.name)
			if !r.ok {
				g.Missing = append(g.Missing, r.name)
				g.Met = false
				continue
			}
			g.Min, g.Max = math.Min(g.Min, r.value), math.Max(g.Max, r.value)
			if s := short(r.value); s > worst {
				worst, g.Worst = s, r.name
			}
		}
		if len(g.Missing) == len(rows) {
			g.Min, g.Max = 0, 0
		}
		if worst > 0 {
			g.Met, g.ShortBy, g.LimitedBy = false, worst, t.limit
		}
		out = append(out, g)
	}
	return out
}

// writeGoals writes rep's judged targets for people.
func (rep *Report) writeGoals(w io.Writer) {
	if len(rep.Goals) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTargets (every row of each, against this run's floors and torch)\n")
	for _, g := range rep.Goals {
		verdict := "met"
		switch {
		case len(g.Missing) > 0:
			verdict = fmt.Sprintf("not judged: no figure for %s", strings.Join(g.Missing, ", "))
		case !g.Met:
			verdict = fmt.Sprintf("missed by %.0f%% (worst: %s)", 100*g.ShortBy, g.Worst)
		}
		fmt.Fprintf(w, "  %-86s %s .. %s: %s\n", g.Target, formatMetric(g.Metric, g.Min), formatMetric(g.Metric, g.Max), verdict)
		if g.LimitedBy != "" {
			fmt.Fprintf(w, "    limited by %s\n", g.LimitedBy)
		}
	}
}

// formatMetric writes v as its metric reads.
func formatMetric(metric string, v float64) string {
	switch metric {
	case "us":
		return fmt.Sprintf("%.1f us", v)
	case "speedup_vs_torch", "speedup_vs_bf16":
		return fmt.Sprintf("%.2fx", v)
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
