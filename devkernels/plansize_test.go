package devkernels

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// TestPlansWithinCoreBounds: the planners refuse, before planning, a
// request past core's bounds (the request of issue 40: one request of a
// million keys at chunk capacity 1, which made fa3 plan a million passes),
// and plan the largest requests within them within the bounds of a plan,
// which the host's check passes.
func TestPlansWithinCoreBounds(t *testing.T) {
	mha := core.Kernel{Name: "flash_attn_varlen_func+merge_state", Method: core.MHAChunkedKV, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}}
	prefill := func(seq, q []int64, capacity int) *core.PlanRequest {
		return &core.PlanRequest{
			Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
			Dims:   core.PlanDims{Heads: 128, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
			Shape:  core.PlanShape{SeqLens: seq, QLens: q, ChunkCapacity: capacity},
			Device: h200,
		}
	}
	_, err := Plan(mha, prefill([]int64{1 << 20}, []int64{1}, 1))
	if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "shape.chunk_capacity") {
		t.Fatalf("the request of issue 40: %v, want ErrInvalidRequest naming shape.chunk_capacity", err)
	}

	// The most chunk ranges: 914 requests, the first of DeepSeek-V3's
	// full context, at sglang's chunk capacity.
	b := 914
	seq, q := slices.Repeat([]int64{2}, b), slices.Repeat([]int64{1}, b)
	seq[0] = 163840
	// The most chunks: one request, at the least capacity within them.
	one := prefill([]int64{163840}, []int64{1}, 40)
	// The most query tokens, chunked: 32 requests of 8192 new tokens over
	// prefixes as long.
	many := prefill(slices.Repeat([]int64{16384}, 32), slices.Repeat([]int64{8192}, 32), 0)
	// A sparse extend of the most query tokens: the most requests, 4 new
	// tokens each.
	sparse := request(128, 64, slices.Repeat([]int64{4096}, launch.MaxBatch), slices.Repeat([]int64{core.MaxPlanTokens / launch.MaxBatch}, launch.MaxBatch), false)
	sparse.Dims.TopK, sparse.Shape.NumPages = 2048, 1<<16
	for _, tc := range []struct {
		name string
		k    core.Kernel
		req  *core.PlanRequest
	}{
		{"most chunk ranges", mha, prefill(seq, q, 0)},
		{"most chunks", mha, one},
		{"most tokens", mha, many},
		{"sparse, most tokens", dsaSparse, sparse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.req.CheckSize(); err != nil {
				t.Fatalf("the request is past core's bounds: %v", err)
			}
			p, err := Plan(tc.k, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckSize(); err != nil {
				t.Fatalf("the plan is past core's bounds: %v", err)
			}
			if err := launch.Check(p, tc.req, specFor(tc.req.Device.ComputeCapability), tc.req.Device); err != nil {
				t.Fatalf("the host's check: %v", err)
			}
		})
	}
}
