package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/attnplug/attnplug/wire"
)

// BatchAnswer is the answer to one request of Registry.DispatchBatch:
// core.BatchAnswer, which a client of attnplug serve shares without
// linking the registry.
type BatchAnswer = core.BatchAnswer

// DispatchBatch answers reqs[i] into out[i] for every i, as Dispatch
// would, with one call per backend (per wire.BatchBytes of requests) for
// all the requests that the caches do not answer. As Dispatch, it fills
// an unset Runtime.Platform in a copy: reqs is not modified. len(out) must
// be len(reqs). The backends are asked concurrently. It returns an error
// only when ctx ends.
func (r *Registry) DispatchBatch(ctx context.Context, reqs []core.Request, out []BatchAnswer) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("dispatch batch: %d results for %d requests", len(out), len(reqs))
	}
	return r.dispatchBatch(ctx, r.table.Load(), reqs, out)
}

// dispatchBatch is DispatchBatch by the routes of t.
func (r *Registry) dispatchBatch(ctx context.Context, t *routeTable, reqs []core.Request, out []BatchAnswer) error {
	var groups []*batchGroup
	var open map[backend.Backend]*batchGroup // the group of each backend still taking requests
	var hits map[backend.Backend][]int       // the requests answered from each backend's cache
	var filled core.Request                  // a request of reqs with the platform filled in
	for i := range reqs {
		req := r.withPlatform(&reqs[i], &filled)
		if err := req.Validate(); err != nil {
			out[i] = BatchAnswer{Err: err}
			continue
		}
		rt := t.route(req.Backend)
		r.noteDeprecated(rt)
		if why := r.usable(rt, req.Backend); why != nil {
			a, err := r.fallback(ctx, req, rt, *why)
			out[i] = BatchAnswer{Answer: a, Err: err}
			continue
		}
		var k core.Key
		if c := rt.cached(); c != nil {
			k = rt.keys.Key(req)
		}
		if c := rt.answers(); c != nil {
			if m, ok := c.get(k); ok {
				out[i] = BatchAnswer{Answer: rt.answer(m)}
				if hits == nil {
					hits = map[backend.Backend][]int{}
				}
				hits[rt.be] = append(hits[rt.be], i)
				continue
			}
		}
		if open == nil {
			open = map[backend.Backend]*batchGroup{}
		}
		g := open[rt.be]
		size := requestBytes(req)
		if g == nil || g.bytes+size > wire.BatchBytes {
			g = &batchGroup{}
			open[rt.be] = g
			groups = append(groups, g)
		}
		g.bytes += size
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, *req)
		g.reqs[len(g.reqs)-1].Backend = rt.handler.Name // the name its backend serves (ask)
		g.routes = append(g.routes, rt)
		g.keys = append(g.keys, k)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.failed = r.batchCall(ctx, g, reqs, out)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	// The requests of a backend that failed in this batch fall back, those
	// answered from its cache too: one batch, one state, one kind of answer.
	for _, g := range groups {
		be := g.routes[0].be
		if g.failed == nil || hits[be] == nil {
			continue
		}
		for _, i := range hits[be] {
			req := r.withPlatform(&reqs[i], &filled)
			a, err := r.fallback(ctx, req, t.route(req.Backend), *g.failed)
			out[i] = BatchAnswer{Answer: a, Err: err}
		}
		delete(hits, be)
	}
	return nil
}

// withPlatform returns req when its platform is set, else req copied into
// *buf with the registry's platform: the caller's request is not changed.
func (r *Registry) withPlatform(req, buf *core.Request) *core.Request {
	if req.Runtime.Platform != core.PlatformUnset {
		return req
	}
	*buf = *req
	buf.Runtime.Platform = r.cfg.Platform
	return buf
}

// batchGroup is requests of one batch that go to one backend in one call:
// at most wire.BatchBytes of them, so that no message nears a gRPC limit.
type batchGroup struct {
	bytes  int
	idx    []int          // the requests' places in the batch
	reqs   []core.Request // the requests, platform filled in
	routes []*route
	keys   []core.Key
	failed *backend.Outcome // set when the backend could not answer the call
}

// batchCall asks the backend of g for its requests in one call; when the
// call fails, each request falls back on its own, and batchCall returns
// why when the backend could not answer (not when it refused the batch as
// invalid, its own answer).
func (r *Registry) batchCall(ctx context.Context, g *batchGroup, reqs []core.Request, out []BatchAnswer) *backend.Outcome {
	be, sub := g.routes[0].be, g.reqs
	res := make([]core.Result, len(sub))
	s, err := r.call(ctx, be, "", backend.DispatchCall, "the batch", func(ctx context.Context, c backend.Conn) error {
		return c.DispatchBatch(ctx, sub, res)
	})
	retried := false
	for j, i := range g.idx {
		req := sub[j] // the platform filled in, under the name the caller asked
		req.Backend = reqs[i].Backend
		switch {
		case err != nil:
			out[i] = BatchAnswer{Err: err}
		case s.verdict == answered:
			out[i] = r.batchResult(ctx, &req, g.routes[j], g.keys[j], res[j])
		default:
			if now, ok := r.moved(s.o, be, req.Backend); ok {
				// A reload swapped the plugin out since the batch's routes
				// were looked up: the route in force answers.
				a, derr := r.dispatch(ctx, now, &req)
				out[i], retried = BatchAnswer{Answer: a, Err: derr}, true
				continue
			}
			a, ferr := r.fallback(ctx, &req, g.routes[j], *s.o)
			out[i] = BatchAnswer{Answer: a, Err: ferr}
		}
	}
	if err == nil && s.verdict != answered && s.verdict != refused && !retried {
		return s.o
	}
	return nil
}

// batchResult is the answer to req, of route rt, from res, its backend's
// answer within a batch: a method it declares, cached by key, or a
// fallback for the backend's own refusal or its undeclared answer.
func (r *Registry) batchResult(ctx context.Context, req *core.Request, rt *route, key core.Key, res core.Result) BatchAnswer {
	m, err := res.Method, res.Err
	if err == nil && !rt.declares(m) {
		err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, rt.handler.Name)
	}
	if err != nil {
		o := backend.OutcomeOf(ctx, err)
		o.Err = fmt.Errorf("plugin %s: %w", rt.family, err)
		a, ferr := r.fallback(ctx, req, rt, o)
		return BatchAnswer{Answer: a, Err: ferr}
	}
	if c := rt.cached(); c != nil {
		c.put(key, m)
	}
	return BatchAnswer{Answer: rt.answer(m)}
}

// requestBytes bounds the size of req as a protobuf message: ten bytes a
// length at most, and the rest of the message.
func requestBytes(req *core.Request) int {
	return 256 + len(req.Backend) + 10*(len(req.Batch.ExtendPrefixLens)+len(req.Batch.SeqLens))
}
