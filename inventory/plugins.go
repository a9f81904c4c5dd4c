package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry"
)

// WritePlugins writes the table of attnplug plugins: each plugin of list
// (registry.Plugins) with its version, vendor (a column only when some
// plugin names one), status, standing with lock (nil: no lock file in
// use), names (an alias as alias(=name)) and path, and the reason of a
// broken or refused one under it; dirs are the plugin directories, named
// when none is found.
func WritePlugins(w io.Writer, list []registry.PluginInfo, lock *registry.Lock, dirs []string) error {
	if len(list) == 0 {
		fmt.Fprintf(w, "no plugins found in %s (want files named attnplug-backend-<name>)\n", strings.Join(dirs, ":"))
		return nil
	}
	// The VENDOR column is there when a plugin names its vendor.
	vendors := slices.ContainsFunc(list, func(p registry.PluginInfo) bool { return p.Vendor != "" })
	vendor := func(p registry.PluginInfo) string {
		switch {
		case !vendors:
			return ""
		case p.Vendor == "":
			return "-\t"
		}
		return p.Vendor + "\t"
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "PLUGIN\tVERSION\tSTATUS\tLOCK\tNAMES\tPATH"
	if vendors {
		head = "PLUGIN\tVERSION\tVENDOR\tSTATUS\tLOCK\tNAMES\tPATH"
	}
	fmt.Fprintln(tw, head)
	for _, p := range list {
		names := strings.Join(p.Names, ",")
		for alias, of := range p.Aliases {
			names = strings.Replace(names, alias, alias+"(="+of+")", 1)
		}
		if names == "" {
			names = "-"
		}
		version := p.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\n", p.Name, version, vendor(p), p.Status, LockStatus(lock, p), names, p.Path)
		if p.Reason != "" {
			pad := "\t\t\t\t\t"
			if vendors {
				pad += "\t"
			}
			for i, line := range strings.Split(strings.TrimSpace(p.Reason), "\n") {
				label := "reason: "
				if i > 0 {
					label = "        "
				}
				fmt.Fprintf(tw, "%s%s%s\n", pad, label, strings.TrimSpace(line))
			}
		}
	}
	return tw.Flush()
}

// deviceCodeListing is the device code of one name in plugins --kernels.
type deviceCodeListing struct {
	// Device is the device the plugin was asked for.
	Device            string `json:"device"`
	ComputeCapability int    `json:"compute_capability"`
	// Modules are the modules that run the name's kernels.
	Modules []moduleListing `json:"modules,omitempty"`
	// Note says why no module is listed.
	Note string `json:"note,omitempty"`

	// what and why are Note's two parts: what happens to the device code,
	// and the error that says why, as the registry gave it.
	what, why string
}

// What happens to a name's device code that plugins --kernels cannot
// list.
const (
	// deviceCodeNone: the plugin answers that it has no device code for
	// the device (too old a GPU, no image for its architecture and no
	// NVRTC to build one, ...): its own reason follows.
	deviceCodeNone    = "device code: none for this device"
	deviceCodeRefused = "device code refused"
)

// noteOf is the note of a name's device code: what happens to it, and
// why.
func noteOf(what, why string) string { return what + ": " + why }

// moduleListing is one kernel module in plugins --kernels.
type moduleListing struct {
	Name    string   `json:"name"`
	Arch    string   `json:"arch"`
	Format  string   `json:"format"`
	Bytes   int      `json:"bytes"`
	SHA256  string   `json:"sha256"`
	Entries []string `json:"entries"`
	Kernels []string `json:"kernels,omitempty"`
	// Floor is what the image needs of the host's driver
	// (launch.DriverFloor): its PTX ISA or cubin architecture, and the
	// oldest CUDA release and driver that load it; nil when not known.
	Floor *launch.Floor `json:"floor,omitempty"`
	// FloorError says what of the floor is not known, and why.
	FloorError string `json:"floor_error,omitempty"`
}

// isa is the ISA column of plugins --kernels: a PTX image's ISA version,
// a cubin's architecture as its image says.
func (m moduleListing) isa() string {
	switch {
	case m.Floor == nil:
		return "-"
	case m.Floor.PTXISA != "":
		return m.Floor.PTXISA
	case m.Floor.ImageArch != "":
		return m.Floor.ImageArch
	}
	return "-"
}

// driver is the DRIVER column of plugins --kernels: the oldest driver
// that loads the image, and its CUDA release.
func (m moduleListing) driver() string {
	if m.Floor == nil || m.Floor.Driver == "" {
		return "not known"
	}
	return m.Floor.Driver + " (CUDA " + m.Floor.CUDA + ")"
}

// DeviceFunc returns the device to ask the plugins' device code for, and
// says which it is, for people (this machine's GPU, the one --arch names,
// ...); an error stops the listing. It is called once, and only when a
// plugin hands device code.
type DeviceFunc func() (core.DeviceInfo, string, error)

// WriteKernels writes attnplug plugins --kernels: the kernel catalog of
// every name and, for the plugins that hand device code, the modules of
// each name, asked for the device deviceOf gives. A plugin without device code
// for it is listed with its reason. asJSON writes JSON rows instead.
func WriteKernels(ctx context.Context, w io.Writer, reg *registry.Registry, list []registry.PluginInfo, deviceOf DeviceFunc, asJSON bool) error {
	codes := map[string]*deviceCodeListing{}
	var device core.DeviceInfo
	var source string
	for _, p := range list {
		if !p.DeviceCode {
			continue
		}
		if source == "" {
			var err error
			if device, source, err = deviceOf(); err != nil {
				return err
			}
		}
		for _, n := range p.Names {
			codes[n] = nameDeviceCode(ctx, reg, n, device)
		}
	}
	if asJSON {
		// kernelsTable's rows, with the device code added.
		type row struct {
			Plugin     string             `json:"plugin"`
			Name       string             `json:"name"`
			Kernels    []kernelJSON       `json:"kernels"`
			DeviceCode *deviceCodeListing `json:"device_code,omitempty"`
		}
		catalog := func(plugin string, ks []core.Kernel) []kernelJSON {
			out := make([]kernelJSON, len(ks))
			for i, k := range ks {
				out[i] = kernelToJSON(plugin, k)
			}
			return out
		}
		var rows []row
		for _, p := range list {
			for _, n := range p.Names {
				h, _, _ := reg.Handler(n)
				rows = append(rows, row{p.Name, n, catalog(p.Name, h.Catalog()), codes[n]})
			}
		}
		rows = append(rows, row{Plugin: core.PluginCore, Name: core.TritonName, Kernels: catalog(core.PluginCore, core.TritonKernels())})
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if err := kernelsTable(w, reg, list); err != nil {
		return err
	}
	if len(codes) == 0 {
		_, err := fmt.Fprintln(w, "\nDEVICE CODE: no plugin hands the host device code")
		return err
	}
	fmt.Fprintf(w, "\nDEVICE CODE for %s (compute %d): %s\n", device.Name, device.ComputeCapability, source)
	return deviceCodeTable(w, list, codes)
}

// deviceCodeTable writes the device code of plugins --kernels: the
// modules of each name, a line each. A plugin whose names all have the
// same note (no NVRTC here, say) gets one line that lists its names; when
// every such plugin's note has the same cause, as a cause of this host
// has, the cause is written once, above the table.
func deviceCodeTable(w io.Writer, list []registry.PluginInfo, codes map[string]*deviceCodeListing) error {
	// A plugin's note, its error less the "plugin NAME: " the registry
	// puts before it, when every name of the plugin has it.
	type pluginNote struct{ what, why string }
	notes := map[string]*pluginNote{}
	for _, p := range list {
		var pn *pluginNote
		for i, n := range p.Names {
			c := codes[n]
			if c == nil || c.Note == "" {
				pn = nil
				break
			}
			why := strings.TrimPrefix(c.why, "plugin "+p.Name+": ")
			if i == 0 {
				pn = &pluginNote{c.what, why}
			} else if pn == nil || *pn != (pluginNote{c.what, why}) {
				pn = nil
				break
			}
		}
		if pn != nil {
			notes[p.Name] = pn
		}
	}
	var shared *pluginNote
	for _, pn := range notes {
		if shared == nil {
			shared = pn
		} else if *shared != *pn {
			shared = nil
			break
		}
	}
	if shared != nil && len(notes) > 1 {
		fmt.Fprintf(w, "every plugin below: %s\n", noteOf(shared.what, shared.why))
	} else {
		shared = nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tNAME\tMODULE\tARCH\tFORMAT\tISA\tDRIVER\tBYTES\tSHA256\tENTRIES")
	for _, p := range list {
		if pn := notes[p.Name]; pn != nil {
			note := noteOf(pn.what, pn.why)
			if shared != nil {
				note = pn.what + " (the reason above)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, strings.Join(p.Names, ","), note)
			continue
		}
		for _, n := range p.Names {
			c := codes[n]
			switch {
			case c == nil:
			case c.Note != "":
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, n, c.Note)
			default:
				for _, m := range c.Modules {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Name, n, m.Name, m.Arch, m.Format, m.isa(), m.driver(),
						m.Bytes, m.SHA256[:min(12, len(m.SHA256))], strings.Join(m.Entries, ","))
				}
			}
		}
	}
	return tw.Flush()
}

// nameDeviceCode asks the registry for the device code of name on device:
// the modules that run the name's catalog kernels (a module that names no
// kernel runs any).
func nameDeviceCode(ctx context.Context, reg *registry.Registry, name string, device core.DeviceInfo) *deviceCodeListing {
	out := &deviceCodeListing{Device: device.Name, ComputeCapability: device.ComputeCapability}
	mods, err := reg.KernelModules(ctx, name, device)
	switch {
	case errors.Is(err, core.ErrNoPlan) && !errors.Is(err, registry.ErrNotPinned):
		out.what, out.why = deviceCodeNone, err.Error()
		out.Note = noteOf(out.what, out.why)
		return out
	case err != nil:
		out.what, out.why = deviceCodeRefused, err.Error()
		out.Note = noteOf(out.what, out.why)
		return out
	}
	h, _, _ := reg.Handler(name)
	for _, m := range mods {
		runs := len(m.Kernels) == 0
		for _, k := range h.Kernels {
			runs = runs || slices.Contains(m.Kernels, k.Name)
		}
		if !runs {
			continue
		}
		out.Modules = append(out.Modules, listModule(m))
	}
	if len(out.Modules) == 0 {
		out.Note = "device code: no module runs its kernels"
	}
	return out
}

// listModule is module m as plugins --kernels lists it: its image's
// format, size, hash and entries, and what it needs of a driver.
func listModule(m core.KernelModule) moduleListing {
	ml := moduleListing{Name: m.Name, Arch: m.Arch, Format: string(m.Format), Bytes: len(m.Image), SHA256: m.SHA256, Kernels: m.Kernels}
	f, err := launch.DriverFloor(m)
	if err != nil {
		ml.FloorError = err.Error()
	}
	if f.PTXISA != "" || f.ImageArch != "" {
		ml.Floor = &f
	}
	for _, e := range m.Entries {
		ml.Entries = append(ml.Entries, e.Name)
	}
	return ml
}

// kernelsTable writes the kernel catalogs of the plugins' names, one line
// per kernel (attnplug plugins --kernels).
func kernelsTable(w io.Writer, reg *registry.Registry, list []registry.PluginInfo) error {
	type row struct {
		Plugin, Name string
		Kernel       []core.Kernel
	}
	var rows []row
	for _, p := range list {
		for _, n := range p.Names {
			h, _, _ := reg.Handler(n)
			// The catalog, with the host's reference kernels for the
			// declared methods it leaves out.
			rows = append(rows, row{Plugin: p.Name, Name: n, Kernel: h.Catalog()})
		}
	}
	rows = append(rows, row{Plugin: core.PluginCore, Name: core.TritonName, Kernel: core.TritonKernels()})
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-10s %-15s %-20s %-50s %-26s %-22s %-10s %-10s %-8s %s\n", "PLUGIN", "NAME", "METHOD", "KERNEL", "LIBRARY", "DTYPES", "HEAD_DIMS", "PAGES", "GRAPH", "HARDWARE")
	for _, r := range rows {
		if len(r.Kernel) == 0 {
			fmt.Fprintf(&sb, "%-10s %-15s (no kernel catalog: decides methods, runs no kernels)\n", r.Plugin, r.Name)
		}
		for _, k := range r.Kernel {
			dims := make([]string, len(k.HeadDims))
			for i, d := range k.HeadDims {
				dims[i] = fmt.Sprint(d)
			}
			graph := "no"
			if k.CUDAGraph {
				graph = "yes"
			}
			name := k.Name
			if k.Sparse {
				name += " (sparse)"
			}
			hw := hardwareString(k.Hardware)
			if inHost(r.Plugin, k) && len(k.Hardware) == 0 {
				hw = "host"
			}
			fmt.Fprintf(&sb, "%-10s %-15s %-20s %-50s %-26s %-22s %-10s %-10s %-8s %s\n", r.Plugin, r.Name, k.Method, name, k.Library,
				strings.Join(k.DTypes, ","), strings.Join(dims, "/"), pagesString(k.PageSizes), graph, hw)
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// kernelJSON is a catalog entry in attnplug plugins --kernels --json.
type kernelJSON struct {
	Name      string         `json:"name"`
	Library   string         `json:"library"`
	Method    string         `json:"method"`
	DTypes    []string       `json:"dtypes"`
	HeadDims  []int          `json:"head_dims"`
	PageSizes []int          `json:"page_sizes"` // empty: any
	CUDAGraph bool           `json:"cuda_graph"`
	Sparse    bool           `json:"sparse"`
	Hardware  []hardwareJSON `json:"hardware"` // empty: any
	// InHost reports a kernel the host runs in its own process, on its
	// own hardware: the triton rules' kernels and the host's reference
	// kernels (core.LibHostReference).
	InHost bool `json:"in_host,omitempty"`
}

// inHost reports whether kernel k of plugin's catalog runs in the host's
// process: the triton rules' (plugin core) and the host's reference
// kernels, which complete a catalog.
func inHost(plugin string, k core.Kernel) bool {
	return plugin == core.PluginCore || k.Library == core.LibHostReference
}

// pagesString is the PAGES column of plugins --kernels: the page sizes a
// kernel takes, "any" when it takes any.
func pagesString(sizes []int) string {
	if len(sizes) == 0 {
		return "any"
	}
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// hardwareJSON is one core.Hardware entry, platforms by name.
type hardwareJSON struct {
	Platforms     []string `json:"platforms"`
	MinCapability int      `json:"min_capability,omitempty"`
	MaxCapability int      `json:"max_capability,omitempty"`
	Archs         []string `json:"archs,omitempty"`
	NeedsAMX      bool     `json:"needs_amx,omitempty"`
}

func kernelToJSON(plugin string, k core.Kernel) kernelJSON {
	out := kernelJSON{Name: k.Name, Library: k.Library, Method: k.Method.String(), DTypes: k.DTypes, HeadDims: k.HeadDims,
		PageSizes: k.PageSizes, CUDAGraph: k.CUDAGraph, Sparse: k.Sparse, Hardware: []hardwareJSON{}, InHost: inHost(plugin, k)}
	for _, h := range k.Hardware {
		hj := hardwareJSON{Platforms: []string{}, MinCapability: h.MinCapability, MaxCapability: h.MaxCapability, Archs: h.Archs, NeedsAMX: h.NeedsAMX}
		for _, p := range h.Platforms {
			hj.Platforms = append(hj.Platforms, p.String())
		}
		out.Hardware = append(out.Hardware, hj)
	}
	return out
}

func hardwareString(hw []core.Hardware) string {
	if len(hw) == 0 {
		return "any"
	}
	var parts []string
	for _, h := range hw {
		var p []string
		for _, pl := range h.Platforms {
			p = append(p, pl.String())
		}
		if h.PlatformName != "" {
			p = append(p, h.PlatformName)
		}
		s := strings.Join(p, "|")
		switch {
		case h.MinCapability > 0 && h.MaxCapability > 0:
			s += fmt.Sprintf(" sm%d-sm%d", h.MinCapability, h.MaxCapability)
		case h.MinCapability > 0:
			s += fmt.Sprintf(" sm%d+", h.MinCapability)
		case h.MaxCapability > 0:
			s += fmt.Sprintf(" up to sm%d", h.MaxCapability)
		}
		if len(h.Archs) > 0 {
			s += " " + strings.Join(h.Archs, "|")
		}
		if h.NeedsAMX {
			s += " amx"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " or ")
}
