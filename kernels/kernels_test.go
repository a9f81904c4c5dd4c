package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

const tol = 1e-5

// smallConfig draws a random small MLA configuration.
func smallConfig(rng *rand.Rand) Config {
	nope := 4 + rng.IntN(13)
	rope := 2 * (1 + rng.IntN(4))
	return Config{
		Heads:         1 + rng.IntN(4),
		KVLoraRank:    8 + rng.IntN(25),
		QKNopeHeadDim: nope,
		QKRopeHeadDim: rope,
		VHeadDim:      4 + rng.IntN(13),
		// A larger-than-usual scale makes the softmax peaked, which exercises the max
		// subtraction and the LSE merge harder than the model's scale would.
		SoftmaxScale:  (0.5 + 2*rng.Float64()) / math.Sqrt(float64(nope+rope)),
		RopeBase:      10000,
		ChunkCapacity: 1 << 20,
	}
}

// inputsFor returns the inputs method m takes: rotated unless m is fused-RoPE.
func inputsFor(t *testing.T, m Method, cfg Config, b BatchShape, raw Tensors) Tensors {
	t.Helper()
	if !m.PreRoped() {
		return raw
	}
	r, err := ApplyRoPE(cfg, b, raw)
	if err != nil {
		t.Fatalf("ApplyRoPE: %v", err)
	}
	return r
}

func runMethod(t *testing.T, m Method, cfg Config, b BatchShape, in Tensors) ([]float32, Stats) {
	t.Helper()
	out := make([]float32, b.Tokens()*cfg.Heads*cfg.VHeadDim)
	st, err := RunWithStats(m, cfg, b, in, out)
	if err != nil {
		t.Fatalf("RunWithStats(%s): %v", m, err)
	}
	return out, st
}

type batchCase struct {
	name      string
	seq, pre  []int
	capacity  int // ChunkCapacity override (0: keep)
	topK      int // TopK (0: larger than every sequence)
	wantChunk bool
	posShift  int32 // added to every Positions entry
}

var invariantCases = []batchCase{
	{name: "prefill no prefix", seq: []int{9}, pre: []int{0}},
	{name: "long prefix", seq: []int{45}, pre: []int{38}},
	{name: "several requests of different lengths", seq: []int{5, 13, 3, 8}, pre: []int{0, 4, 1, 7}},
	{name: "decode", seq: []int{9, 17, 4}, pre: []int{8, 16, 3}},
	{name: "target verify", seq: []int{14, 11}, pre: []int{10, 7}},
	{name: "past chunk capacity", seq: []int{23, 12, 30}, pre: []int{20, 9, 26}, capacity: 9, wantChunk: true},
	{name: "chunk capacity one token per request", seq: []int{7, 6}, pre: []int{5, 2}, capacity: 2, wantChunk: true},
	{name: "dsa top-k smaller than sequences", seq: []int{25, 10}, pre: []int{21, 4}, topK: 6},
	{name: "shifted positions", seq: []int{12, 6}, pre: []int{9, 0}, posShift: 17},
}

// TestMethodsMatchReference is the invariant: every method matches the fp64 reference.
func TestMethodsMatchReference(t *testing.T) {
	for ci, c := range invariantCases {
		for seed := range 3 {
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(seed)))
			cfg := smallConfig(rng)
			b := BatchShape{SeqLens: c.seq, PrefixLens: c.pre}
			if c.capacity > 0 {
				cfg.ChunkCapacity = c.capacity
			}
			cfg.TopK = c.topK
			if cfg.TopK == 0 {
				cfg.TopK = slices.Max(c.seq)
			}
			raw, err := RandomTensors(rng, cfg, b)
			if err != nil {
				t.Fatalf("%s: RandomTensors: %v", c.name, err)
			}
			for i := range raw.Positions {
				raw.Positions[i] += c.posShift
			}
			dense, err := Reference(cfg, b, raw)
			if err != nil {
				t.Fatalf("%s: Reference: %v", c.name, err)
			}
			sparse, err := SparseReference(cfg, b, raw)
			if err != nil {
				t.Fatalf("%s: SparseReference: %v", c.name, err)
			}
			for _, m := range Methods() {
				name := fmt.Sprintf("%s/seed%d/%s", c.name, seed, m)
				t.Run(name, func(t *testing.T) {
					got, st := runMethod(t, m, cfg, b, inputsFor(t, m, cfg, b, raw))
					want := dense
					if m.Sparse() {
						want = sparse
					}
					if e := RelError(got, want); !(e <= tol) {
						t.Errorf("cfg %+v: RelError = %.3g, want <= %g", cfg, e, tol)
					}
					if m == MHAChunkedKV && c.wantChunk && st.PrefixChunks < 2 {
						t.Errorf("PrefixChunks = %d, want >= 2 (capacity %d, %d requests)", st.PrefixChunks, cfg.ChunkCapacity, b.Requests())
					}
				})
			}
		}
	}
}

