package gpucheck

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// loopBackend is the decode kernels of package devkernels as a backend in
// the host's process, counting the plan requests that reach it: what a
// serving loop's registry asks.
type loopBackend struct {
	kernel core.Kernel
	mods   []core.KernelModule
	plans  atomic.Int64
}

func (b *loopBackend) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: "loop", Version: "1.0.0", DeviceCode: true, Handlers: []core.HandlerInfo{{
		Name: "fa3", Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA}, Kernels: []core.Kernel{b.kernel},
	}}}, nil
}

func (b *loopBackend) Dispatch(context.Context, *core.Request) (core.Method, error) {
	return core.MLA, nil
}

func (b *loopBackend) KernelModules(context.Context, core.DeviceInfo) ([]core.KernelModule, error) {
	return b.mods, nil
}

func (b *loopBackend) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	b.plans.Add(1)
	return devkernels.Plan(b.kernel, req)
}

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

// ServingLoop runs steps decode steps of c (a graph case with MaxSeqLen)
// as a serving loop does: the plan asked through a registry at every step
// (its cache answers all but the first), one CUDA graph captured for the
// step (seq_lens advanced by one on the device, the schedule, layers
// launches over as many KV caches) and replayed at every step, with no RPC,
// no host copy and no allocation. check runs after the steps whose index
// is 0, steps/2 and steps-1 (outputs poisoned before them), with the
// batch's lengths as the step left them.
func ServingLoop(e *Env, c Case, steps, layers int, check func(step int, b *Batch) error) (LoopFigures, error) {
	var fig LoopFigures
	if !c.Graph || c.MaxSeqLen == 0 {
		return fig, fmt.Errorf("gpucheck: a serving loop needs a graph case with MaxSeqLen")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	be := &loopBackend{kernel: c.CatalogKernel(), mods: e.Modules}
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{}, Backends: []core.Backend{be}, Logger: hclog.NewNullLogger(), ExpectedNames: []string{}})
	if err != nil {
		return fig, err
	}
	defer reg.Close()
	b, err := e.Alloc(c, layers)
	if err != nil {
		return fig, err
	}
	defer b.Free(e)
	plan, err := reg.PlanKernel(ctx, &b.Req)
	if err != nil {
		return fig, err
	}
	pr, err := e.Exec.Prepare(&b.Req, plan)
	if err != nil {
		return fig, err
	}
	defer pr.Close()
	var g cuda.Graph
	err = e.Dev.Do(func(x *cuda.Ctx) error {
		g, err = x.Capture(e.Stream(), func() error {
			if err := e.Advance(x, b); err != nil {
				return err
			}
			if err := pr.LaunchBatch(x, e.Stream(), b.Tensors(0)); err != nil {
				return err
			}
			for l := range layers {
				if err := pr.LaunchLayer(x, e.Stream(), b.Tensors(l)); err != nil {
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
	defer e.Dev.Do(func(x *cuda.Ctx) error { return x.DestroyGraph(g) })
	req := b.Req
	req.Shape.SeqLens = b.Case.SeqLens // advanced below, step by step
	var planNS, replayNS int64
	for step := range steps {
		sampled := step == 0 || step == steps/2 || step == steps-1
		for i := range b.Case.SeqLens {
			b.Case.SeqLens[i]++ // what the step's graph does to seq_lens on the device
		}
		t0 := time.Now()
		p, err := reg.PlanKernel(ctx, &req)
		planNS += time.Since(t0).Nanoseconds()
		if err != nil {
			return fig, fmt.Errorf("step %d: plan: %w", step, err)
		}
		if p != plan {
			return fig, fmt.Errorf("step %d: the registry answered another plan for the same batch size", step)
		}
		err = e.Dev.Do(func(x *cuda.Ctx) error {
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
			return fig, fmt.Errorf("step %d: %w", step, err)
		}
		if sampled && check != nil {
			if err := check(step, b); err != nil {
				return fig, err
			}
		}
	}
	fig.Plans = be.plans.Load()
	fig.PlanUS = float64(planNS) / float64(steps) / 1000
	fig.ReplayUS = float64(replayNS) / float64(steps) / 1000
	return fig, nil
}
