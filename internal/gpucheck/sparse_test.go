package gpucheck

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicecheck"
)

// sparse is the backend of the sparse checks: DeepSeek sparse attention's.
const sparse = "dsa"

// quantBackend is the backend whose plans run c: dsa's for a sparse batch,
// fa3's for a dense one over an FP8 cache.
func quantBackend(c devicecheck.Quant) string {
	if c.TopK > 0 {
		return sparse
	}
	return dense
}

// TestSparseAndFP8 checks the sparse MLA kernels (bf16 and DeepSeek-V3.2's
// FP8 cache) and the dense decode over an FP8 cache against the fp64
// reference over the dequantised cache, with outputs poisoned first: ragged
// batches, shuffled pages, 1-4 query tokens (and an extend of 300 new
// tokens for the sparse prefill), duplicate-free random top-k sets with -1
// pads in random places, tokens that see fewer keys than the top-k. The
// sparse batches run on dsa's plans, whose catalog takes pages of 64
// tokens (sglang's NSA pool); the dense FP8 ones on fa3's, three of them
// scheduled on the device (on Hopper each checked to run its own body).
func TestSparseAndFP8(t *testing.T) {
	e := openEnv(t)
	fixed := []devicecheck.Quant{
		{Name: "sparse one key", Heads: 16, PageSize: 64, SeqLens: []int64{1}, QLens: []int64{1}, TopK: 2048, Seed: 1},
		{Name: "sparse 2048 of 5000", Heads: 16, PageSize: 64, SeqLens: []int64{5000, 70, 3000}, QLens: []int64{1, 1, 1}, TopK: 2048, Seed: 2},
		{Name: "sparse 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{9000, 2100}, QLens: []int64{2, 2}, TopK: 2048, Seed: 3, Pad: 0.1},
		{Name: "sparse fp8 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{8000, 4100, 33}, QLens: []int64{3, 3, 3}, TopK: 2048, FP8: true, Seed: 4},
		{Name: "sparse fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{20000}, QLens: []int64{4}, TopK: 2048, FP8: true, Seed: 5, Pad: 0.3},
		{Name: "sparse fp8 32 heads", Heads: 32, PageSize: 64, SeqLens: []int64{3000, 2500}, QLens: []int64{1, 1}, TopK: 2048, FP8: true, Seed: 6},
		{Name: "sparse odd topk", Heads: 64, PageSize: 64, SeqLens: []int64{700, 90}, QLens: []int64{2, 2}, TopK: 100, Seed: 7},
		{Name: "sparse prefill", Heads: 128, PageSize: 64, SeqLens: []int64{4096}, QLens: []int64{300}, TopK: 2048, Seed: 8},
		{Name: "sparse prefill fp8", Heads: 128, PageSize: 64, SeqLens: []int64{3000, 2500}, QLens: []int64{150, 120}, TopK: 2048, FP8: true, Seed: 9},
		{Name: "sparse graph", Heads: 16, PageSize: 64, SeqLens: []int64{6000, 100, 2049}, QLens: []int64{1, 1, 1}, TopK: 2048, FP8: true, Seed: 10, Graph: true},
		{Name: "fp8 one key", Heads: 16, PageSize: 1, SeqLens: []int64{1}, QLens: []int64{1}, FP8: true, Seed: 11},
		{Name: "fp8 16 heads", Heads: 16, PageSize: 64, SeqLens: []int64{4097, 33, 65, 127}, QLens: []int64{3, 3, 3, 3}, FP8: true, Seed: 12},
		{Name: "fp8 128 heads", Heads: 128, PageSize: 64, SeqLens: []int64{16384, 5}, QLens: []int64{1, 1}, FP8: true, Seed: 13},
		{Name: "fp8 64 heads page 1", Heads: 64, PageSize: 1, SeqLens: []int64{5000, 17}, QLens: []int64{2, 2}, FP8: true, Seed: 14},
		{Name: "fp8 graph", Heads: 32, PageSize: 64, SeqLens: []int64{3000, 9000}, QLens: []int64{2, 2}, FP8: true, Seed: 15, Graph: true},
		{Name: "sparse fp8 split", Heads: 64, PageSize: 64, SeqLens: []int64{7000, 300}, QLens: []int64{2, 2}, TopK: 2048, FP8: true, Seed: 16, Split: true},
		{Name: "fp8 split graph", Heads: 128, PageSize: 64, SeqLens: []int64{3000, 9000}, QLens: []int64{1, 1}, FP8: true, Seed: 17, Graph: true, Split: true},
		// Ragged batches over an FP8 cache, packed (packedPlan).
		{Name: "fp8 packed 16 heads", Heads: 16, PageSize: 64, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), FP8: true, Seed: 18},
		{Name: "fp8 packed 128 heads", Heads: 128, PageSize: 64, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), FP8: true, Seed: 19},
		{Name: "fp8 packed graph", Heads: 128, PageSize: 1, SeqLens: logRagged(48, 64, 8192), QLens: repeat(48, 1), FP8: true, Seed: 20, Graph: true},
		// Scheduled on the device (mla_schedule), where the decode waits
		// late: the 16-row body, the seesaw, and the 64-row wgmma body at
		// batch 1.
		{Name: "fp8 16 heads on the device", Heads: 16, PageSize: 64, SeqLens: []int64{4097, 33, 9000, 700}, QLens: []int64{1, 1, 1, 1}, FP8: true, Seed: 21, Graph: true, MaxSeqLen: 9000},
		{Name: "fp8 128 heads on the device", Heads: 128, PageSize: 1, SeqLens: []int64{3000, 70, 6000}, QLens: []int64{2, 2, 2}, FP8: true, Seed: 22, Graph: true, MaxSeqLen: 8192, Split: true},
		{Name: "fp8 128 heads batch 1 on the device", Heads: 128, PageSize: 64, SeqLens: []int64{5000}, QLens: []int64{1}, FP8: true, Seed: 23, Graph: true, MaxSeqLen: 5000},
	}
	// The body each batch scheduled on the device runs (sm_90a).
	onDevice := map[string]string{
		"fp8 16 heads on the device":          "mla_decode_fp8_wg16",
		"fp8 128 heads on the device":         "mla_decode_fp8_ss64",
		"fp8 128 heads batch 1 on the device": "mla_decode_fp8_wg64",
	}
	for _, c := range fixed {
		var plan func(*core.Plan) error
		if strings.Contains(c.Name, "packed") {
			plan = packedPlan
		}
		if body, ok := onDevice[c.Name]; ok && e.Device().ComputeCapability == 90 {
			plan = scheduledPlan(body)
		}
		ch := runPlanned(t, e, quantBackend(c), c, 48, plan)
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
		c := devicecheck.Quant{Name: "random", Heads: []int{16, 32, 64, 128}[rng.IntN(4)], PageSize: []int{1, 64}[rng.IntN(2)], FP8: rng.IntN(2) == 0, Seed: rng.Uint64(), Graph: rng.IntN(3) == 0,
			Split: rng.IntN(2) == 0}
		if i%3 != 2 {
			c.TopK = []int{2048, 2048, 512, 77}[rng.IntN(4)]
			c.Pad = []float64{0, 0, 0.05, 0.5}[rng.IntN(4)]
			c.PageSize = 64
		}
		batch := []int{1, 2, 5, 16, 64}[rng.IntN(5)]
		q := int64(1 + rng.IntN(4))
		for range batch {
			c.SeqLens = append(c.SeqLens, q+rng.Int64N(12000))
			c.QLens = append(c.QLens, q)
		}
		ch := runCase(t, e, quantBackend(c), c, 16)
		t.Logf("random %2d %s: %v", i, c.Describe(), ch)
	}
}

// TestQuantBench times the sparse and FP8 kernels (the rows of attnplug
// bench --gpu) against the floors measured in the same run; it logs the
// table and, with ATTNPLUG_BENCH_OUT, writes it as JSON there.
// ATTNPLUG_BENCH_ONLY keeps the shapes whose names contain it.
func TestQuantBench(t *testing.T) {
	if os.Getenv("ATTNPLUG_BENCH") == "" {
		t.Skip("ATTNPLUG_BENCH unset: the benchmark runs only when asked")
	}
	e := openEnv(t)
	rep, err := devicecheck.RunBench(t.Context(), e.Env, devicecheck.BenchConfig{
		Quant: devicecheck.QuantShapes(os.Getenv("ATTNPLUG_BENCH_ONLY")), Dense: dense, Sparse: sparse})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	rep.WriteTable(&buf)
	t.Log("\n" + buf.String())
	for _, r := range rep.Quant {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	if out := os.Getenv("ATTNPLUG_BENCH_OUT"); out != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
