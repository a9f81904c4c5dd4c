package gpucheck

import (
	"context"
	"fmt"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/registry"
)

// LoopFigures are what a serving loop measured.
type LoopFigures struct {
	// Plans is the plan requests that reached the backend.
	Plans int64
	// PlanUS is the host's time per step asking the registry for the
	// step's plan (answered from its cache), in microseconds.
	PlanUS float64
	// ReplayUS is the host's time per step launching the step's graph.
	ReplayUS float64
}

// ServingLoop runs steps decode steps of c (a graph batch with MaxSeqLen)
// as a serving loop does, with the plans of backend from reg, whose
// backend counts the plan requests that reach it (counted): the plan asked
// of the registry at every step (its cache answers all but the first), one
// CUDA graph captured for the step (seq_lens advanced by one on the
// device, the schedule, layers launches over as many KV caches) and
// replayed at every step, with no RPC, no host copy and no allocation.
// check runs after the steps whose index is 0, steps/2 and steps-1
// (outputs poisoned before them), with the batch's lengths as the step
// left them.
func ServingLoop(e *devicecheck.Env, reg *registry.Registry, counted *Counted, backend string, c devicecheck.MLA, steps, layers int,
	check func(step int, b *devicecheck.MLABatch) error) (LoopFigures, error) {
	var fig LoopFigures
	if !c.Graph || c.MaxSeqLen == 0 {
		return fig, fmt.Errorf("gpucheck: a serving loop needs a graph batch with MaxSeqLen")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := counted.Plans.Load()
	b, err := e.AllocMLA(c, layers)
	if err != nil {
		return fig, err
	}
	defer b.Free()
	req := b.Req
	req.Backend = backend
	plan, err := reg.PlanKernel(ctx, &req)
	if err != nil {
		return fig, err
	}
	pr, err := e.Host.Plan(ctx, &req)
	if err != nil {
		return fig, err
	}
	defer pr.Close()
	if pr.Plan() != plan {
		return fig, fmt.Errorf("the host prepared another plan than the registry's")
	}
	step := devicehost.NewStep(pr, e.Stream(), nil)
	var g cuda.Graph
	err = e.Do(func(x *cuda.Ctx) error {
		g, err = x.Capture(e.Stream(), func() error {
			if err := b.Advance(x); err != nil {
				return err
			}
			if err := step.Batch(x, b.Tensors(0)); err != nil {
				return err
			}
			for l := range layers {
				if err := step.Layer(x, b.Tensors(l)); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return fig, err
	}
	defer e.Do(func(x *cuda.Ctx) error { return x.DestroyGraph(g) })
	req.Shape.SeqLens = b.Case.SeqLens // advanced below, step by step
	var planNS, replayNS int64
	for s := range steps {
		sampled := s == 0 || s == steps/2 || s == steps-1
		for i := range b.Case.SeqLens {
			b.Case.SeqLens[i]++ // what the step's graph does to seq_lens on the device
		}
		t0 := time.Now()
		p, err := reg.PlanKernel(ctx, &req)
		planNS += time.Since(t0).Nanoseconds()
		if err != nil {
			return fig, fmt.Errorf("step %d: plan: %w", s, err)
		}
		if p != plan {
			return fig, fmt.Errorf("step %d: the registry answered another plan for the same batch size", s)
		}
		err = e.Do(func(x *cuda.Ctx) error {
			if sampled {
				if err := b.Poison(x); err != nil {
					return err
				}
			}
			t0 := time.Now()
			err := x.LaunchGraph(g, e.Stream())
			replayNS += time.Since(t0).Nanoseconds()
			return err
		})
		if err != nil {
			return fig, fmt.Errorf("step %d: %w", s, err)
		}
		if sampled && check != nil {
			if err := check(s, b); err != nil {
				return fig, err
			}
		}
	}
	fig.Plans = counted.Plans.Load() - before
	fig.PlanUS = float64(planNS) / float64(steps) / 1000
	fig.ReplayUS = float64(replayNS) / float64(steps) / 1000
	return fig, nil
}

var _ core.KernelPlanner = (*Counted)(nil)
