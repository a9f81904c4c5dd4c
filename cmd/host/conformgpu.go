package main

import (
	"context"
	"fmt"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/internal/gpucheck"
)

// gpuLaunch is conform's Launch on this machine's GPU: the MLA decode and
// target-verify plans of a plugin run on generated tensors (shuffled
// pages, outputs poisoned first) and compared with the float64 reference
// of gpucheck within its tolerance. Other methods have no reference here
// (conformance.ErrLaunchNotCovered). close releases the GPU.
func gpuLaunch() (launch conformance.LaunchFunc, close func(), err error) {
	env, err := gpucheck.OpenDevice()
	if err != nil {
		return nil, nil, err
	}
	launch = func(ctx context.Context, mods []core.KernelModule, req *core.PlanRequest, plan func(*core.PlanRequest) (*core.Plan, error)) error {
		if req.Method != core.MLA || req.DType != "bf16" || req.Dims.HeadDimQK != 576 || req.Dims.HeadDimV != 512 {
			return conformance.ErrLaunchNotCovered
		}
		if err := env.Load(mods); err != nil {
			return fmt.Errorf("loading the modules: %w", err)
		}
		c := gpucheck.Case{Heads: req.Dims.Heads, PageSize: req.Shape.PageSize, SeqLens: req.Shape.SeqLens, QLens: req.Shape.QLens,
			Seed: uint64(len(req.Shape.SeqLens)), Graph: req.Graph, MaxSeqLen: req.Shape.MaxSeqLen}
		b, err := env.Alloc(c, 1)
		if err != nil {
			return fmt.Errorf("allocating the batch: %w", err)
		}
		defer b.Free(env)
		r := b.Req
		r.Backend = req.Backend
		p, err := plan(&r)
		if err != nil {
			return fmt.Errorf("the plan of the batch on the GPU: %w", err)
		}
		pr, err := env.Exec.Prepare(&r, p)
		if err != nil {
			return fmt.Errorf("preparing the plan: %w", err)
		}
		defer pr.Close()
		tensors, err := b.TensorsFor(pr.Tensors(), 0)
		if err != nil {
			return err
		}
		err = env.Dev.Do(func(x *cuda.Ctx) error {
			if err := b.Poison(x); err != nil {
				return err
			}
			return pr.Launch(x, env.Stream(), tensors)
		})
		if err != nil {
			return fmt.Errorf("launching: %w", err)
		}
		ch, err := env.Verify(b, 0, 24)
		if err != nil {
			return fmt.Errorf("reading the outputs: %w", err)
		}
		if !ch.OK() {
			return fmt.Errorf("the outputs differ from the float64 reference: %v (tolerance: relative error %.0e, lse %.0e; unwritten outputs are the poison left)",
				ch, gpucheck.MaxRelErr, gpucheck.MaxLSEErr)
		}
		return nil
	}
	return launch, func() { env.Close() }, nil
}
