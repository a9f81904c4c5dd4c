package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// errPanicked marks a call during which an in-process backend panicked.
var errPanicked = errors.New("panicked")

// connectLocal makes b, in this process, the backend the checks ask: every
// call behind guard, every request compared before and after the call,
// with exactly the sides b has (batch, kernels, device code).
func (s *suite) connectLocal(b core.Backend) {
	l := &local{b: b}
	s.backend = l
	if bb, ok := b.(core.BatchBackend); ok {
		s.batcher = localBatch{l, bb}
	}
	if kr, ok := b.(core.KernelRunner); ok {
		s.runner = localRunner{kr}
	}
	if kp, ok := b.(core.KernelPlanner); ok {
		s.planner = localPlanner{kp}
	}
}

type local struct{ b core.Backend }

func (l *local) Describe(ctx context.Context) (*core.Description, error) {
	return guard(ctx, "Describe", l.b.Describe)
}

func (l *local) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	before := wire.CloneRequest(req)
	m, err := guard(ctx, "Dispatch", func(ctx context.Context) (core.Method, error) { return l.b.Dispatch(ctx, req) })
	if err == nil {
		err = wire.RequestChanged(&before, req)
	}
	return m, err
}

type localBatch struct {
	*local
	bb core.BatchBackend
}

func (l localBatch) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.Result) error {
	before := make([]core.Request, len(reqs))
	for i := range reqs {
		before[i] = wire.CloneRequest(&reqs[i])
	}
	_, err := guard(ctx, "DispatchBatch", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.bb.DispatchBatch(ctx, reqs, out)
	})
	if err != nil {
		return err
	}
	for i := range before {
		if err := wire.RequestChanged(&before[i], &reqs[i]); err != nil && out[i].Err == nil {
			out[i] = core.Result{Err: err}
		}
	}
	return nil
}

type localRunner struct{ kr core.KernelRunner }

func (l localRunner) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	return guard(ctx, "RunKernel", func(ctx context.Context) (*core.KernelResult, error) { return l.kr.RunKernel(ctx, req) })
}

type localPlanner struct{ kp core.KernelPlanner }

func (l localPlanner) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	return guard(ctx, "KernelModules", func(ctx context.Context) ([]core.KernelModule, error) { return l.kp.KernelModules(ctx, dev) })
}

func (l localPlanner) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	return guard(ctx, "PlanKernel", func(ctx context.Context) (*core.Plan, error) { return l.kp.PlanKernel(ctx, req) })
}

// guard calls f in a goroutine of its own and returns what it returns, or
// an error wrapping ctx's when ctx ends first (f is left to finish), or an
// error wrapping errPanicked when f panics: so that a backend in the
// suite's process that hangs or panics fails a check instead of the run.
func guard[T any](ctx context.Context, call string, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("the backend %w in %s: %v", errPanicked, call, r)}
			}
		}()
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%s did not return when its context ended: %w", call, ctx.Err())
	}
}