// TestSparseEqualsDenseWhenTopKCoversAll checks that, with every sequence no longer than
// TopK so that the indices select every causal token, dense MHA_ONE_SHOT equals sparse MLA.
func TestSparseEqualsDenseWhenTopKCoversAll(t *testing.T) {
	cases := []struct {
		name     string
		seq, pre []int
		topK     int
	}{
		{"exactly top-k", []int{8, 5}, []int{4, 0}, 8},
		{"shorter than top-k", []int{6, 3, 7}, []int{5, 1, 2}, 16},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(i)))
			cfg := smallConfig(rng)
			cfg.TopK = c.topK
			b := BatchShape{SeqLens: c.seq, PrefixLens: c.pre}
			raw, err := RandomTensors(rng, cfg, b)
			if err != nil {
				t.Fatal(err)
			}
			in := inputsFor(t, MHAOneShot, cfg, b, raw)
			dense, _ := runMethod(t, MHAOneShot, cfg, b, in)
			for _, m := range []Method{DSAMLA, DSANPU} {
				sp, _ := runMethod(t, m, cfg, b, in)
				want := make([]float64, len(dense))
				for k, x := range dense {
					want[k] = float64(x)
				}
				if e := RelError(sp, want); e > tol {
					t.Errorf("%s vs MHA_ONE_SHOT: RelError = %.3g, want <= %g", m, e, tol)
				}
			}
		})
	}
}

// TestPrefixChunks checks the chunking rule against sglang's own test cases
// (test/srt/test_forward_batch_info-style expectations: capacity 31, two requests with
// prefixes 1 and 64 give prefix_chunk_len 15 and 5 chunks) and that MHA_CHUNKED_KV reports
// the same split.
func TestPrefixChunks(t *testing.T) {
	cases := []struct {
		name             string
		capacity         int
		pre              []int
		wantLen, wantNum int
	}{
		{"sglang capacity 31", 31, []int{1, 64}, 15, 5},
		{"sglang capacity 64", 64, []int{16, 32, 48, 64}, 16, 4},
		{"fits in one chunk", 100, []int{10, 20}, 50, 1},
		{"no prefix", 8, []int{0, 0}, 4, 0},
		{"capacity one per request", 3, []int{4, 1, 2}, 1, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 2, VHeadDim: 4, SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: c.capacity}
			seq := make([]int, len(c.pre))
			for i, p := range c.pre {
				seq[i] = p + 2
			}
			b := BatchShape{SeqLens: seq, PrefixLens: c.pre}
			gotLen, gotNum, err := PrefixChunks(cfg, b)
			if err != nil {
				t.Fatal(err)
			}
			if gotLen != c.wantLen || gotNum != c.wantNum {
				t.Errorf("PrefixChunks = (%d, %d), want (%d, %d)", gotLen, gotNum, c.wantLen, c.wantNum)
			}
			raw, err := RandomTensors(rand.New(rand.NewPCG(1, 2)), cfg, b)
			if err != nil {
				t.Fatal(err)
			}
			_, st := runMethod(t, MHAChunkedKV, cfg, b, inputsFor(t, MHAChunkedKV, cfg, b, raw))
			if st.ChunkLen != c.wantLen || st.PrefixChunks != c.wantNum {
				t.Errorf("Stats chunking = (%d, %d), want (%d, %d)", st.ChunkLen, st.PrefixChunks, c.wantLen, c.wantNum)
			}
		})
	}
}

