package registry

import (
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// The route step of a dispatch: what a name resolves to, the cache of its
// backend's answers, and the note of a deprecated name.

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

	// kind says whether a backend serves the name, read by serves and
	// usable alone; down, for a route of kind downRoute, why its requests
	// fall back.
	kind routeKind
	down *backend.Outcome
}

// routeKind says whether the backend of a route serves its name.
type routeKind uint8

const (
	// servedRoute: the route's backend serves the name.
	servedRoute routeKind = iota
	// downRoute: a plugin should serve the name and none does (missing,
	// refused by the lock file): the route's backend is the fallback, and
	// its requests fall back for route.down.
	downRoute
	// defaultRoute: the route of every name no backend serves: its
	// backend, the triton rules, answers it, as in sglang, unless the name
	// was served before or its binary is broken (unserved.go), or
	// Config.Strict refuses it.
	defaultRoute
)

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
func (rt *route) serves() bool { return rt.kind == servedRoute }

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
