package registry

import (
	"sort"

	"github.com/attnplug/attnplug/core"
)

// RouteInfo is what one backend name resolves to, for a client that caches
// answers itself: every request with the same facts under Reads gets the
// same answer from the rules of Handler, until the generation of the route
// table changes.
type RouteInfo struct {
	// Name is the backend name; empty for the default route, what every
	// name not listed resolves to.
	Name string
	// Handler is the registry name whose rules decide: Name, or "triton"
	// when the triton rules answer it.
	Handler string
	// Plugin is the plugin that answers, or core.PluginCore for the
	// in-process triton rules.
	Plugin string
	// Version is the backend's version (core.Version for the triton
	// rules); SHA256 identifies the plugin binary, empty in process.
	Version string
	SHA256  string
	// Reads is what the rules of Handler read.
	Reads core.Reads
	// Cacheable is false when answers must not be cached: facts a client
	// cannot key, Config.NoAnswerCache, or a plugin whose running process
	// describes itself otherwise than the description the route was built
	// from.
	Cacheable bool
	// Fallback is set when the name is one a plugin should serve but the
	// triton rules answer it until the next reload: the reason (a missing
	// plugin, hardware the plugin does not run on).
	Fallback Reason
}

// Generation returns the generation of the route table in force: 1 after
// New, one more after every reload. An answer given while Generation
// returned g both before and after it came from the routes of g.
func (r *Registry) Generation() uint64 { return r.table.Load().gen }

// Routes describes every name the registry resolves, sorted by name, then
// the default route last; with the generation of the route table they come
// from and a channel that is closed when a reload replaces that table.
func (r *Registry) Routes() (routes []RouteInfo, generation uint64, changed <-chan struct{}) {
	t := r.table.Load()
	for name, rt := range t.routes {
		routes = append(routes, r.routeInfo(name, rt))
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].Name < routes[j].Name })
	routes = append(routes, r.routeInfo("", t.deflt))
	return routes, t.gen, t.replaced
}

// routeInfo describes rt, which serves name ("" for the default route).
// The name of a route whose backend cannot be asked (no plugin serves it,
// or its plugin does not run on this host) is described as the fallback's
// route, with the reason.
func (r *Registry) routeInfo(name string, rt *route) RouteInfo {
	var fell Reason
	switch {
	case rt.kind == downRoute:
		fell = rt.down.Reason
	case rt.be.Unsupported() != "":
		fell = ReasonUnsupportedHardware
	}
	if fell != "" || rt.kind == defaultRoute {
		rt = r.fallbackRoute
	}
	_, sum := rt.be.Binary()
	return RouteInfo{
		Name: name, Handler: rt.handler.Name, Plugin: rt.family,
		Version: rt.be.Description().Version, SHA256: sum,
		Reads: rt.handler.Reads, Cacheable: rt.cached() != nil, Fallback: fell,
	}
}
