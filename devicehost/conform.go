package devicehost

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
)

// ErrNotCovered is what RunPlan returns for a plan request it has no
// float64 reference for.
var ErrNotCovered = errors.New("no float64 reference on the GPU for this plan request")

// RunPlan is attnplug conform's launch on this GPU (conformance.LaunchFunc,
// with ErrNotCovered for its ErrLaunchNotCovered): an MLA decode or
// target-verify plan request of a plugin runs on generated tensors
// (shuffled pages, outputs poisoned first) with mods loaded, the plan
// asked of plan (which checks it, as conform checks every plan: it is
// prepared without a second check), and is compared with the float64
// reference within MaxRelErr and MaxLSEErr. Other methods have no
// reference here (ErrNotCovered).
func (e *Env) RunPlan(ctx context.Context, mods []core.KernelModule, req *core.PlanRequest, plan func(*core.PlanRequest) (*core.Plan, error)) error {
	if req.Method != core.MLA || req.DType != "bf16" || req.Dims.HeadDimQK != 576 || req.Dims.HeadDimV != 512 {
		return ErrNotCovered
	}
	if err := e.Load(mods); err != nil {
		return fmt.Errorf("loading the modules: %w", err)
	}
	c := Case{Heads: req.Dims.Heads, PageSize: req.Shape.PageSize, SeqLens: req.Shape.SeqLens, QLens: req.Shape.QLens,
		Seed: uint64(len(req.Shape.SeqLens)), Graph: req.Graph, MaxSeqLen: req.Shape.MaxSeqLen}
	b, err := e.Alloc(c, 1)
	if err != nil {
		return fmt.Errorf("allocating the batch: %w", err)
	}
	defer b.Free(e)
	r := b.Req
	r.Backend = req.Backend
	p, err := plan(&r)
	if err != nil {
		return fmt.Errorf("the plan of the batch on the GPU: %w", err)
	}
	pr, err := e.Exec.PrepareChecked(&r, p)
	if err != nil {
		return fmt.Errorf("preparing the plan: %w", err)
	}
	defer pr.Close()
	tensors, err := b.TensorsFor(pr.Tensors(), 0)
	if err != nil {
		return err
	}
	err = e.Dev.Do(func(x *cuda.Ctx) error {
		if err := b.Poison(x); err != nil {
			return err
		}
		return pr.Launch(x, e.stream, tensors)
	})
	if err != nil {
		return fmt.Errorf("launching: %w", err)
	}
	ch, err := e.Verify(b, 0, 24)
	if err != nil {
		return fmt.Errorf("reading the outputs: %w", err)
	}
	if !ch.OK() {
		return fmt.Errorf("the outputs differ from the float64 reference: %v (tolerance: relative error %.0e, lse %.0e; unwritten outputs are the poison left)",
			ch, MaxRelErr, MaxLSEErr)
	}
	return nil
}
