package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// usable returns why rt cannot ask its backend for name (Unavailable), or
// nil when it can: a name no plugin serves (missing, or never seen under
// Config.Strict), a backend that does not run on this host. A name never
// seen is logged once.
func (r *Registry) usable(rt *route, name string) *backend.Outcome {
	switch rt.kind {
	case downRoute:
		return rt.down
	case defaultRoute:
		if why := r.unserved(r.table.Load(), name); why != nil {
			return why
		}
		r.noteUnknown(name)
	}
	if why := rt.be.Unsupported(); why != "" {
		o := ReasonUnsupportedHardware.Unavailable(fmt.Errorf("plugin %s does not run on this host: %s", rt.family, why))
		return &o
	}
	return nil
}

// unserved says why no backend serves name, a name of the default route:
// a broken plugin binary named for it, or a plugin that served it before a
// reload and is gone, is a fallback with its reason in either mode; a name
// never seen falls to the triton rules silently, as in sglang, except under
// Config.Strict, which refuses it. It returns nil for a silent fallback.
func (r *Registry) unserved(t *routeTable, name string) *backend.Outcome {
	if name == core.TritonName {
		return nil
	}
	for _, b := range t.broken {
		if b.Status == StatusBroken && (b.Name == name || slices.Contains(b.Names, name)) {
			o := ReasonPluginBroken.Unavailable(fmt.Errorf("plugin %s (%s), which serves %q, is broken: %s", b.Name, b.Path, name, b.Reason))
			return &o
		}
	}
	if family, ok := r.served.Load(name); ok {
		o := ReasonPluginMissing.Unavailable(fmt.Errorf("%q was served by plugin %s, which is missing since the plugin directories were read again", name, family))
		return &o
	}
	if !r.cfg.Strict {
		return nil
	}
	var names []string
	for n, rt := range t.routes {
		if rt.serves() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	served := "none"
	if len(names) > 0 {
		served = strings.Join(names, ", ")
	}
	o := ReasonUnknownBackend.Unavailable(fmt.Errorf("%q was never seen: no plugin in %s serves it (names served: %s)",
		name, strings.Join(r.cfg.PluginDirs, ":"), served))
	return &o
}

// maxUnknownLogged bounds the names remembered for the once-per-name log.
const maxUnknownLogged = 1024

func (r *Registry) noteUnknown(name string) {
	if name == core.TritonName || r.nUnknown.Load() >= maxUnknownLogged {
		return
	}
	if _, loaded := r.unknown.LoadOrStore(name, true); !loaded {
		r.nUnknown.Add(1)
		r.log.Info("no plugin serves this name; the triton rules decide, as in sglang", "backend", name)
	}
}
