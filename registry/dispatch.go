package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// route is what one backend name resolves to in a route table.
type route struct {
	name    string
	plugin  *plugin // nil: no plugin serves the name
	handler core.HandlerInfo
	methods uint32        // bit m set: method m declared
	cache   *answerCache  // nil: the handler's reads cannot be cached
	keys    *core.KeyPlan // with cache: how requests are keyed
	missing bool          // an expected name that no plugin serves
	why     error         // with missing: what was refused that may serve it, and why
}

func newRoute(h core.HandlerInfo, p *plugin, cache bool) *route {
	rt := &route{name: h.Name, plugin: p, handler: h}
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

// cached returns the route's answer cache, to store the plugin's answers
// in, or nil when answers must not be cached: no route, facts that cannot
// be keyed, or a plugin whose running description differs from the one
// the route was built from.
func (rt *route) cached() *answerCache {
	if rt == nil || rt.cache == nil || rt.plugin.staleDesc.Load() {
		return nil
	}
	return rt.cache
}

// answers returns the cache to answer from: the route's cache while its
// plugin is healthy, nil otherwise. From a plugin's failure until it
// answers again (or once it has ended), every request of its names goes
// the way of a request that the cache does not hold, and falls back with
// the same reason: a cached answer is never served for a plugin that is
// not serving.
func (rt *route) answers() *answerCache {
	if c := rt.cached(); c != nil && !rt.plugin.degraded.Load() {
		return c
	}
	return nil
}

func (rt *route) declares(m core.Method) bool { return m.Valid() && rt.methods&(1<<m) != 0 }

// Result is the outcome of one request of a batch.
type Result struct {
	// Answer is valid when Err is nil.
	Answer core.Answer
	// Err is why the request was not decided.
	Err error
}

// Dispatch answers req. It fills an unset platform, validates the request
// (an invalid one returns an error wrapping core.ErrInvalidRequest), and
// asks the plugin serving req.Backend, unless the plugin's answer for
// requests like this one is known already: a handler declares the facts its
// rules read, and answers are cached by those facts. When the plugin cannot
// answer, the triton rules do and the answer says why in Fallback, or, with
// Config.Strict, Dispatch returns an error wrapping core.ErrRefused. req is
// not modified.
func (r *Registry) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	return r.dispatch(ctx, r.table.Load().routes[req.Backend], req)
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
	b := &binding{table: t, rt: t.routes[d.name]}
	d.cur.Store(b)
	return b
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
	if p.rt.cached() != nil {
		p.batchKey = p.rt.keys.BatchKey(&p.req, p.sum.prefix, p.sum.seq)
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
	if c := rt.answers(); c != nil {
		k := p.batchKey | rt.keys.LayerKey(layer, p.sum.prefix)
		if m, ok := c.get(k); ok {
			return core.Answer{Method: m, Handler: rt.name, Plugin: rt.plugin.name}, nil
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
			return core.Answer{Method: m, Handler: rt.name, Plugin: rt.plugin.name}, nil
		}
	}
	return r.decide(ctx, rt, req)
}

// decide answers a valid request by rt without the cache, and fills the
// cache with the plugin's answer.
func (r *Registry) decide(ctx context.Context, rt *route, req *core.Request) (core.Answer, error) {
	if rt == nil {
		if why := r.unserved(r.table.Load(), req.Backend); why != nil {
			return r.fallback(req, "", why)
		}
		r.noteUnknown(req.Backend)
		return r.decideTriton(req, ""), nil
	}
	if rt.missing {
		err := fmt.Errorf("no plugin in %s serves %q (missing)", strings.Join(r.cfg.PluginDirs, ":"), req.Backend)
		if rt.why != nil {
			err = fmt.Errorf("%w; %w", err, rt.why)
		}
		return r.fallback(req, "", &failure{ReasonPluginMissing, err})
	}
	p := rt.plugin
	if why := p.unsupportedWhy(); why != "" {
		return r.fallback(req, p.name, &failure{ReasonUnsupportedHardware,
			fmt.Errorf("plugin %s does not run on this host: %s", p.name, why)})
	}
	var m core.Method
	inst, err := r.callPlugin(ctx, p, dispatchCall, func(ctx context.Context, b batchClient) (err error) {
		m, err = b.Dispatch(ctx, req)
		return err
	})
	if inst == nil { // no process to ask
		if ctx.Err() != nil {
			return core.Answer{}, ctx.Err()
		}
		return r.fallback(req, p.name, err)
	}
	if err == nil && !rt.declares(m) {
		err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, req.Backend)
	}
	if err != nil {
		if ctx.Err() != nil {
			return core.Answer{}, ctx.Err()
		}
		return r.callFailed(req, p, inst, err)
	}
	r.succeeded(p)
	if c := rt.cached(); c != nil {
		c.put(rt.keys.Key(req), m)
	}
	return core.Answer{Method: m, Handler: rt.name, Plugin: p.name}, nil
}

