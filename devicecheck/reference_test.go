package devicecheck

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestAttendIsSoftmaxAttention: attend against a direct softmax over a
// small random row, and its LSE against log(sum(exp(s))).
func TestAttendIsSoftmaxAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, d, dv = 37, 8, 5
	q := make([]float64, d)
	keys := make([][]float64, n)
	for i := range q {
		q[i] = rng.NormFloat64()
	}
	for j := range keys {
		keys[j] = make([]float64, d)
		for i := range keys[j] {
			keys[j][i] = rng.NormFloat64()
		}
	}
	key := func(j int64, buf []float64) []float64 { return append(buf[:0], keys[j]...) }
	value := func(j int64, buf []float64) []float64 { return append(buf[:0], keys[j][:dv]...) }
	const scale = 0.3
	got, lse := attend(q, n, scale, key, value)
	var sum float64
	w := make([]float64, n)
	for j := range keys {
		var dot float64
		for i := range q {
			dot += q[i] * keys[j][i]
		}
		w[j] = math.Exp(scale * dot)
		sum += w[j]
	}
	for i := range dv {
		var want float64
		for j := range keys {
			want += w[j] / sum * keys[j][i]
		}
		if math.Abs(got[i]-want) > 1e-12 {
			t.Errorf("out[%d] = %v, want %v", i, got[i], want)
		}
	}
	if math.Abs(lse-math.Log(sum)) > 1e-12 {
		t.Errorf("lse %v, want %v", lse, math.Log(sum))
	}
}

// TestHashValues: the fills' values are bf16 numbers of magnitude in
// [1/16, 1) with both signs, and a seed and index give one value.
func TestHashValues(t *testing.T) {
	neg := 0
	for i := range int64(10000) {
		v := hashValue(7, i)
		if a := math.Abs(v); a < 1.0/16 || a >= 1 {
			t.Fatalf("element %d: %v", i, v)
		}
		if v < 0 {
			neg++
		}
		if v != hashValue(7, i) || BF16(hashBF16(7, i)) != v {
			t.Fatalf("element %d is not one value", i)
		}
	}
	if neg < 4500 || neg > 5500 {
		t.Errorf("%d of 10000 negative", neg)
	}
}

// TestE4M3 decodes the e4m3 bytes of known values: the normal numbers,
// the subnormals, the largest (448) and the signs.
func TestE4M3(t *testing.T) {
	for _, tc := range []struct {
		b    byte
		want float64
	}{{0x38, 1}, {0xb8, -1}, {0x3c, 1.5}, {0x7e, 448}, {0x01, 1.0 / 512}, {0x00, 0}, {0x40, 2}, {0x30, 0.5}} {
		if got := e4m3(tc.b); got != tc.want {
			t.Errorf("e4m3(%#x) = %v, want %v", tc.b, got, tc.want)
		}
	}
}

// TestCompareRows: a row equal to its reference has no error; the poison
// left anywhere is counted; a NaN LSE is an infinite LSE error.
func TestCompareRows(t *testing.T) {
	out := []uint16{0x3f80, 0x4000, 0x7fc0} // 1, 2, NaN
	lse := []float32{0.5, float32(math.NaN())}
	ch := compareRows(out, lse, 1, func(int) rowRef { return rowRef{out: 0, lse: 0, want: []float64{1, 2}, wantLSE: 0.5} })
	if ch.RelErr != 0 || ch.LSEErr != 0 || ch.Unwritten != 2 || ch.OK() {
		t.Errorf("%v (ok %v)", ch, ch.OK())
	}
	ch = compareRows(out[:2], lse[1:], 1, func(int) rowRef { return rowRef{out: 0, lse: 0, want: []float64{1, 2}, wantLSE: 0.5} })
	if !math.IsInf(ch.LSEErr, 1) || ch.OK() {
		t.Errorf("NaN LSE: %v", ch)
	}
}

// TestWorkloadFor: each plan request gets the workload of its kind, with
// its shape; one the layer has no reference for is ErrNotCovered.
func TestWorkloadFor(t *testing.T) {
	mla := core.PlanRequest{Method: core.MLA, DType: "bf16", Dims: core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512},
		Shape: core.PlanShape{SeqLens: []int64{9, 40}, QLens: []int64{1, 2}, PageSize: 64, MaxSeqLen: 128}, Graph: true}
	w, err := WorkloadFor(&mla)
	if m, ok := w.(MLA); err != nil || !ok || m.Heads != 16 || m.PageSize != 64 || m.MaxSeqLen != 128 || !m.Graph || len(m.SeqLens) != 2 {
		t.Errorf("bf16 MLA: %#v, %v", w, err)
	}
	fp8 := mla
	fp8.KVDType = "fp8_e4m3"
	if w, err := WorkloadFor(&fp8); err != nil || !w.(Quant).FP8 || w.(Quant).TopK != 0 {
		t.Errorf("FP8 MLA: %#v, %v", w, err)
	}
	sparse := mla
	sparse.Dims.TopK = 2048
	if w, err := WorkloadFor(&sparse); err != nil || w.(Quant).FP8 || w.(Quant).TopK != 2048 {
		t.Errorf("sparse MLA: %#v, %v", w, err)
	}
	pre := core.PlanRequest{Method: core.MHAChunkedKV, DType: "bf16", Dims: core.PlanDims{Heads: 8, HeadDimQK: 192, HeadDimV: 128},
		Shape: core.PlanShape{SeqLens: []int64{300}, QLens: []int64{100}, ChunkCapacity: 64}}
	if w, err := WorkloadFor(&pre); err != nil || w.(Prefill).Method != core.MHAChunkedKV || w.(Prefill).ChunkCapacity != 64 {
		t.Errorf("prefill: %#v, %v", w, err)
	}
	for name, edit := range map[string]func(*core.PlanRequest){
		"fp16 queries":   func(r *core.PlanRequest) { r.DType = "fp16" },
		"fp8_e5m2 cache": func(r *core.PlanRequest) { r.KVDType = "fp8_e5m2" },
		"head dims":      func(r *core.PlanRequest) { r.Dims.HeadDimQK = 192 },
		"fused rope":     func(r *core.PlanRequest) { r.Method = core.MLAFusedRoPEROCm },
	} {
		r := mla
		edit(&r)
		if _, err := WorkloadFor(&r); !errors.Is(err, ErrNotCovered) {
			t.Errorf("%s: %v, want ErrNotCovered", name, err)
		}
	}
}

// TestCheckLens: a batch the layer cannot make is refused with a field
// error before anything is allocated.
func TestCheckLens(t *testing.T) {
	for _, tc := range []struct {
		seq, q []int64
		want   string
	}{{nil, nil, "0 requests"}, {[]int64{5}, []int64{1, 1}, "1 requests with 2"}, {[]int64{3}, []int64{4}, "3 keys and 4 query"}, {[]int64{3}, []int64{0}, "0 query"}} {
		err := checkLens(tc.seq, tc.q)
		if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v", tc.seq, tc.q, err)
		}
	}
	if err := checkLens([]int64{4, 1}, []int64{4, 1}); err != nil {
		t.Error(err)
	}
}
