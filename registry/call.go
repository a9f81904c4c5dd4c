package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// call runs f on be under limit and settles what the call came to: the
// registry's one switch over backend.Outcome, for dispatches, batches,
// kernels, modules, plans and a reload's self-test alike. Each caller's f
// is the same few lines on purpose: one method of Conn, its result kept
// for the caller. It returns
//
//   - nil, nil when be answered: the fallbacks of be that were open close
//     (fallbackLog.recovered);
//   - nil and ctx's error when ctx ended;
//   - otherwise the outcome to act on: be's own refusal (Declined,
//     ReasonRefused), its error saying that be refused what (the request,
//     the batch, the kernel call...), or why be could not answer
//     (Unavailable, Failed), which the caller falls back for.
//
// A plan call (backend.PlanCall) waits first, under ctx alone, until be
// runs fewer than backend.MaxPlanCalls of them (admit): its deadline
// starts once it runs.
func (r *Registry) call(ctx context.Context, be backend.Backend, limit backend.Limit, what string, f func(context.Context, backend.Conn) error) (*backend.Outcome, error) {
	if limit == backend.PlanCall {
		release, err := r.admit(ctx, be)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	o := be.Call(ctx, limit, f)
	switch o.Kind {
	case backend.Answered:
		r.fallbacks.recovered(be.Family())
		return nil, nil
	case backend.Canceled:
		return nil, o.Err
	case backend.Declined:
		o.Err = fmt.Errorf("plugin %s refused %s: %w", be.Family(), what, o.Err)
	}
	return &o, nil
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

// declined reports that o is its backend's own answer rather than a
// failure: the backend stays in service, and the caller answers another
// way without counting a fallback.
func declined(o *backend.Outcome) bool { return o.Kind == backend.Declined }

// retired returns the route in force for name when o says that a reload
// retired be, the backend of the route the request was sent by, and the
// route in force has another backend: the caller asks that route instead,
// and does not fall back. A request can take its route from one table and
// reach its plugin after a reload swapped the plugin out.
func (r *Registry) retired(o *backend.Outcome, be backend.Backend, name string) (*route, bool) {
	if o == nil || o.Reason != ReasonRetired {
		return nil, false
	}
	now := r.bound(r.table.Load(), name)
	return now, now.be != be
}

// swappedOut reports whether o says that a reload retired rt's plugin and
// a newer table routes rt's name elsewhere (retired).
func (r *Registry) swappedOut(o *backend.Outcome, rt *route) bool {
	_, ok := r.retired(o, rt.be, rt.name)
	return ok
}

// errSwappedOut marks a device-code call (modules, plan, kernel) that
// reached a plugin a reload had retired, whose name a newer table routes
// elsewhere: the call is made again by the route in force.
var errSwappedOut = errors.New("the plugin was swapped out by a reload")

// ask asks rt's backend for req's method, through call, under the name of
// rt's handler: the name a backend serves (the default route's backend,
// the triton rules, serves "triton" for every name routed to it). An
// answer outside the handler's declared methods is a protocol failure.
func (r *Registry) ask(ctx context.Context, rt *route, req *core.Request) (core.Method, *backend.Outcome, error) {
	if req.Backend != rt.handler.Name {
		cp := *req
		cp.Backend = rt.handler.Name
		req = &cp
	}
	var m core.Method
	fault, err := r.call(ctx, rt.be, backend.DispatchCall, "the request", func(ctx context.Context, c backend.Conn) (err error) {
		m, err = c.Dispatch(ctx, req)
		if err == nil && !rt.declares(m) {
			err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, req.Backend)
		}
		return err
	})
	return m, fault, err
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
	m, fault, err := r.ask(ctx, rt, req)
	if err != nil {
		return core.Answer{}, err
	}
	if now, ok := r.retired(fault, rt.be, req.Backend); ok {
		return r.decide(ctx, now, req)
	}
	if fault != nil {
		return r.fallback(ctx, req, rt, *fault)
	}
	if c := rt.cached(); c != nil {
		c.put(rt.keys.Key(req), m)
	}
	return rt.answer(m), nil
}
