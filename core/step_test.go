package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// v3Step is a DeepSeek-V3 decode step at tensor parallelism 8 over a pool
// smaller than the context length, as sglang's model runner holds it.
func v3Step() core.StepRequest {
	return core.StepRequest{
		Backend: "fa3", Mode: core.ModeDecode, Method: core.MLA,
		Model: core.StepModel{Heads: 16, KVLoraRank: 512, QKRopeHeadDim: 64, QKNopeHeadDim: 128, VHeadDim: 128, SoftmaxScale: 0.1352},
		Pool:  core.StepPool{PageSize: 64, Slots: 53056, MaxTokens: 53038, RowWidth: 163844, ContextLen: 163840},
		Batch: core.StepBatch{Size: 8, QueryTokens: 1, Graph: true}, Device: h200,
	}
}

var h200 = core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132}

// TestStepGraphBound: a graph step's plan holds for the longest request
// the pool admits, not the context length: DeepSeek-V3's 163840 over a
// pool of 53038 tokens gives 53038, which the cache's pages hold; a target
// verify's drafts come on top of the context length, within the pool.
func TestStepGraphBound(t *testing.T) {
	s := v3Step()
	req, bound, err := s.PlanRequest()
	if err != nil {
		t.Fatal(err)
	}
	if bound != 53038 || req.Shape.MaxSeqLen != 53038 || !req.Graph || req.Shape.NumPages != 53056/64 || len(req.Shape.SeqLens) != 8 || req.Shape.SeqLens[7] != 53038 {
		t.Errorf("bound %d, request %+v", bound, req.Shape)
	}
	if req.Dims != (core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352}) || req.DType != "bf16" || req.KVDType != "" || req.Method != core.MLA {
		t.Errorf("dims %+v dtype %q kv %q", req.Dims, req.DType, req.KVDType)
	}
	s.Pool.MaxTokens = 1 << 30 // a large pool: the context length, or the page table's width
	s.Mode, s.Batch.QueryTokens = core.ModeTargetVerify, 4
	if _, bound, _ = s.PlanRequest(); bound != 163844 {
		t.Errorf("verify of 4 drafts over a large pool: bound %d, want the context length + 4", bound)
	}
	s.Pool.RowWidth = 100000
	if _, bound, _ = s.PlanRequest(); bound != 100000 {
		t.Errorf("a narrower page table: bound %d", bound)
	}
}

// TestStepEagerBound: an eager step's plan holds for the least power of
// two at least its longest request (and 1024), within what the pool
// admits; a longer request than the pool admits is refused, naming it.
func TestStepEagerBound(t *testing.T) {
	for _, tc := range []struct {
		longest, want int64
	}{{1, 1024}, {1024, 1024}, {1025, 2048}, {30000, 32768}, {40000, 53038}, {53038, 53038}} {
		s := v3Step()
		s.Batch.Graph = false
		s.Batch.SeqLens = []int64{1, 5, tc.longest, 3, 1, 1, 1, 1}
		req, bound, err := s.PlanRequest()
		if err != nil || bound != tc.want || req.Shape.MaxSeqLen != tc.want {
			t.Errorf("longest %d: bound %d (%v), want %d", tc.longest, bound, err, tc.want)
		}
	}
	s := v3Step()
	s.Batch.Graph = false
	s.Batch.SeqLens = []int64{1, 1, 1, 1, 1, 1, 1, 53039}
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "batch.seq_lens") || !strings.Contains(err.Error(), "53039") {
		t.Errorf("a request longer than the pool: %v", err)
	}
}