// callLimit says which deadline a call to a plugin runs under.
type callLimit int

const (
	// dispatchCall runs under Config.CallTimeout.
	dispatchCall callLimit = iota
	// longCall (a kernel, device code, a plan) runs under the caller's own
	// deadline, else KernelCallTimeout.
	longCall
)

// callPlugin runs f on a running process of p (starting one when needed)
// under the deadline of limit, and returns the instance it ran on; a nil
// instance means none could be had, and err says why. Every call to a
// plugin goes through it; a call that failed goes to failCall.
func (r *Registry) callPlugin(ctx context.Context, p *plugin, limit callLimit, f func(context.Context, batchClient) error) (*instance, error) {
	for {
		inst, err := p.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if !inst.enter() {
			continue // retired by a reload or a failure since acquire
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if _, has := ctx.Deadline(); limit == dispatchCall || !has {
			cctx, cancel = context.WithTimeout(ctx, r.timeout(limit))
		}
		err = f(cctx, inst.backend)
		cancel()
		inst.leave()
		return inst, err
	}
}

// timeout is the deadline of a call of limit when the caller gives none.
func (r *Registry) timeout(limit callLimit) time.Duration {
	if limit == longCall {
		return KernelCallTimeout
	}
	return r.cfg.CallTimeout
}

// failCall retires inst after a call of limit to p failed with err (not
// a refusal of the request, not the caller's ctx ending): the process is
// ended and restarts after the backoff. It returns the failure that the
// fallback reports.
func (r *Registry) failCall(p *plugin, inst *instance, err error, limit callLimit) *failure {
	reason := classify(err)
	if reason == ReasonTimeout {
		// gRPC reports a call it cancelled at the deadline in terms of its
		// stream.
		err = fmt.Errorf("no answer within the call deadline of %s: %w", r.timeout(limit), err)
	}
	p.fail(inst, reason, err)
	return &failure{reason, fmt.Errorf("plugin %s: %w", p.name, err)}
}

func (r *Registry) succeeded(p *plugin) {
	r.fallbacks.recovered(p.name)
	p.succeeded()
}

// maxUnknownLogged bounds the names remembered for the once-per-name log.
const maxUnknownLogged = 1024

// noteDeprecated warns, once per registry and name, that a request asked
// the deprecated name of rt, unless Config.QuietDeprecated.
func (r *Registry) noteDeprecated(rt *route) {
	if rt == nil || rt.handler.Deprecated == "" || r.cfg.QuietDeprecated {
		return
	}
	if _, loaded := r.deprecated.LoadOrStore(rt.name, true); !loaded {
		r.log.Warn(core.MsgDeprecatedName, "backend", rt.name, "use", rt.handler.AliasOf, "reason", rt.handler.Deprecated)
	}
}

func (r *Registry) noteUnknown(name string) {
	if name == core.TritonName || r.nUnknown.Load() >= maxUnknownLogged {
		return
	}
	if _, loaded := r.unknown.LoadOrStore(name, true); !loaded {
		r.nUnknown.Add(1)
		r.log.Info("no plugin serves this name; the triton rules decide, as in sglang", "backend", name)
	}
}

// callFailed handles a failed call to a running instance.
func (r *Registry) callFailed(req *core.Request, p *plugin, inst *instance, err error) (core.Answer, error) {
	if errors.Is(err, core.ErrInvalidRequest) {
		// The plugin refused this request; the plugin is fine.
		return r.fallback(req, p.name, &failure{ReasonRefused, fmt.Errorf("plugin %s refused the request: %w", p.name, err)})
	}
	return r.fallback(req, p.name, r.failCall(p, inst, err, dispatchCall))
}

// decideTriton answers by the in-process triton rules.
func (r *Registry) decideTriton(req *core.Request, fallback string) core.Answer {
	return core.Answer{Method: core.TritonDecide(req), Handler: core.TritonName, Plugin: core.PluginCore, Fallback: fallback}
}

// fallback answers by the triton rules because of err, or refuses under
// Strict. Either way it is logged.
func (r *Registry) fallback(req *core.Request, plugin string, err error) (core.Answer, error) {
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{ReasonCrashed, err}
	}
	msg := f.Error()
	what := "falling back to the triton rules"
	if r.cfg.Strict {
		what = "refusing requests (strict)"
	}
	r.fallbacks.record(req.Backend, plugin, f.reason, msg, what, r.cfg.Strict)
	if r.cfg.Strict {
		return core.Answer{}, fmt.Errorf("%w: %s (strict: no fallback to triton)", core.ErrRefused, msg)
	}
	return r.decideTriton(req, msg), nil
}

