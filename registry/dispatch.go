package registry

import (
	"context"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
)

// Dispatch answers req. It fills an unset platform (in a copy: req is
// never modified), validates the request (an invalid one returns an error
// wrapping core.ErrInvalidRequest), and asks the backend serving
// req.Backend, a plugin or one in process, unless its answer for
// requests like this one is known already: a handler declares the facts its
// rules read, and answers are cached by those facts. When the plugin cannot
// answer, the triton rules do and the answer says why in Fallback, or, with
// Config.Strict, Dispatch returns an error wrapping core.ErrRefused. req is
// not modified.
func (r *Registry) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	return r.dispatch(ctx, r.table.Load().route(req.Backend), req)
}

// Dispatcher answers the requests of one backend name. Resolve it once and
// call Dispatch per layer: after the first requests of each kind it answers
// from the cache of the plugin's answers, without a call to the plugin and
// without allocating. It follows reloads. It is safe for concurrent use.
type Dispatcher struct {
	r    *Registry
	name string
	cur  atomicBinding
}

// Resolve returns the Dispatcher of name. Any name resolves: one that no
// plugin serves is answered by the triton rules.
func (r *Registry) Resolve(name string) *Dispatcher {
	d := &Dispatcher{r: r, name: name}
	d.bind()
	return d
}

// Name returns the backend name d answers.
func (d *Dispatcher) Name() string { return d.name }

func (d *Dispatcher) bind() *binding {
	t := d.r.table.Load()
	b := &binding{table: t, rt: d.r.bound(t, d.name)}
	d.cur.Store(b)
	return b
}

// bound returns the route a Dispatcher of name holds while t is in force:
// t's route of the name or, for a name of the default route, one of its
// own. Whether such a name falls back, is refused, or is the triton rules'
// silently (unserved) depends on t alone, so it is settled here, once per
// table, and the name's own route caches the triton rules' answers: a
// forward pass over "triton" costs a cache lookup per layer, as one over a
// plugin's name does.
func (r *Registry) bound(t *routeTable, name string) *route {
	rt := t.route(name)
	if rt.kind != defaultRoute {
		return rt
	}
	if why := r.unserved(t, name); why != nil {
		own := *rt
		own.kind, own.down = downRoute, why
		return &own
	}
	r.noteUnknown(name)
	return newRoute(rt.handler, rt.be, !r.cfg.NoAnswerCache)
}

func (d *Dispatcher) route() *route {
	b := d.cur.Load()
	if b.table != d.r.table.Load() {
		b = d.bind()
	}
	return b.rt
}

// Dispatch answers req as Registry.Dispatch does; req.Backend is ignored:
// the Dispatcher's name is asked.
func (d *Dispatcher) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	if req.Backend != d.name {
		cp := *req
		cp.Backend = d.name
		req = &cp
	}
	return d.r.dispatch(ctx, d.route(), req)
}

// Pass answers the layers of one forward pass: the batch and runtime facts
// are checked and summed once, and each layer then costs a cache lookup.
type Pass struct {
	d        *Dispatcher
	rt       *route
	req      core.Request
	sum      sums
	keys     *core.KeyPlan // the plan that keys the batch (KeyPlan.Select)
	batchKey core.Key
}

type sums struct{ prefix, seq int64 }

// Begin starts a forward pass over batch with runtime. It validates both,
// as Dispatch does, and returns the error of an invalid request. The
// slices of batch must not change until the pass is done.
func (d *Dispatcher) Begin(batch *core.Batch, runtime *core.Runtime) (*Pass, error) {
	p := &Pass{}
	if err := d.BeginInto(p, batch, runtime); err != nil {
		return nil, err
	}
	return p, nil
}

// BeginInto is Begin into a Pass the caller owns, so that a forward loop
// allocates nothing.
func (d *Dispatcher) BeginInto(p *Pass, batch *core.Batch, runtime *core.Runtime) error {
	p.d, p.rt = d, d.route()
	p.req = core.Request{Backend: d.name, Batch: *batch, Runtime: *runtime}
	p.req.Layer = core.Layer{ChunkedPrefixCacheThreshold: core.DefaultChunkedPrefixCacheThreshold}
	if p.req.Runtime.Platform == core.PlatformUnset {
		p.req.Runtime.Platform = d.r.cfg.Platform
	}
	if err := p.req.Validate(); err != nil {
		return err
	}
	d.r.noteDeprecated(p.rt)
	p.sum = sums{prefix: batch.PrefixSum(), seq: batch.SeqSum()}
	p.keys, p.batchKey = nil, 0
	if p.rt.cached() != nil {
		p.keys = p.rt.keys.Select(&p.req)
		p.batchKey = p.keys.BatchKey(&p.req, p.sum.prefix, p.sum.seq)
	}
	return nil
}

// Dispatch answers the pass's batch for one layer.
func (p *Pass) Dispatch(ctx context.Context, layer *core.Layer) (core.Answer, error) {
	rt := p.rt
	if now := p.d.route(); now != rt {
		// A reload replaced the route since Begin: the new one answers.
		req := p.req
		req.Layer = *layer
		return p.d.r.dispatch(ctx, now, &req)
	}
	if c := rt.answers(); c != nil && p.keys != nil {
		k := p.batchKey | p.keys.LayerKey(layer, p.sum.prefix)
		if m, ok := c.get(k); ok {
			return rt.answer(m), nil
		}
	}
	req := p.req
	req.Layer = *layer
	return p.d.r.decide(ctx, rt, &req)
}

// dispatch prepares and validates req, then decides it by rt.
func (r *Registry) dispatch(ctx context.Context, rt *route, req *core.Request) (core.Answer, error) {
	if req.Runtime.Platform == core.PlatformUnset {
		cp := *req
		cp.Runtime.Platform = r.cfg.Platform
		req = &cp
	}
	if err := req.Validate(); err != nil {
		return core.Answer{}, err
	}
	r.noteDeprecated(rt)
	if c := rt.answers(); c != nil {
		if m, ok := c.get(rt.keys.Key(req)); ok {
			return rt.answer(m), nil
		}
	}
	return r.decide(ctx, rt, req)
}

// binding is a Dispatcher's route and the table it came from.
type binding struct {
	table *routeTable
	rt    *route
}

type atomicBinding = atomic.Pointer[binding]
