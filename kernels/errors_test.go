package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// errorBase returns a valid sparse-capable configuration, batch and inputs.
func errorBase(t *testing.T) (Config, BatchShape, Tensors) {
	t.Helper()
	cfg := Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 2, VHeadDim: 4, SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: 4, TopK: 3}
	b := BatchShape{SeqLens: []int{5, 3}, PrefixLens: []int{3, 0}}
	raw, err := RandomTensors(rand.New(rand.NewPCG(5, 5)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, b, raw
}

func TestRunErrors(t *testing.T) {
	cases := []struct {
		name   string
		method Method
		edit   func(cfg *Config, b *BatchShape, in *Tensors, out *[]float32)
		want   string // substring of the error
	}{
		{"unknown method", "FLASH", nil, `unknown method "FLASH"`},
		{"zero heads", MLA, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.Heads = 0 }, "heads: 0 is outside [1, 65536]"},
		{"odd rope dim", MLA, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.QKRopeHeadDim = 3 }, "qk_rope_head_dim: 3 is odd"},
		{"negative lora", MHA, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.KVLoraRank = -8 }, "kv_lora_rank: -8 is outside"},
		{"nan scale", MHA, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.SoftmaxScale = math.NaN() }, "softmax_scale: NaN: want a finite number > 0"},
		{"rope base 1", MLAFusedRopeCPU, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.RopeBase = 1 }, "rope_base: 1: want a finite number > 1"},
		{"zero capacity", MHAChunkedKV, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.ChunkCapacity = 0 }, "chunk_capacity: 0 is outside"},
		{"capacity below batch size", MHAChunkedKV, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.ChunkCapacity = 1 }, "chunk_capacity: 1 is smaller than the batch size 2"},
		{"negative top-k", MLA, func(c *Config, _ *BatchShape, _ *Tensors, _ *[]float32) { c.TopK = -1 }, "top_k: -1 is outside"},
		{"sparse without top-k", DSAMLA, func(c *Config, _ *BatchShape, in *Tensors, _ *[]float32) { c.TopK = 0; in.TopKIndices = nil }, "top_k: 0: a sparse method needs 1 or more"},
		{"empty batch", MLA, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { *b = BatchShape{} }, "seq_lens: empty"},
		{"mismatched batch", MLA, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { b.PrefixLens = []int{3} }, "extend_prefix_lens: has 1 entries, seq_lens 2"},
		{"negative seq", MHA, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { b.SeqLens = []int{5, -3} }, "seq_lens[1]: -3 is negative"},
		{"negative prefix", MHA, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { b.PrefixLens = []int{-1, 0} }, "extend_prefix_lens[0]: -1 is negative"},
		{"prefix beyond seq", MHAOneShot, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { b.PrefixLens = []int{6, 0} }, "extend_prefix_lens[0]: 6 is longer than seq_lens[0] = 5"},
		{"no new token", MLA, func(_ *Config, b *BatchShape, _ *Tensors, _ *[]float32) { b.PrefixLens = []int{5, 0} }, "seq_lens[0]: request 0 has no new token"},
		{"short q_nope", MHA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.QNope = in.QNope[1:] }, "Tensors.QNope has 39 elements, want 40"},
		{"short q_pe", MLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.QPe = nil }, "Tensors.QPe has 0 elements, want 20"},
		{"short positions", MLAFusedRopeROCm, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.Positions = in.Positions[:4] }, "Tensors.Positions has 4 elements, want 5"},
		{"long c_kv", MLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.CKV = append(in.CKV, 0) }, "Tensors.CKV has 65 elements, want 64"},
		{"short k_pe", MHANPU, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.KPe = in.KPe[:2] }, "Tensors.KPe has 2 elements, want 16"},
		{"short w_kc", MLANPU, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.WKC = in.WKC[:10] }, "Tensors.WKC has 10 elements, want 64"},
		{"short w_vc", MHAChunkedKV, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.WVC = nil }, "Tensors.WVC has 0 elements, want 64"},
		{"short out", MLA, func(_ *Config, _ *BatchShape, _ *Tensors, out *[]float32) { *out = (*out)[:3] }, "out has 3 elements, want 40"},
		{"negative position", MLAFusedRopeCPU, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.Positions[1] = -4 }, "Tensors.Positions[1]=-4"},
		{"short top-k indices", DSANPU, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.TopKIndices = in.TopKIndices[:14] }, "Tensors.TopKIndices has 14 elements, want 15"},
		{"top-k beyond causal limit", DSAMLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.TopKIndices[0*3+1] = 4 }, "Tensors.TopKIndices[0,1]=4 is beyond the causal limit 3"},
		{"top-k beyond sequence", DSAMLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.TopKIndices[4*3+2] = 3 }, "Tensors.TopKIndices[4,2]=3 is beyond the causal limit 2"},
		{"top-k below -1", DSANPU, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) { in.TopKIndices[3] = -2 }, "Tensors.TopKIndices[1,0]=-2 is negative"},
		{"top-k duplicate", DSAMLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) {
			copy(in.TopKIndices[0:3], []int32{2, -1, 2})
		}, "Tensors.TopKIndices[0,2]=2 repeats"},
		{"top-k row all padding", DSAMLA, func(_ *Config, _ *BatchShape, in *Tensors, _ *[]float32) {
			copy(in.TopKIndices[6:9], []int32{-1, -1, -1})
		}, "row 2 (request 1) selects no token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, b, in := errorBase(t)
			b.SeqLens = append([]int(nil), b.SeqLens...)
			b.PrefixLens = append([]int(nil), b.PrefixLens...)
			out := make([]float32, b.Tokens()*cfg.Heads*cfg.VHeadDim)
			if c.edit != nil {
				c.edit(&cfg, &b, &in, &out)
			}
			err := Run(c.method, cfg, b, in, out)
			if err == nil {
				t.Fatalf("Run(%s) = nil error, want one containing %q", c.method, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run(%s) error = %q, want it to contain %q", c.method, err, c.want)
			}
		})
	}
}

