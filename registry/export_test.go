package registry

import (
	"context"

	"github.com/attnplug/attnplug/core"
)

// The calls below take their routes, run between, then ask: a request
// that looked its route up before a reload (between) swapped the route's
// plugin out, and reaches the plugin after.

// DispatchAfter is Dispatch by the route of req.Backend looked up before
// between.
func (r *Registry) DispatchAfter(ctx context.Context, req *core.Request, between func()) (core.Answer, error) {
	rt := r.table.Load().route(req.Backend)
	between()
	return r.dispatch(ctx, rt, req)
}

// DispatchBatchAfter is DispatchBatch by the routes in force before
// between.
func (r *Registry) DispatchBatchAfter(ctx context.Context, reqs []core.Request, out []BatchAnswer, between func()) error {
	t := r.table.Load()
	between()
	return r.dispatchBatch(ctx, t, reqs, out)
}

// PlanKernelAfter is PlanKernel by the route of req.Backend looked up
// before between.
func (r *Registry) PlanKernelAfter(ctx context.Context, req *core.PlanRequest, between func()) (*core.Plan, error) {
	rt, err := r.deviceBackend(req.Backend)
	if err != nil {
		return nil, err
	}
	between()
	return r.planKernel(ctx, req, rt)
}
