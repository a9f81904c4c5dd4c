package gpucheck

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/cuda"
)

// runQuant allocates, plans, poisons, launches and verifies one case.
func runQuant(t *testing.T, e *Env, c QuantCase, rows int) Check {
	t.Helper()
	b, err := e.AllocQuant(c, 1)
	if err != nil {
		t.Fatalf("%s: alloc: %v", c.Describe(), err)
	}
	defer b.Free(e)
	p, err := e.PrepareQuant(b)
	if err != nil {
		t.Fatalf("%s: prepare: %v", c.Describe(), err)
	}
	defer p.Close()
	err = e.Dev.Do(func(x *cuda.Ctx) error {
		if err := b.PoisonQuant(x); err != nil {
			return err
		}
		ts, err := b.Tensors(p.Tensors(), 0)
		if err != nil {
			return err
		}
		return p.Launch(x, e.Stream(), ts)
	})
	if err != nil {
		t.Fatalf("%s: launch: %v", c.Describe(), err)
	}
	ch, err := e.VerifyQuant(b, 0, rows)
	if err != nil {
		t.Fatalf("%s: verify: %v", c.Describe(), err)
	}
	if !ch.OK() {
		t.Errorf("%s (%s): %v (tolerance rel %.0e, lse %.0e)", c.Describe(), p.Plan().Note, ch, MaxRelErr, MaxLSEErr)
	}
	return ch
}

