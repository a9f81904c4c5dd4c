package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/pluginproc"
)

// routeTable is what the registry serves at one time; a reload replaces it
// whole.
type routeTable struct {
	plugins []*pluginproc.Plugin
	broken  []PluginInfo
	// unfound are the binaries the lock file pins that are not there.
	unfound []PluginInfo
	routes  map[string]*route
	// deflt is the route of every name not in routes: the triton rules.
	deflt *route
	// gen is the table's generation (Registry.Generation); replaced is
	// closed when a reload stores the next table.
	gen      uint64
	replaced chan struct{}
}

// route returns the route of name.
func (t *routeTable) route(name string) *route {
	if rt := t.routes[name]; rt != nil {
		return rt
	}
	return t.deflt
}

// load discovers and describes the plugins (pluginproc.Load) and builds a
// route table. A plugin of prev whose binary did not change is kept as it
// is, running or not.
func (r *Registry) load(ctx context.Context, prev *routeTable) (*routeTable, error) {
	t := &routeTable{routes: map[string]*route{}, gen: 1, replaced: make(chan struct{}), deflt: r.defaultRoute()}
	var kept []*pluginproc.Plugin
	if prev != nil {
		t.gen = prev.gen + 1
		kept = prev.plugins
	}
	found, err := pluginproc.Load(ctx, r.proc, r.lock.Load(), kept)
	if err != nil {
		return nil, err
	}
	t.broken, t.unfound = found.Broken, found.Unfound
	for _, p := range found.Plugins {
		r.addPlugin(t, p, prev == nil)
	}
	r.addLinked(t.routes)
	// The names of a binary the lock refused fall back as broken, rather
	// than go silently to the triton rules.
	for n, why := range found.Refused {
		if _, ok := t.routes[n]; !ok && n != core.TritonName {
			t.routes[n] = r.missingRoute(n, why, true)
		}
	}
	for _, m := range found.Unfound {
		// Listed as broken, but nothing was found: its names are missing,
		// unless a binary that was found but refused may serve them.
		for _, n := range m.Names {
			if _, ok := t.routes[n]; !ok {
				why, named := brokenWhy(n, t.broken)
				if !named {
					why = fmt.Errorf("%s %s", m.Path, m.Reason)
				}
				t.routes[n] = r.missingRoute(n, why, named)
			}
		}
	}
	r.addMissing(t.routes, t.broken)
	return t, nil
}

// addMissing routes every expected name (Config.ExpectedNames) that no
// backend serves to the fallback, with why.
func (r *Registry) addMissing(routes map[string]*route, broken []PluginInfo) {
	for _, n := range r.cfg.ExpectedNames {
		if routes[n] == nil {
			why, named := brokenWhy(n, broken)
			routes[n] = r.missingRoute(n, why, named)
		}
	}
}

// defaultRoute is the route of every name no backend serves: the triton
// rules in process, with no answer cache (a name never seen may have to be
// refused, or its fallback logged: see usable).
func (r *Registry) defaultRoute() *route {
	rt := *r.fallbackRoute
	rt.kind, rt.cache = defaultRoute, nil
	return &rt
}

// missingRoute is the route of name, which a plugin should serve but none
// does: its requests fall back with ReasonPluginMissing, saying why (what
// was refused that may serve it) when why is not nil.
//
// When broken, a binary that may serve name was found but refused (by the
// lock file, or as truncated, unreadable, writable by others, not
// starting): the reason is then ReasonPluginBroken, as docs/dispatch.md
// says, and the message is why. Otherwise why, when not nil, adds to the
// message (a binary the lock pins but that is not there).
func (r *Registry) missingRoute(name string, why error, broken bool) *route {
	dirs := strings.Join(r.cfg.PluginDirs, ":")
	f := ReasonPluginMissing.Unavailable(fmt.Errorf("no plugin in %s serves %q (missing)", dirs, name))
	switch {
	case why != nil && !broken:
		f.Err = fmt.Errorf("%w: %w", f.Err, why)
	case why != nil:
		f = ReasonPluginBroken.Unavailable(fmt.Errorf("no usable plugin in %s serves %q: %w", dirs, name, why))
	}
	rt := *r.fallbackRoute
	rt.name, rt.kind, rt.down, rt.cache = name, downRoute, &f, nil
	return &rt
}

// brokenWhy says which plugin binaries or directories that were refused
// may serve name: the binary named for it, or that served it (named: the
// name's plugin is broken), when there is one; else every one, up to a
// few (they may serve it: named is false, and the name is missing). It
// returns nil when none was refused.
func brokenWhy(name string, broken []PluginInfo) (why error, named bool) {
	var all []string
	for _, b := range broken {
		if b.Status != StatusBroken {
			continue
		}
		why := b.Reason
		if !strings.Contains(why, b.Path) {
			why = b.Path + ": " + why
		}
		if b.Name == name || slices.Contains(b.Names, name) {
			return fmt.Errorf("found but not usable: %s", why), true
		}
		all = append(all, why)
	}
	const shown = 3
	switch {
	case len(all) > shown:
		return fmt.Errorf("found but not usable: %s; and %d more (attnplug plugins lists them)", strings.Join(all[:shown], "; "), len(all)-shown), false
	case len(all) > 0:
		return fmt.Errorf("found but not usable: %s", strings.Join(all, "; ")), false
	}
	return nil, false
}

// addPlugin routes the names of p that no plugin of t routes yet, and
// logs the names that one does when logDup (at a reload, the contests of
// Reload decide and log those).
func (r *Registry) addPlugin(t *routeTable, p *pluginproc.Plugin, logDup bool) {
	for _, h := range p.Description().Handlers {
		if h.Name == core.TritonName {
			r.log.Warn("plugin claims the triton name; the in-process triton rules keep it", "plugin", p.Family())
			continue
		}
		if prev, dup := t.routes[h.Name]; dup {
			if logDup {
				r.log.Warn("backend name served twice; the first plugin keeps it",
					"backend", h.Name, "plugin", p.Family(), "kept", prev.family)
			}
			continue
		}
		t.routes[h.Name] = newRoute(h, p, !r.cfg.NoAnswerCache)
		r.served.Store(h.Name, p.Family())
	}
	t.plugins = append(t.plugins, p)
}

// addLinked routes the names of the host's in-process backends
// (Config.Backends) that no plugin serves; a plugin's is kept, and logged.
func (r *Registry) addLinked(routes map[string]*route) {
	for _, b := range r.linked {
		for _, h := range b.Description().Handlers {
			switch prev := routes[h.Name]; {
			case h.Name == core.TritonName:
				r.log.Warn("in-process backend claims the triton name; the triton rules keep it", "backend", b.Family())
			case prev != nil && prev.serves():
				r.log.Info("backend name served by a plugin and in process; the plugin serves it",
					"backend", h.Name, "plugin", prev.family, "in_process", b.Family())
			default:
				routes[h.Name] = newRoute(h, b, !r.cfg.NoAnswerCache)
			}
		}
	}
}