// TestChunkedLSE checks that the per-row log-sum-exp kept by the chunked merge equals the
// reference's.
func TestChunkedLSE(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cfg := smallConfig(rng)
	cfg.ChunkCapacity = 5
	b := BatchShape{SeqLens: []int{19, 9}, PrefixLens: []int{15, 2}}
	raw, err := RandomTensors(rng, cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	wantLSE := make([]float64, b.Tokens()*cfg.Heads)
	if _, err := reference(cfg, b, &raw, false, wantLSE); err != nil {
		t.Fatal(err)
	}
	in := inputsFor(t, MHAChunkedKV, cfg, b, raw)
	ix := newBatchIndex(b)
	out := make([]float32, b.Tokens()*cfg.Heads*cfg.VHeadDim)
	_, chunks, lse, err := runMHAChunkedKV(cfg, b, &ix, &in, out)
	if err != nil {
		t.Fatal(err)
	}
	if chunks != 8 { // prefix_chunk_len 5/2 = 2, ceil(15/2) = 8
		t.Errorf("chunks = %d, want 8", chunks)
	}
	for i := range lse {
		if d := math.Abs(lse[i] - wantLSE[i]); d > 1e-5*math.Max(1, math.Abs(wantLSE[i])) {
			t.Errorf("lse[%d] = %v, want %v", i, lse[i], wantLSE[i])
		}
	}
}

func TestDeepSeekV3(t *testing.T) {
	cfg := DeepSeekV3()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	mscale := 0.1*math.Log(40) + 1
	want := mscale * mscale / math.Sqrt(192)
	if math.Abs(cfg.SoftmaxScale-want) > 1e-15 {
		t.Errorf("SoftmaxScale = %v, want %v", cfg.SoftmaxScale, want)
	}
	if got := YarnMscale(0.5, 1); got != 1 {
		t.Errorf("YarnMscale(0.5, 1) = %v, want 1", got)
	}
	if cfg.Heads != 128 || cfg.KVLoraRank != 512 || cfg.QKNopeHeadDim != 128 || cfg.QKRopeHeadDim != 64 || cfg.VHeadDim != 128 {
		t.Errorf("DeepSeekV3 dims = %+v", cfg)
	}
}

// TestRoPEInterleaved pins the GPT-J / interleaved (is_neox_style=False) pairing and the
// relative-position property.
func TestRoPEInterleaved(t *testing.T) {
	freqs := ropeFreqs(4, 10000)
	got := make([]float64, 4)
	ropeInto(got, []float32{1, 0, 0, 1}, 1, freqs)
	f1 := math.Pow(10000, -0.5)
	want := []float64{math.Cos(1), math.Sin(1), -math.Sin(f1), math.Cos(f1)}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("rope[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// <rot(q, a), rot(k, b)> depends on a-b only.
	q, k := []float32{0.3, -1, 0.7, 0.2}, []float32{-0.4, 0.9, 0.1, 0.5}
	dotAt := func(a, b int) float64 {
		qa, kb := make([]float64, 4), make([]float64, 4)
		ropeInto(qa, q, a, freqs)
		ropeInto(kb, k, b, freqs)
		s := 0.0
		for i := range qa {
			s += qa[i] * kb[i]
		}
		return s
	}
	if d := math.Abs(dotAt(10, 3) - dotAt(107, 100)); d > 1e-9 {
		t.Errorf("rotated dot not shift-invariant: diff %v", d)
	}
}

func TestLayoutSplit(t *testing.T) {
	cfg := Config{Heads: 3, KVLoraRank: 10, QKNopeHeadDim: 5, QKRopeHeadDim: 4, VHeadDim: 6, SoftmaxScale: 0.2, RopeBase: 10000, ChunkCapacity: 16, TopK: 3}
	b := BatchShape{SeqLens: []int{4, 7}, PrefixLens: []int{1, 5}}
	l, err := Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	T, KV := 5, 11
	want := map[string]int{
		"q_nope": T * 3 * 5, "q_pe": T * 3 * 4, "positions": T, "c_kv": KV * 10, "k_pe": KV * 4,
		"w_kc": 3 * 5 * 10, "w_vc": 3 * 10 * 6, "topk_indices": T * 3, "out": T * 3 * 6,
	}
	end := 0
	for _, f := range l.Fields() {
		if f.Len != want[f.Name] {
			t.Errorf("%s: Len = %d, want %d", f.Name, f.Len, want[f.Name])
		}
		if f.Offset%16 != 0 || f.Offset < end {
			t.Errorf("%s: Offset = %d, want 64-byte aligned and >= %d", f.Name, f.Offset, end)
		}
		end = f.Offset + f.Len
	}
	if l.Elems < end || l.Bytes() != 4*l.Elems {
		t.Errorf("Elems = %d, Bytes = %d, fields end at %d", l.Elems, l.Bytes(), end)
	}
	buf := make([]byte, l.Bytes())
	tn, out, err := l.SplitBytes(buf)
	if err != nil {
		t.Fatal(err)
	}
	tn.Positions[2] = 1234
	tn.TopKIndices[0] = -1
	out[len(out)-1] = 1.5
	fl, _, _ := l.Split(nil)
	_ = fl
	if len(tn.QNope) != want["q_nope"] || len(out) != want["out"] {
		t.Errorf("split lengths: q_nope %d out %d", len(tn.QNope), len(out))
	}
	// Writes through the views land in the flat buffer.
	pos := int32(buf[4*(l.Positions.Offset+2)]) | int32(buf[4*(l.Positions.Offset+2)+1])<<8
	if pos != 1234 {
		t.Errorf("positions[2] in buffer = %d, want 1234", pos)
	}
	if _, _, err := l.Split(make([]float32, l.Elems-1)); err == nil {
		t.Errorf("Split of a short buffer: got nil error")
	}
	// A buffer produced by RandomTensors passes validation for every method.
	raw, err := RandomTensors(rand.New(rand.NewPCG(3, 3)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Methods() {
		if err := Run(m, cfg, b, inputsFor(t, m, cfg, b, raw), make([]float32, want["out"])); err != nil {
			t.Errorf("Run(%s) on RandomTensors: %v", m, err)
		}
	}
}

func TestRandomTensorsDeterministic(t *testing.T) {
	cfg := Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 2, VHeadDim: 4, SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: 8, TopK: 4}
	b := BatchShape{SeqLens: []int{6, 3}, PrefixLens: []int{2, 0}}
	a, _ := RandomTensors(rand.New(rand.NewPCG(9, 9)), cfg, b)
	c, _ := RandomTensors(rand.New(rand.NewPCG(9, 9)), cfg, b)
	if !slices.Equal(a.CKV, c.CKV) || !slices.Equal(a.WVC, c.WVC) || !slices.Equal(a.TopKIndices, c.TopKIndices) {
		t.Errorf("same seed gave different tensors")
	}
	d, _ := RandomTensors(rand.New(rand.NewPCG(9, 10)), cfg, b)
	if slices.Equal(a.CKV, d.CKV) {
		t.Errorf("different seeds gave equal c_kv")
	}
}

func TestRelError(t *testing.T) {
	cases := []struct {
		name string
		got  []float32
		want []float64
		rel  float64
	}{
		{"equal", []float32{1, -2}, []float64{1, -2}, 0},
		{"max norm", []float32{1, -2.5}, []float64{1, -2}, 0.25},
		{"zero want is absolute", []float32{0.5}, []float64{0}, 0.5},
		{"length mismatch", []float32{1}, []float64{1, 2}, math.Inf(1)},
		{"nan", []float32{float32(math.NaN())}, []float64{1}, math.Inf(1)},
	}
	for _, c := range cases {
		if got := RelError(c.got, c.want); got != c.rel {
			t.Errorf("%s: RelError = %v, want %v", c.name, got, c.rel)
		}
	}
}