func TestOtherEntryPointErrors(t *testing.T) {
	cfg, b, in := errorBase(t)
	bad := BatchShape{SeqLens: []int{2}, PrefixLens: []int{3}}
	if _, err := Reference(cfg, bad, in); err == nil || !strings.Contains(err.Error(), "extend_prefix_lens[0]: 3") {
		t.Errorf("Reference(bad batch) error = %v", err)
	}
	in2 := in
	in2.TopKIndices = append([]int32(nil), in.TopKIndices...)
	in2.TopKIndices[0] = 9
	if _, err := SparseReference(cfg, b, in2); err == nil || !strings.Contains(err.Error(), "TopKIndices[0,0]=9") {
		t.Errorf("SparseReference(bad index) error = %v", err)
	}
	if _, err := ApplyRoPE(cfg, b, Tensors{}); err == nil || !strings.Contains(err.Error(), "Tensors.QNope") {
		t.Errorf("ApplyRoPE(empty) error = %v", err)
	}
	if _, err := Layout(Config{}, b); err == nil || !strings.Contains(err.Error(), "heads: 0 ") {
		t.Errorf("Layout(zero config) error = %v", err)
	}
	if _, err := RandomTensors(rand.New(rand.NewPCG(1, 1)), cfg, bad); err == nil {
		t.Errorf("RandomTensors(bad batch) = nil error")
	}
	if _, err := ParseMethod("mla"); err == nil {
		t.Errorf("ParseMethod(mla) = nil error")
	}
	if m, err := ParseMethod("MLA_FUSED_ROPE"); err != nil || m != MLAFusedRopeROCm {
		t.Errorf("ParseMethod(MLA_FUSED_ROPE) = %v, %v", m, err)
	}
	if FLOPs("nope", cfg, b) != 0 || Bytes(MLA, cfg, bad) != 0 {
		t.Errorf("FLOPs/Bytes of invalid input should be 0")
	}
	l, _ := Layout(cfg, b)
	if _, _, err := l.SplitBytes(make([]byte, l.Bytes()+1)[1:]); err == nil || !strings.Contains(err.Error(), "aligned") {
		t.Errorf("SplitBytes(misaligned) error = %v", err)
	}
}