// DispatchBatch answers reqs[i] into out[i] for every i, as Dispatch
// would, with one call per plugin (per wire.BatchBytes of requests) for
// all the requests that the caches do not answer; unlike Dispatch, it fills
// an unset Runtime.Platform of reqs in place. len(out) must be len(reqs).
// The plugins are asked concurrently. It returns an error only when ctx
// ends.
func (r *Registry) DispatchBatch(ctx context.Context, reqs []core.Request, out []Result) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("dispatch batch: %d results for %d requests", len(out), len(reqs))
	}
	t := r.table.Load()
	var groups []*batchGroup
	var open map[*plugin]*batchGroup // the group of each plugin still taking requests
	var hits map[*plugin][]int       // the requests answered from each plugin's cache
	for i := range reqs {
		req := &reqs[i]
		if req.Runtime.Platform == core.PlatformUnset {
			req.Runtime.Platform = r.cfg.Platform
		}
		if err := req.Validate(); err != nil {
			out[i] = Result{Err: err}
			continue
		}
		rt := t.routes[req.Backend]
		r.noteDeprecated(rt)
		if rt == nil || rt.plugin == nil || rt.plugin.unsupportedWhy() != "" {
			a, err := r.decide(ctx, rt, req)
			out[i] = Result{a, err}
			continue
		}
		var k core.Key
		if c := rt.cached(); c != nil {
			k = rt.keys.Key(req)
		}
		if c := rt.answers(); c != nil {
			if m, ok := c.get(k); ok {
				out[i] = Result{Answer: core.Answer{Method: m, Handler: rt.name, Plugin: rt.plugin.name}}
				if hits == nil {
					hits = map[*plugin][]int{}
				}
				hits[rt.plugin] = append(hits[rt.plugin], i)
				continue
			}
		}
		if open == nil {
			open = map[*plugin]*batchGroup{}
		}
		g := open[rt.plugin]
		size := requestBytes(req)
		if g == nil || g.bytes+size > wire.BatchBytes {
			g = &batchGroup{plugin: rt.plugin}
			open[rt.plugin] = g
			groups = append(groups, g)
		}
		g.bytes += size
		g.idx = append(g.idx, i)
		g.routes = append(g.routes, rt)
		g.keys = append(g.keys, k)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.failed = r.batchCall(ctx, g.plugin, g, reqs, out)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	// The requests of a plugin that failed in this batch fall back, those
	// answered from its cache too: one batch, one state, one kind of answer.
	for _, g := range groups {
		if g.failed == nil {
			continue
		}
		for _, i := range hits[g.plugin] {
			a, err := r.fallback(&reqs[i], g.plugin.name, g.failed)
			out[i] = Result{a, err}
		}
		delete(hits, g.plugin)
	}
	return nil
}

