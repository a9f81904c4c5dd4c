package registry

import (
	"context"
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
func (r *Registry) call(ctx context.Context, be backend.Backend, limit backend.Limit, what string, f func(context.Context, backend.Conn) error) (*backend.Outcome, error) {
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

// declined reports that o is its backend's own answer rather than a
// failure: the backend stays in service, and the caller answers another
// way without counting a fallback.
func declined(o *backend.Outcome) bool { return o.Kind == backend.Declined }

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
	if fault != nil {
		return r.fallback(ctx, req, rt, *fault)
	}
	if c := rt.cached(); c != nil {
		c.put(rt.keys.Key(req), m)
	}
	return rt.answer(m), nil
}
