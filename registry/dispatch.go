package registry

import (
	"context"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// route is what one backend name resolves to in a route table: the
// backend that serves it, what its handler declared, and the cache of its
// answers.
type route struct {
	// What every answer from the cache reads comes first, together.
	name   string
	family string          // be.Family(), for the answers
	health *backend.Health // be.Health(), read on every answer
	cache  *answerCache    // nil: the handler's reads cannot be cached
	keys   *core.KeyPlan   // with cache: how requests are keyed

	be      backend.Backend // what serves the name: a plugin, or a backend in process
	handler core.HandlerInfo
	methods uint32 // bit m set: method m declared

	// Whether a backend serves the name, read by serves and usable alone.
	// down is set for a name a plugin should serve but none does (missing,
	// refused by the lock file): be is the fallback, and its requests
	// fall back for this reason.
	down *backend.Outcome
	// unknown marks the default route, that of every name no backend
	// serves: its backend, the triton rules, answers it, as in sglang,
	// unless the name was served before or its binary is broken
	// (unserved.go), or Config.Strict refuses it.
	unknown bool
}

func newRoute(h core.HandlerInfo, be backend.Backend, cache bool) *route {
	rt := &route{name: h.Name, be: be, family: be.Family(), health: be.Health(), handler: h}
	for _, m := range h.Methods {
		if m.Valid() {
			rt.methods |= 1 << m
		}
	}
	if plan, err := h.Reads.Plan(); cache && err == nil {
		rt.cache, rt.keys = &answerCache{}, plan
	}
	return rt
}

// cached returns the route's answer cache, to store its backend's answers
// in, or nil when answers must not be cached: facts that cannot be keyed,
// or a plugin whose running description differs from the one the route
// was built from.
func (rt *route) cached() *answerCache {
	if rt.cache == nil || rt.health.StaleDesc.Load() {
		return nil
	}
	return rt.cache
}

// answers returns the cache to answer from: the route's cache unless its
// backend is degraded (it cannot serve again by itself: quarantined, its
// binary gone, ended). Through a crash and the restart that follows, the
// cached answers stay: they are the same binary's (same SHA-256), whose
// rules are pure. A degraded backend's names go the way of a request the
// cache does not hold, and fall back with the same reason.
func (rt *route) answers() *answerCache {
	if c := rt.cached(); c != nil && !rt.health.Degraded.Load() {
		return c
	}
	return nil
}

// answer is rt's answer m.
func (rt *route) answer(m core.Method) core.Answer {
	return core.Answer{Method: m, Handler: rt.name, Plugin: rt.family}
}

func (rt *route) declares(m core.Method) bool { return m.Valid() && rt.methods&(1<<m) != 0 }

// serves reports that a backend serves rt's name: rt is neither the
// default route nor that of a name whose plugin is missing.
func (rt *route) serves() bool { return rt.down == nil && !rt.unknown }

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
	if !rt.unknown {
		return rt
	}
	if why := r.unserved(t, name); why != nil {
		own := *rt
		own.unknown, own.down = false, why
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

// noteDeprecated warns, once per registry and name, that a request asked
// the deprecated name of rt, unless Config.QuietDeprecated.
func (r *Registry) noteDeprecated(rt *route) {
	if rt.handler.Deprecated == "" || r.cfg.QuietDeprecated {
		return
	}
	if _, loaded := r.deprecated.LoadOrStore(rt.name, true); !loaded {
		r.log.Warn(core.MsgDeprecatedName, "backend", rt.name, "use", rt.handler.AliasOf, "reason", rt.handler.Deprecated)
	}
}

// binding is a Dispatcher's route and the table it came from.
type binding struct {
	table *routeTable
	rt    *route
}

type atomicBinding = atomic.Pointer[binding]
