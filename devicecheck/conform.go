package devicecheck

import (
	"context"
	"errors"

	"github.com/attnplug/attnplug/core"
)

// ErrNotCovered is what WorkloadFor and RunPlan return for a plan request
// the verification layer has no float64 reference for.
var ErrNotCovered = errors.New("no float64 reference on the GPU for this plan request")

// WorkloadFor returns the workload that checks a batch shaped as req, a
// plan request (seeded by its batch size): MLA in bf16 over a bf16 cache
// (MLA), over an FP8 cache or sparse over each token's top-k (Quant), both
// 576/512 wide; the MHA methods 192/128 wide (Prefill). The workload's
// batch asks its own plan request, of the same method, dtypes, heads and
// lengths (its softmax scale and cache size are the layer's own). Other
// requests wrap ErrNotCovered.
func WorkloadFor(req *core.PlanRequest) (Workload, error) {
	d, s := req.Dims, req.Shape
	seed := uint64(len(s.SeqLens))
	if req.DType != "bf16" {
		return nil, ErrNotCovered
	}
	switch req.Method {
	case core.MLA:
		if d.HeadDimQK != 576 || d.HeadDimV != 512 {
			return nil, ErrNotCovered
		}
		fp8 := req.CacheDType() == "fp8_e4m3"
		if !fp8 && req.CacheDType() != "bf16" {
			return nil, ErrNotCovered
		}
		if fp8 || d.TopK > 0 {
			return Quant{Heads: d.Heads, PageSize: s.PageSize, SeqLens: s.SeqLens, QLens: s.QLens, TopK: d.TopK, FP8: fp8,
				Seed: seed, Graph: req.Graph, Split: req.QuerySplit}, nil
		}
		return MLA{Heads: d.Heads, PageSize: s.PageSize, SeqLens: s.SeqLens, QLens: s.QLens, Seed: seed, Graph: req.Graph,
			MaxSeqLen: s.MaxSeqLen, Split: req.QuerySplit}, nil
	case core.MHA, core.MHAOneShot, core.MHAChunkedKV:
		if d.HeadDimQK != 192 || d.HeadDimV != 128 || req.CacheDType() != "bf16" {
			return nil, ErrNotCovered
		}
		return Prefill{Method: req.Method, Heads: d.Heads, SeqLens: s.SeqLens, QLens: s.QLens, ChunkCapacity: s.ChunkCapacity, Seed: seed}, nil
	}
	return nil, ErrNotCovered
}

// RunPlan is attnplug conform's launch on this GPU: the batch of req
// (WorkloadFor: tensors generated on the device, pages shuffled, outputs
// poisoned first) run through Run with the plans of req.Backend from the
// Env's Source, the plugin under test, which checks each plan as conform
// checks every plan (Run prepares it without a second check), and compared
// with the float64 reference within MaxRelErr and MaxLSEErr. A request
// without a reference here wraps ErrNotCovered.
func (e *Env) RunPlan(ctx context.Context, req *core.PlanRequest) error {
	w, err := WorkloadFor(req)
	if err != nil {
		return err
	}
	r, err := e.Run(ctx, req.Backend, w, 1, 24)
	if r != nil {
		r.Close()
	}
	return err
}