// batchGroup is requests of one batch that go to one plugin in one call:
// at most wire.BatchBytes of them, so that no message nears a gRPC limit.
type batchGroup struct {
	plugin *plugin
	bytes  int
	idx    []int
	routes []*route
	keys   []core.Key
	failed error // set when the plugin failed the call
}

// batchCall asks p for the requests of g in one call; when the call fails,
// each request falls back on its own, and batchCall returns the failure
// when the plugin failed (not when it refused the batch as invalid).
func (r *Registry) batchCall(ctx context.Context, p *plugin, g *batchGroup, reqs []core.Request, out []Result) (failed error) {
	sub := make([]core.Request, len(g.idx))
	for j, i := range g.idx {
		sub[j] = reqs[i]
	}
	res := make([]core.Result, len(sub))
	inst, callErr := r.callPlugin(ctx, p, dispatchCall, func(ctx context.Context, b batchClient) error {
		return b.DispatchBatch(ctx, sub, res)
	})
	switch {
	case callErr == nil, ctx.Err() != nil:
	case inst == nil:
		failed = callErr
	case errors.Is(callErr, core.ErrInvalidRequest):
		callErr = &failure{ReasonRefused, fmt.Errorf("plugin %s refused the batch: %w", p.name, callErr)}
	default:
		callErr = r.failCall(p, inst, callErr, dispatchCall)
		failed = callErr
	}
	ok := false
	for j, i := range g.idx {
		rt := g.routes[j]
		if callErr != nil {
			if ctx.Err() != nil {
				out[i] = Result{Err: ctx.Err()}
				continue
			}
			a, err := r.fallback(&reqs[i], p.name, callErr)
			out[i] = Result{a, err}
			continue
		}
		m, err := res[j].Method, res[j].Err
		if err == nil && !rt.declares(m) {
			err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, reqs[i].Backend)
		}
		if err != nil {
			a, ferr := r.fallbackFor(&reqs[i], p, err)
			out[i] = Result{a, ferr}
			continue
		}
		ok = true
		if c := rt.cached(); c != nil {
			c.put(g.keys[j], m)
		}
		out[i] = Result{Answer: core.Answer{Method: m, Handler: rt.name, Plugin: p.name}}
	}
	if ok {
		r.succeeded(p)
	}
	return failed
}

// requestBytes bounds the size of req as a protobuf message: ten bytes a
// length at most, and the rest of the message.
func requestBytes(req *core.Request) int {
	return 256 + len(req.Backend) + 10*(len(req.Batch.ExtendPrefixLens)+len(req.Batch.SeqLens))
}

// fallbackFor answers a request whose own result was an error.
func (r *Registry) fallbackFor(req *core.Request, p *plugin, err error) (core.Answer, error) {
	reason := ReasonRefused
	if !errors.Is(err, core.ErrInvalidRequest) {
		reason = classify(err)
	}
	return r.fallback(req, p.name, &failure{reason, fmt.Errorf("plugin %s: %w", p.name, err)})
}

// Close ends every plugin process the registry started and waits for them.
// Later requests fall back with ReasonClosed. Close is idempotent.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		// A reload in progress finishes first, so that every process it
		// started is in the table Close ends.
		r.reloadMu.Lock()
		defer r.reloadMu.Unlock()
		r.closed.Store(true)
		t := r.table.Load()
		var wg sync.WaitGroup
		for _, p := range t.plugins {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		r.cfg.sockets.remove()
		r.fallbacks.summary()
	})
	return nil
}

// binding is a Dispatcher's route and the table it came from.
type binding struct {
	table *routeTable
	rt    *route
}

type atomicBinding = atomic.Pointer[binding]
