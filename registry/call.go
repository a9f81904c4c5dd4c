package registry

import (
	"context"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// verdict is what a call came to, as its caller acts on it: the
// registry's one after-call decision, a closed set as backend.Outcome's
// kinds are, settled by call for dispatches, batches, kernels, modules,
// plans and a reload's self-test alike.
type verdict uint8

const (
	// answered: the backend answered; the fallbacks of it that were open
	// close (fallbackLog.recovered).
	answered verdict = iota
	// refused: the backend's own refusal (Declined, ReasonRefused): it
	// stays in service, and the caller answers another way without counting
	// a fallback.
	refused
	// moved: a reload retired the backend since the caller took its route,
	// and the route in force serves the name with another backend: the
	// caller asks that route (settled.now) and does not fall back. A
	// request can take its route from one table and reach its plugin after
	// a reload swapped the plugin out.
	moved
	// failed: the backend could not answer (Unavailable, Failed): the
	// caller falls back for settled.o.
	failed
)

// settled is what a call came to: its verdict; the outcome of a refusal,
// a failure or a move (the retirement); the route in force after a move.
type settled struct {
	verdict verdict
	o       *backend.Outcome
	now     *route
}

// call runs f on be under limit and settles what the call came to for the
// caller, who asked it for name (the route in force of the name is asked
// after a move; "" for a call outside any route, a reload's self-test). A
// refusal's error says that be refused what (the request, the batch, the
// kernel call...). When ctx ends, it returns ctx's error. Each caller's f is
// the same few lines on purpose: one method of Conn, its result kept for
// the caller.
//
// A plan call (backend.PlanCall) waits first, under ctx alone, until be
// runs fewer than backend.MaxPlanCalls of them (admit): its deadline
// starts once it runs.
func (r *Registry) call(ctx context.Context, be backend.Backend, name string, limit backend.Limit, what string, f func(context.Context, backend.Conn) error) (settled, error) {
	if limit == backend.PlanCall {
		release, err := r.admit(ctx, be)
		if err != nil {
			return settled{}, err
		}
		defer release()
	}
	o := be.Call(ctx, limit, f)
	switch o.Kind {
	case backend.Answered:
		r.fallbacks.recovered(be.Family())
		return settled{verdict: answered}, nil
	case backend.Canceled:
		return settled{}, o.Err
	case backend.Declined:
		o.Err = fmt.Errorf("plugin %s refused %s: %w", be.Family(), what, o.Err)
		return settled{verdict: refused, o: &o}, nil
	}
	if now, ok := r.moved(&o, be, name); ok {
		return settled{verdict: moved, o: &o, now: now}, nil
	}
	return settled{verdict: failed, o: &o}, nil
}

// moved returns the route in force for name when o says that a reload
// retired be and that route serves the name with another backend.
func (r *Registry) moved(o *backend.Outcome, be backend.Backend, name string) (*route, bool) {
	if o.Reason != ReasonRetired || name == "" {
		return nil, false
	}
	now := r.bound(r.table.Load(), name)
	return now, now.be != be
}

// admit waits until be runs fewer than backend.MaxPlanCalls plan calls, or
// ctx ends, and returns the release of the room it took.
func (r *Registry) admit(ctx context.Context, be backend.Backend) (release func(), err error) {
	gate := r.device(be).planGate()
	select {
	case gate <- struct{}{}:
		return func() { <-gate }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ask asks rt's backend for req's method, through call, under the name of
// rt's handler: the name a backend serves (the default route's backend,
// the triton rules, serves "triton" for every name routed to it). An
// answer outside the handler's declared methods is a protocol failure.
func (r *Registry) ask(ctx context.Context, rt *route, req *core.Request) (core.Method, settled, error) {
	name := req.Backend
	if req.Backend != rt.handler.Name {
		cp := *req
		cp.Backend = rt.handler.Name
		req = &cp
	}
	var m core.Method
	s, err := r.call(ctx, rt.be, name, backend.DispatchCall, "the request", func(ctx context.Context, c backend.Conn) (err error) {
		m, err = c.Dispatch(ctx, req)
		if err == nil && !rt.declares(m) {
			err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, req.Backend)
		}
		return err
	})
	return m, s, err
}

// newInProcess wraps b, a backend in the host's process, for the routes.
func (r *Registry) newInProcess(ctx context.Context, b core.Backend) (*backend.InProcess, error) {
	run := func(ctx context.Context, k core.Kernel, req *core.KernelRequest) (*core.KernelResult, error) {
		return r.cfg.runKernel(ctx, k, req)
	}
	return backend.NewInProcess(ctx, b, r.cfg.Host, run, r.log)
}

// decide answers a valid request by rt's backend, without the cache, and
// fills the cache with its answer.
func (r *Registry) decide(ctx context.Context, rt *route, req *core.Request) (core.Answer, error) {
	if why := r.usable(rt, req.Backend); why != nil {
		return r.fallback(ctx, req, rt, *why)
	}
	m, s, err := r.ask(ctx, rt, req)
	switch {
	case err != nil:
		return core.Answer{}, err
	case s.verdict == moved:
		return r.decide(ctx, s.now, req)
	case s.verdict != answered:
		return r.fallback(ctx, req, rt, *s.o)
	}
	if c := rt.cached(); c != nil {
		c.put(rt.keys.Key(req), m)
	}
	return rt.answer(m), nil
}
