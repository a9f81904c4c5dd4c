package detect

import (
	"slices"

	"github.com/attnplug/attnplug/core"
)

// HostInfo returns what the host tells plugins about this hardware
// (core.Configurer): the platform, the lowest compute capability of the
// usable CUDA GPUs as major*10+minor (0 on other platforms or when
// unknown), the architectures of the usable devices of the platform
// ("sm90", "gfx942", ...; on the cpu platform, the CPU's architecture,
// "amd64"), whether Intel AMX is usable on an amd64 CPU, and every usable
// device by PCI IDs and driver, unlisted ones included.
//
// HostInfo keeps only the lowest capability, so a core.Hardware maximum is
// held against it, not against the newest GPU as Requirement.Satisfied
// does; a host that mixes GPU generations should be checked with Select.
func (r *Report) HostInfo() core.HostInfo {
	platform := r.Platform
	if platform == "" {
		platform = choosePlatform(r.Devices)
	}
	info := core.HostInfo{
		Platform: corePlatform(platform),
		AMX:      r.CPU.AMX && r.CPU.Arch == "amd64",
	}
	for _, d := range r.Devices {
		if hd, ok := d.hostDevice(); ok && d.Usable {
			info.Devices = append(info.Devices, hd)
		}
	}
	if platform == PlatformCPU {
		if r.CPU.Arch != "" {
			info.Archs = []string{r.CPU.Arch}
		}
		return info
	}
	for _, d := range r.usableOn(platform) {
		if d.Arch != "" && !slices.Contains(info.Archs, d.Arch) {
			info.Archs = append(info.Archs, d.Arch)
		}
		if c := d.capability(); platform == PlatformCUDA && c > 0 && (info.ComputeCapability == 0 || c < info.ComputeCapability) {
			info.ComputeCapability = c
		}
	}
	return info
}

// Hardware returns the requirement as the core.Hardware entries a plugin
// description declares (any entry may match). Requirement bounds the
// compute capability on cuda only, and core.Hardware on every platform it
// lists, so a requirement that bounds the capability and names other
// platforms too becomes two entries: cuda with the bounds, the rest
// without. The zero Requirement gives nil: runs anywhere.
func (q Requirement) Hardware() []core.Hardware {
	if len(q.Platforms) == 0 && q.MinCapability == 0 && q.MaxCapability == 0 && len(q.Archs) == 0 && !q.NeedsAMX {
		return nil
	}
	base := core.Hardware{Archs: slices.Clone(q.Archs), NeedsAMX: q.NeedsAMX}
	if q.MinCapability == 0 && q.MaxCapability == 0 {
		h := base
		for _, p := range q.Platforms {
			h.Platforms = append(h.Platforms, corePlatform(p))
		}
		return []core.Hardware{h}
	}
	var out []core.Hardware
	var others []core.Platform
	for _, p := range q.Platforms {
		if p != PlatformCUDA {
			others = append(others, corePlatform(p))
		}
	}
	if len(q.Platforms) == 0 || slices.Contains(q.Platforms, PlatformCUDA) {
		h := base
		h.Platforms = []core.Platform{core.PlatformCUDA}
		h.Archs = slices.Clone(q.Archs)
		h.MinCapability, h.MaxCapability = q.MinCapability, q.MaxCapability
		out = append(out, h)
	}
	if len(q.Platforms) == 0 {
		// Any platform: the capability bounds only CUDA, so every other
		// platform is a second entry.
		others = []core.Platform{core.PlatformHIP, core.PlatformNPU, core.PlatformXPU, core.PlatformCPU}
	}
	if len(others) > 0 {
		h := base
		h.Archs = slices.Clone(q.Archs)
		h.Platforms = others
		out = append(out, h)
	}
	return out
}

// HardwareFor returns the core.Hardware a plugin serving backend declares,
// from the requirement table (RequirementFor), and whether backend is in
// it. Plugins declare the same values; a test holds them to this table.
func HardwareFor(backend string) ([]core.Hardware, bool) {
	q, ok := RequirementFor(backend)
	if !ok {
		return nil, false
	}
	return q.Hardware(), true
}

// corePlatform returns the core.Platform of a platform name; an unknown
// name gives a value that no host matches.
func corePlatform(name string) core.Platform {
	p, err := core.ParsePlatform(name)
	if err != nil || p == core.PlatformUnset {
		return core.Platform(255)
	}
	return p
}
