package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Hardware describes hardware a backend's kernels can run on. A zero field
// does not constrain.
type Hardware struct {
	// Platforms the backend runs on.
	Platforms []Platform
	// MinCapability and MaxCapability bound the CUDA compute capability,
	// as major*10+minor (90 is sm90); 0 leaves the bound open.
	MinCapability, MaxCapability int
	// Archs lists the device architectures accepted, such as "gfx942".
	Archs []string
	// NeedsAMX requires a CPU with usable Intel AMX.
	NeedsAMX bool
	// PlatformName names a platform of the plugin's own, such as "acme",
	// for an accelerator that Platform does not list; Devices says which
	// devices it is. A host shows it for those devices.
	PlatformName string
	// Devices lists PCI devices the kernels run on: the host must have a
	// usable one (driver bound, device node present and permitted).
	Devices []PCIDevice
}

// PCIDevice names PCI devices by vendor and device ID.
type PCIDevice struct {
	// VendorID is the PCI vendor ID, such as 0x10de.
	VendorID uint16
	// DeviceIDs are the PCI device IDs; empty: every device of the vendor.
	DeviceIDs []uint16
	// Drivers are the kernel drivers the device must be bound to; empty:
	// any driver.
	Drivers []string
}

// Matches reports whether the host device d is one of p.
func (p PCIDevice) Matches(d HostDevice) bool {
	return d.VendorID == p.VendorID &&
		(len(p.DeviceIDs) == 0 || slices.Contains(p.DeviceIDs, d.DeviceID)) &&
		(len(p.Drivers) == 0 || slices.Contains(p.Drivers, d.Driver))
}

// String is "acce:0001,0002 (driver acme)", with "*" for every device.
func (p PCIDevice) String() string {
	ids := "*"
	if len(p.DeviceIDs) > 0 {
		parts := make([]string, len(p.DeviceIDs))
		for i, id := range p.DeviceIDs {
			parts[i] = fmt.Sprintf("%04x", id)
		}
		ids = strings.Join(parts, ",")
	}
	s := fmt.Sprintf("%04x:%s", p.VendorID, ids)
	if len(p.Drivers) > 0 {
		s += " (driver " + strings.Join(p.Drivers, " or ") + ")"
	}
	return s
}

// HostDevice is a usable PCI accelerator a host found, of a listed
// platform or not.
type HostDevice struct {
	// VendorID and DeviceID are the device's PCI IDs.
	VendorID, DeviceID uint16
	// Driver is the kernel driver bound to it.
	Driver string
	// PCIAddress is its address, such as "0000:3b:00.0".
	PCIAddress string
}

// HostInfo is what a host tells a backend about the hardware it detected,
// through Configurer.
type HostInfo struct {
	// Platform is the platform the host uses.
	Platform Platform
	// ComputeCapability is the lowest usable CUDA compute capability, as
	// major*10+minor; 0 when none or unknown.
	ComputeCapability int
	// Archs are the architectures of the usable devices.
	Archs []string
	// AMX reports a CPU with usable Intel AMX.
	AMX bool
	// Devices are the usable PCI accelerators, including those of no
	// platform of Platform's list.
	Devices []HostDevice
}

// Supports reports whether h runs on the host described by info, and when
// not, why.
func (h Hardware) Supports(info HostInfo) (bool, string) {
	if len(h.Platforms) > 0 && !slices.Contains(h.Platforms, info.Platform) {
		names := make([]string, len(h.Platforms))
		for i, p := range h.Platforms {
			names[i] = p.String()
		}
		return false, fmt.Sprintf("needs platform %s, host is %s", strings.Join(names, " or "), info.Platform)
	}
	cc := info.ComputeCapability
	if h.MinCapability > 0 && cc < h.MinCapability {
		return false, fmt.Sprintf("needs compute capability >= %d.%d, host has %s", h.MinCapability/10, h.MinCapability%10, capString(cc))
	}
	if h.MaxCapability > 0 && cc > h.MaxCapability {
		return false, fmt.Sprintf("needs compute capability <= %d.%d, host has %s", h.MaxCapability/10, h.MaxCapability%10, capString(cc))
	}
	if len(h.Archs) > 0 {
		ok := false
		for _, a := range info.Archs {
			ok = ok || slices.Contains(h.Archs, a)
		}
		if !ok {
			return false, fmt.Sprintf("needs a device of arch %s, host has %s", strings.Join(h.Archs, " or "), strings.Join(info.Archs, ", "))
		}
	}
	if h.NeedsAMX && !info.AMX {
		return false, "needs a CPU with usable Intel AMX"
	}
	if len(h.Devices) > 0 && !slices.ContainsFunc(info.Devices, func(d HostDevice) bool {
		return slices.ContainsFunc(h.Devices, func(p PCIDevice) bool { return p.Matches(d) })
	}) {
		names := make([]string, len(h.Devices))
		for i, p := range h.Devices {
			names[i] = p.String()
		}
		what := "a usable PCI device " + strings.Join(names, " or ")
		if h.PlatformName != "" {
			what += " (" + h.PlatformName + ")"
		}
		return false, fmt.Sprintf("needs %s, host has none", what)
	}
	return true, ""
}

func capString(cc int) string {
	if cc == 0 {
		return "none"
	}
	return fmt.Sprintf("%d.%d", cc/10, cc%10)
}

// SupportsAny reports whether any entry of hw runs on info; an empty list
// runs anywhere. The reason is the first entry's.
func SupportsAny(hw []Hardware, info HostInfo) (bool, string) {
	if len(hw) == 0 {
		return true, ""
	}
	var first string
	for i, h := range hw {
		ok, why := h.Supports(info)
		if ok {
			return true, ""
		}
		if i == 0 {
			first = why
		}
	}
	return false, first
}

// Configurer is an optional ability of a Backend: the host tells it the
// hardware it detected before sending requests, and the backend refuses,
// with an error wrapping ErrRefused, hardware it cannot run on. Over the
// wire it is always present; a plugin without it accepts any hardware.
type Configurer interface {
	// Configure is called once, before any Dispatch, by a host that
	// matches plugins to its hardware.
	Configure(ctx context.Context, info HostInfo) error
}
