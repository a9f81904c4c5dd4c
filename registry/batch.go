package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// BatchAnswer is the answer to one request of Registry.DispatchBatch: the
// host's answer (method, handler, plugin, fallback) or why there is none.
// (core.Result is a backend's answer, a method alone.)
type BatchAnswer struct {
	// Answer is valid when Err is nil.
	Answer core.Answer
	// Err is why the request was not decided.
	Err error
}

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
	reqs = r.withPlatform(reqs)
	t := r.table.Load()
	var groups []*batchGroup
	var open map[backend]*batchGroup // the group of each backend still taking requests
	var hits map[backend][]int       // the requests answered from each backend's cache
	for i := range reqs {
		req := &reqs[i]
		if err := req.Validate(); err != nil {
			out[i] = BatchAnswer{Err: err}
			continue
		}
		rt := t.route(req.Backend)
		r.noteDeprecated(rt)
		if rt.down != nil || rt.unknown || rt.be.unsupportedWhy() != "" {
			a, err := r.decide(ctx, rt, req)
			out[i] = BatchAnswer{a, err}
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
					hits = map[backend][]int{}
				}
				hits[rt.be] = append(hits[rt.be], i)
				continue
			}
		}
		if open == nil {
			open = map[backend]*batchGroup{}
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
			a, err := r.fallback(&reqs[i], t.route(reqs[i].Backend), g.failed)
			out[i] = BatchAnswer{a, err}
		}
		delete(hits, be)
	}
	return nil
}

// withPlatform returns reqs with every unset platform set to the
// registry's: reqs itself when none is unset, else a copy.
func (r *Registry) withPlatform(reqs []core.Request) []core.Request {
	copied := false
	for i := range reqs {
		if reqs[i].Runtime.Platform != core.PlatformUnset {
			continue
		}
		if !copied {
			reqs, copied = slices.Clone(reqs), true
		}
		reqs[i].Runtime.Platform = r.cfg.Platform
	}
	return reqs
}

// batchGroup is requests of one batch that go to one backend in one call:
// at most wire.BatchBytes of them, so that no message nears a gRPC limit.
type batchGroup struct {
	bytes  int
	idx    []int
	routes []*route
	keys   []core.Key
	failed error // set when the backend failed the call
}

// batchCall asks the backend of g for its requests in one call; when the
// call fails, each request falls back on its own, and batchCall returns
// the failure when the backend failed (not when it refused the batch as
// invalid).
func (r *Registry) batchCall(ctx context.Context, g *batchGroup, reqs []core.Request, out []BatchAnswer) (failed error) {
	first := g.routes[0]
	sub := make([]core.Request, len(g.idx))
	for j, i := range g.idx {
		sub[j] = reqs[i]
	}
	res := make([]core.Result, len(sub))
	callErr := first.be.call(ctx, dispatchCall, func(ctx context.Context, c conn) error {
		return c.DispatchBatch(ctx, sub, res)
	})
	switch {
	case callErr == nil, ctx.Err() != nil:
	case errors.Is(callErr, core.ErrInvalidRequest):
		callErr = refusal(callErr, first.be, "the batch")
	default:
		failed = callErr
	}
	ok := false
	for j, i := range g.idx {
		rt := g.routes[j]
		if callErr != nil {
			if ctx.Err() != nil {
				out[i] = BatchAnswer{Err: ctx.Err()}
				continue
			}
			a, err := r.fallback(&reqs[i], rt, callErr)
			out[i] = BatchAnswer{a, err}
			continue
		}
		m, err := res[j].Method, res[j].Err
		if err == nil && !rt.declares(m) {
			err = fmt.Errorf("%w: answered %s, which %q does not declare", core.ErrProtocol, m, reqs[i].Backend)
		}
		if err != nil {
			reason := ReasonRefused
			if !errors.Is(err, core.ErrInvalidRequest) {
				reason = classify(err)
			}
			a, ferr := r.fallback(&reqs[i], rt, &failure{reason: reason, err: fmt.Errorf("plugin %s: %w", rt.be.family(), err)})
			out[i] = BatchAnswer{a, ferr}
			continue
		}
		ok = true
		if c := rt.cached(); c != nil {
			c.put(g.keys[j], m)
		}
		out[i] = BatchAnswer{Answer: rt.answer(m)}
	}
	if ok {
		r.succeeded(first.be)
	}
	return failed
}

// requestBytes bounds the size of req as a protobuf message: ten bytes a
// length at most, and the rest of the message.
func requestBytes(req *core.Request) int {
	return 256 + len(req.Backend) + 10*(len(req.Batch.ExtendPrefixLens)+len(req.Batch.SeqLens))
}
