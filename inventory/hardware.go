package inventory

import (
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/registry"
)

// PluginsServed lists every plugin of reg with whether this host serves
// it: a usable plugin is served when the hardware of any of its names
// matches info; otherwise the reason says what each name needs.
func PluginsServed(reg *registry.Registry, info core.HostInfo) []detect.PluginInfo {
	out := []detect.PluginInfo{}
	for _, p := range reg.Plugins() {
		pi := detect.PluginInfo{Name: p.Name, Path: p.Path, Names: p.Names, Status: string(p.Status)}
		if pi.Names == nil {
			pi.Names = []string{}
		}
		pi.Served, pi.Reason = pluginServed(reg, p, info)
		out = append(out, pi)
	}
	return out
}

// DeclaredHardware is the hardware every name served by a plugin of reg
// declares.
func DeclaredHardware(reg *registry.Registry) []core.Hardware {
	var hw []core.Hardware
	for _, name := range reg.Names() {
		if h, _, ok := reg.Handler(name); ok {
			hw = append(hw, h.Hardware...)
		}
	}
	return hw
}

// pluginServed reports whether the host serves plugin p on info, and why
// not: every name the plugin serves, an alias (tokenspeed_mla, nsa)
// too, with what its hardware needs.
func pluginServed(reg *registry.Registry, p registry.PluginInfo, info core.HostInfo) (bool, string) {
	if p.Status == registry.StatusBroken || p.Status == registry.StatusShadowed {
		return false, fmt.Sprintf("%s: %s", p.Status, p.Reason)
	}
	// Names with the same reason share it: "flashinfer, flashmla: needs ...".
	var reasons []string
	names := map[string][]string{}
	for _, name := range p.Names {
		hi, _, ok := reg.Handler(name)
		if !ok {
			continue
		}
		ok, reason := core.SupportsAny(hi.Hardware, info)
		if ok {
			return true, ""
		}
		if _, seen := names[reason]; !seen {
			reasons = append(reasons, reason)
		}
		names[reason] = append(names[reason], name)
	}
	if len(reasons) == 0 {
		return false, "serves no backend name here"
	}
	why := make([]string, len(reasons))
	for i, r := range reasons {
		why[i] = strings.Join(names[r], ", ") + ": " + r
	}
	return false, strings.Join(why, "; ")
}

// ServedHardware is every name reg's plugins serve, with the hardware its
// description declares: the names a selection may pick beyond sglang's.
func ServedHardware(reg *registry.Registry) map[string][]core.Hardware {
	served := map[string][]core.Hardware{}
	for _, name := range reg.Names() {
		if h, _, ok := reg.Handler(name); ok {
			served[name] = h.Hardware
		}
	}
	return served
}