// TestSparseAndFP8 checks the sparse MLA kernels (bf16 and DeepSeek-V3.2's
// FP8 cache) and the dense decode over an FP8 cache against the fp64
// reference over the dequantised cache, with outputs poisoned first: ragged
// batches, shuffled pages, 1-4 query tokens (and an extend of 300 new
// tokens for the sparse prefill), duplicate-free random top-k sets with -1
// pads in random places, tokens that see fewer keys than the top-k.
func TestSparseAndFP8(t *testing.T) {
	e := openEnv(t)
	fixed := []QuantCase{
		{Name: "sparse one key", Heads: 16, PageSize: 64, SeqLens: []int64{1}, QLens: []int64{1}, TopK: 2048, Seed: 1},
		{Name: "sparse 2048 of 5000", Heads: 16, PageSize: 64, SeqLens: []int64{5000, 70, 3000}, QLens: []int64{1, 1, 1}, TopK: 2048, Seed: 2},
		{Name: "sparse 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{9000, 2100}, QLens: []int64{2, 2}, TopK: 2048, Seed: 3, Pad: 0.1},
		{Name: "sparse fp8 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{8000, 4100, 33}, QLens: []int64{3, 3, 3}, TopK: 2048, FP8: true, Seed: 4},
		{Name: "sparse fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{20000}, QLens: []int64{4}, TopK: 2048, FP8: true, Seed: 5, Pad: 0.3},
		{Name: "sparse fp8 page 1", Heads: 32, PageSize: 1, SeqLens: []int64{3000, 2500}, QLens: []int64{1, 1}, TopK: 2048, FP8: true, Seed: 6},
		{Name: "sparse odd topk", Heads: 64, PageSize: 64, SeqLens: []int64{700, 90}, QLens: []int64{2, 2}, TopK: 100, Seed: 7},
		{Name: "sparse prefill", Heads: 128, PageSize: 64, SeqLens: []int64{4096}, QLens: []int64{300}, TopK: 2048, Seed: 8},
		{Name: "sparse prefill fp8", Heads: 128, PageSize: 64, SeqLens: []int64{3000, 2500}, QLens: []int64{150, 120}, TopK: 2048, FP8: true, Seed: 9},
		{Name: "sparse graph", Heads: 16, PageSize: 64, SeqLens: []int64{6000, 100, 2049}, QLens: []int64{1, 1, 1}, TopK: 2048, FP8: true, Seed: 10, Graph: true},
		{Name: "fp8 one key", Heads: 16, PageSize: 1, SeqLens: []int64{1}, QLens: []int64{1}, FP8: true, Seed: 11},
		{Name: "fp8 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{4097, 33, 65, 127}, QLens: []int64{3, 3, 3, 3}, FP8: true, Seed: 12},
		{Name: "fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{16384, 5}, QLens: []int64{1, 1}, FP8: true, Seed: 13},
		{Name: "fp8 64 heads page 1", Heads: 64, PageSize: 1, SeqLens: []int64{5000, 17}, QLens: []int64{2, 2}, FP8: true, Seed: 14},
		{Name: "fp8 graph", Heads: 32, PageSize: 64, SeqLens: []int64{3000, 9000}, QLens: []int64{2, 2}, FP8: true, Seed: 15, Graph: true},
	}
	for _, c := range fixed {
		ch := runQuant(t, e, c, 48)
		t.Logf("%-22s %s: %v", c.Name, c.Describe(), ch)
	}
	n := 30
	if testing.Short() {
		n = 6
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random cases from seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range n {
		c := QuantCase{Name: "random", Heads: []int{16, 32, 64, 128}[rng.IntN(4)], PageSize: []int{1, 64}[rng.IntN(2)], FP8: rng.IntN(2) == 0, Seed: rng.Uint64(), Graph: rng.IntN(3) == 0}
		if i%3 != 2 {
			c.TopK = []int{2048, 2048, 512, 77}[rng.IntN(4)]
			c.Pad = []float64{0, 0, 0.05, 0.5}[rng.IntN(4)]
		}
		batch := []int{1, 2, 5, 16, 64}[rng.IntN(5)]
		q := int64(1 + rng.IntN(4))
		for range batch {
			c.SeqLens = append(c.SeqLens, q+rng.Int64N(12000))
			c.QLens = append(c.QLens, q)
		}
		ch := runQuant(t, e, c, 16)
		t.Logf("random %2d %s: %v", i, c.Describe(), ch)
	}
}

// QuantBenchRow is one timed case of TestQuantBench.
type QuantBenchRow struct {
	Name    string  `json:"name"`
	Case    string  `json:"case"`
	Micros  float64 `json:"us"`
	Spread  float64 `json:"spread"`
	Bytes   float64 `json:"bytes"`
	FLOPs   float64 `json:"flops"`
	TBs     float64 `json:"tb_s"`
	TFLOPs  float64 `json:"tflop_s"`
	OfCopy  float64 `json:"of_copy"`
	OfMatmu float64 `json:"of_matmul"`
	Note    string  `json:"note"`
}

// TestQuantBench times the sparse and FP8 kernels in captured graphs
// against the floors measured in the same run; it logs the table and, with
// ATTNPLUG_BENCH_OUT, writes it as JSON there.
func TestQuantBench(t *testing.T) {
	if os.Getenv("ATTNPLUG_BENCH") == "" {
		t.Skip("ATTNPLUG_BENCH unset: the benchmark runs only when asked")
	}
	e := openEnv(t)
	f, err := e.MeasureFloors()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("floors: copy %.2f TB/s, matmul %.0f TFLOP/s (%s)", f.CopyTBs, f.MatmulTFLOPs, f.MatmulLibrary)
	rep := func(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }
	var cases []QuantCase
	for _, heads := range []int{16, 128} {
		for _, batch := range []int{1, 16, 64, 128} {
			for _, fp8 := range []bool{false, true} {
				cases = append(cases, QuantCase{Name: "sparse decode", Heads: heads, PageSize: 64, SeqLens: rep(batch, 16384), QLens: rep(batch, 1), TopK: 2048, FP8: fp8, Seed: 21, Graph: true})
			}
		}
	}
	for _, batch := range []int{16, 64, 128} {
		for _, fp8 := range []bool{false, true} {
			cases = append(cases, QuantCase{Name: "dense decode", Heads: 16, PageSize: 64, SeqLens: rep(batch, 8192), QLens: rep(batch, 1), FP8: fp8, Seed: 22, Graph: true})
		}
	}
	for _, tokens := range []int64{1024, 4096} {
		cases = append(cases, QuantCase{Name: "sparse prefill", Heads: 128, PageSize: 64, SeqLens: []int64{8192}, QLens: []int64{tokens}, TopK: 2048, Seed: 23})
	}
	var rows []QuantBenchRow
	only := os.Getenv("ATTNPLUG_BENCH_ONLY") // a substring of the cases to time, for a profiler
	for _, c := range cases {
		if !strings.Contains(c.Name+" "+c.Describe(), only) {
			continue
		}
		b, err := e.AllocQuant(c, 2)
		if err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		p, err := e.PrepareQuant(b)
		if err != nil {
			b.Free(e)
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		tm, err := e.TimeQuant(b, p, 20, 7)
		if err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
		r := QuantBenchRow{Name: c.Name, Case: c.Describe(), Micros: tm.Median, Spread: tm.Spread, Bytes: b.QuantBytes(), FLOPs: b.QuantFLOPs(), Note: p.Plan().Note}
		r.TBs = r.Bytes / tm.Median / 1e6
		r.TFLOPs = r.FLOPs / tm.Median / 1e6
		r.OfCopy = r.TBs / f.CopyTBs
		if f.MatmulTFLOPs > 0 {
			r.OfMatmu = r.TFLOPs / f.MatmulTFLOPs
		}
		rows = append(rows, r)
		t.Logf("%-14s %-62s %8.1f us  %5.2f TB/s (%3.0f%% copy)  %6.1f TFLOP/s (%3.0f%% matmul)", r.Name, r.Case, r.Micros, r.TBs, 100*r.OfCopy, r.TFLOPs, 100*r.OfMatmu)
		p.Close()
		b.Free(e)
	}
	if out := os.Getenv("ATTNPLUG_BENCH_OUT"); out != "" {
		data, _ := json.MarshalIndent(map[string]any{"floors": f, "rows": rows}, "", "  ")
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