// TestStepKinds: an FP8 pool asks for the FP8 cache, a sparse layer for
// the top-k, an MHA method for the prefill dims over the batch's lengths.
func TestStepKinds(t *testing.T) {
	s := v3Step()
	s.Pool.KVDType = "fp8_e4m3"
	s.Model.IndexTopK = 2048
	req, _, err := s.PlanRequest()
	if err != nil || req.KVDType != "fp8_e4m3" || req.Dims.TopK != 2048 {
		t.Errorf("sparse FP8: %+v, %v", req, err)
	}
	// A sparse step's plan is of its query tokens alone, each a request
	// of one: a verify of 8 requests of 3 drafts and an extend of 24
	// tokens in 2 requests ask for the same plan.
	s.Mode, s.Batch.QueryTokens = core.ModeTargetVerify, 3
	verify, _, err := s.PlanRequest()
	if err != nil || len(verify.Shape.QLens) != 24 || len(verify.Shape.SeqLens) != 24 || verify.Shape.QLens[23] != 1 {
		t.Fatalf("a sparse verify: %+v, %v", verify.Shape, err)
	}
	s.Mode, s.Batch = core.ModeExtend, core.StepBatch{Size: 2, Graph: true, QLens: []int64{20, 4}}
	extend, _, err := s.PlanRequest()
	if err != nil || extend.Key(core.PlanReadsAll) != verify.Key(core.PlanReadsAll) {
		t.Errorf("a sparse extend of 24 tokens: %+v, %v; its key differs from the verify's", extend.Shape, err)
	}
	s.Batch.QLens = []int64{20, 0}
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "batch.q_lens: [1] 0 is outside [1, ") {
		t.Errorf("a request of no query tokens: %v", err)
	}
	small := v3Step()
	small.Pool.Slots = 63
	if _, _, err := small.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "pool.slots: 63 hold no page of pool.page_size 64") {
		t.Errorf("a pool of less than a page: %v", err)
	}
	s.Batch.QLens = []int64{1 << 24, 1 << 24}
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "query tokens on a sparse layer") {
		t.Errorf("a sparse step of 2^25 query tokens: %v", err)
	}
	s = v3Step()
	s.Mode, s.Method = core.ModeExtend, core.MHAChunkedKV
	s.Batch = core.StepBatch{Size: 2, SeqLens: []int64{9000, 300}, QLens: []int64{1000, 300}, ChunkCapacity: 4096}
	req, bound, err := s.PlanRequest()
	if err != nil || bound != 0 || req.Graph || req.Dims.HeadDimQK != 192 || req.Dims.HeadDimV != 128 || req.Shape.ChunkCapacity != 4096 || req.Shape.QLens[0] != 1000 {
		t.Errorf("chunked prefill: %+v bound %d, %v", req, bound, err)
	}
	// A prefix chunk's pass: the chunk's keys of each request, none for a
	// prefix that ended before it; a key of its own.
	s.Batch = core.StepBatch{Size: 2, SeqLens: []int64{4096, 0}, QLens: []int64{1000, 300}, PrefixChunk: true}
	req, _, err = s.PlanRequest()
	if err != nil || !req.Shape.PrefixChunk || req.Shape.SeqLens[1] != 0 {
		t.Errorf("a prefix chunk: %+v, %v", req, err)
	}
	k := req
	k.Shape.PrefixChunk = false
	if req.Key(core.PlanReadsAll) == k.Key(core.PlanReadsAll) {
		t.Error("a prefix chunk's request shares a key with the causal pass's")
	}
	s.Batch.SeqLens = []int64{4096, -1}
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "batch.seq_lens: [1] -1 is outside [0, ") {
		t.Errorf("a prefix chunk of -1 keys: %v", err)
	}
	s.Batch.SeqLens, s.Method = []int64{4096, 0}, core.MHAOneShot
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "batch.prefix_chunk") {
		t.Errorf("a prefix chunk of MHA_ONE_SHOT: %v", err)
	}
	s.Method = core.MHAChunkedKV
	s.Batch = core.StepBatch{Size: 2, Graph: true, QueryTokens: 1}
	if _, _, err := s.PlanRequest(); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("an MHA step in a graph: %v", err)
	}
}

// TestStepRefusals: every field no engine sends is refused by name.
func TestStepRefusals(t *testing.T) {
	for field, edit := range map[string]func(*core.StepRequest){
		"backend":             func(s *core.StepRequest) { s.Backend = "" },
		"model.heads":         func(s *core.StepRequest) { s.Model.Heads = 0 },
		"pool.page_size":      func(s *core.StepRequest) { s.Pool.PageSize = -1 },
		"pool.context_len":    func(s *core.StepRequest) { s.Pool.ContextLen = 1 << 40 },
		"pool.kv_dtype":       func(s *core.StepRequest) { s.Pool.KVDType = "fp4" },
		"model.softmax_scale": func(s *core.StepRequest) { s.Model.SoftmaxScale = -1 },
		"batch.size":          func(s *core.StepRequest) { s.Batch.Size = 1 << 20 },
		"batch.seq_lens":      func(s *core.StepRequest) { s.Batch.SeqLens = []int64{5} },
		"batch.query_tokens":  func(s *core.StepRequest) { s.Batch.QueryTokens = 0 },
		"method":              func(s *core.StepRequest) { s.Method = core.MLANPU },
		"mode":                func(s *core.StepRequest) { s.Mode = 0 },
		// The model's dims, named as the engine gives them, not as the
		// plan request made of them (dims.head_dim_qk, dims.head_dim_v).
		"model.kv_lora_rank: 0 is outside [1, 1024]":       func(s *core.StepRequest) { s.Model.KVLoraRank = 0 },
		"model.qk_rope_head_dim: -64 is outside [1, 1024]": func(s *core.StepRequest) { s.Model.QKRopeHeadDim = -64 },
		"model.kv_lora_rank: 1000 and qk_rope_head_dim 64 make a latent cache 1064 wide, more than 1024": func(s *core.StepRequest) {
			s.Model.KVLoraRank = 1000
		},
		"model.v_head_dim: 0 is outside [1, 1024]": func(s *core.StepRequest) { s.Model.VHeadDim = 0 },
		"model.v_head_dim: 256 is more than qk_nope_head_dim 128 + qk_rope_head_dim 64 (192)": func(s *core.StepRequest) {
			s.Method, s.Mode, s.Batch = core.MHA, core.ModeExtend, core.StepBatch{Size: 1, SeqLens: []int64{9}, QLens: []int64{9}}
			s.Model.VHeadDim = 256
		},
	} {
		s := v3Step()
		edit(&s)
		_, _, err := s.PlanRequest()
		if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestPlanKey: two requests share a key only where they agree on what the
// plan reads; the base key ignores the lengths.
func TestPlanKey(t *testing.T) {
	s := v3Step()
	a, _, _ := s.PlanRequest()
	b := a
	b.Shape.SeqLens = []int64{1, 2, 3, 4, 5, 6, 7, 8}
	if a.Key(core.PlanReadsDeclared) != b.Key(core.PlanReadsDeclared) || a.Key(0) != b.Key(0) {
		t.Error("the lengths change a key that does not read them")
	}
	if a.Key(core.PlanReadsAll) == b.Key(core.PlanReadsAll) {
		t.Error("the lengths do not change a key that reads them")
	}
	c := a
	c.Dims.Heads = 128
	if a.Key(core.PlanReadsDeclared) == c.Key(core.PlanReadsDeclared) {
		t.Error("the heads do not change the key")
	}
	if k := a.Key(0).String(); len(k) != 64 {
		t.Errorf("key %q", k)
	}
}
