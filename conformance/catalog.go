package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// maxHeadDim bounds a kernel's head dimension: far above any model's.
const maxHeadDim = 1 << 14

// maxPageSize bounds a kernel's KV cache page size.
const maxPageSize = 1 << 20

// kernelDTypes are the dtypes a kernel may take: the KV cache dtypes of
// sglang (core.KVCacheDTypes, but "auto", which names none) and the
// quantised caches of other accelerators.
func kernelDTypes() []string {
	return append(slices.DeleteFunc(core.KVCacheDTypes(), func(s string) bool { return s == "auto" }), "int8", "int4", "fp32", "float32")
}

// kernelCatalog checks what a description says of kernels and hardware:
// every kernel has a name, runs a method its name declares (once), takes
// KV cache dtypes that exist, positive head dimensions and page sizes,
// and every hardware entry, of a name or of a kernel, names a platform.
func (s *suite) kernelCatalog(_ context.Context, c *Check) {
	kernels, entries := 0, 0
	for _, h := range s.desc.Handlers {
		for i, hw := range h.Hardware {
			entries++
			for _, p := range hardwareProblems(hw) {
				c.problem("%s: hardware entry %d %s", h.Name, i+1, p)
			}
		}
		seen := map[core.Method]string{}
		for _, k := range h.Kernels {
			kernels++
			name := k.Name
			if name == "" {
				name = "(no name)"
				c.problem("%s: a kernel for %s has no name", h.Name, k.Method)
			}
			switch {
			case !k.Method.Valid():
				c.problem("%s: kernel %s runs %s, not a method", h.Name, name, k.Method)
			case !slices.Contains(h.Methods, k.Method):
				c.problem("%s: kernel %s runs %s, a method %s does not declare (declared: %s)", h.Name, name, k.Method, h.Name, methodList(h.Methods))
			case seen[k.Method] != "":
				c.problem("%s: kernels %s and %s both run %s; the catalog has one kernel a method", h.Name, seen[k.Method], name, k.Method)
			}
			seen[k.Method] = name
			for _, dt := range k.DTypes {
				if !slices.Contains(kernelDTypes(), dt) {
					c.problem("%s: kernel %s: dtype %q is not a KV cache dtype (want one of %s)", h.Name, name, dt, strings.Join(kernelDTypes(), ", "))
				}
			}
			for _, d := range k.HeadDims {
				if d <= 0 || d > maxHeadDim {
					c.problem("%s: kernel %s: head dim %d is not in 1..%d", h.Name, name, d, maxHeadDim)
				}
			}
			for _, p := range k.PageSizes {
				if p <= 0 || p > maxPageSize {
					c.problem("%s: kernel %s: page size %d is not in 1..%d", h.Name, name, p, maxPageSize)
				}
			}
			for i, hw := range k.Hardware {
				entries++
				for _, p := range hardwareProblems(hw) {
					c.problem("%s: kernel %s: hardware entry %d %s", h.Name, name, i+1, p)
				}
			}
		}
	}
	if c.Status == Fail {
		c.Detail = "the kernel catalog or the hardware declared is not well-formed"
		return
	}
	if kernels == 0 && entries == 0 {
		c.Detail = "no kernels and no hardware declared: runs anywhere, decides methods only"
		return
	}
	c.Detail = fmt.Sprintf("%s and %d hardware entries well-formed", plural(kernels, "kernel"), entries)
}

// hardwareProblems says what is wrong with one hardware entry.
func hardwareProblems(hw core.Hardware) []string {
	var out []string
	if len(hw.Platforms) == 0 && hw.PlatformName == "" {
		what := "names no platform"
		if len(hw.Devices) > 0 {
			what = "names PCI devices but no platform (set PlatformName)"
		}
		out = append(out, what+": a host cannot tell what it runs on")
	}
	for _, p := range hw.Platforms {
		if p == core.PlatformUnset || !p.Valid() {
			out = append(out, fmt.Sprintf("names %s, not a platform of this host (for a platform of your own, set PlatformName and Devices)", p))
		}
	}
	if hw.PlatformName != "" {
		if !wire.ValidFamily(hw.PlatformName) {
			out = append(out, fmt.Sprintf("platform name %q: want letters, digits, '_' or '-'", hw.PlatformName))
		}
		if _, err := core.ParsePlatform(hw.PlatformName); err == nil {
			out = append(out, fmt.Sprintf("platform name %q is a platform of this host: list it in Platforms", hw.PlatformName))
		}
		if len(hw.Devices) == 0 {
			out = append(out, fmt.Sprintf("platform %q names no PCI devices: a host cannot find its hardware", hw.PlatformName))
		}
	}
	for _, d := range hw.Devices {
		if d.VendorID == 0 || d.VendorID == 0xffff {
			out = append(out, fmt.Sprintf("PCI vendor ID %#04x is not a vendor", d.VendorID))
		}
	}
	if hw.MinCapability < 0 || hw.MaxCapability < 0 || (hw.MaxCapability > 0 && hw.MinCapability > hw.MaxCapability) {
		out = append(out, fmt.Sprintf("capability bounds %d..%d are empty or negative", hw.MinCapability, hw.MaxCapability))
	}
	return out
}
