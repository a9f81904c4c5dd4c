package detect

import (
	"strings"
)

// Platform names, as the host and sglang spell them.
const (
	PlatformCUDA = "cuda" // NVIDIA GPUs
	PlatformHIP  = "hip"  // AMD GPUs (ROCm)
	PlatformNPU  = "npu"  // Huawei Ascend NPUs
	PlatformXPU  = "xpu"  // Intel GPUs
	PlatformCPU  = "cpu"  // no usable accelerator
)

// Vendor names used in Device.Vendor.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorHuawei = "huawei"
	VendorIntel  = "intel"
)

// Check names that prefix Device.Reason, in the order the checks run.
const (
	CheckPresent    = "present"     // the device is listed and its IDs parse
	CheckDriver     = "driver"      // a usable kernel driver is bound and loaded
	CheckAllocated  = "allocated"   // the driver exposes the device to this container (NVIDIA)
	CheckDeviceNode = "device node" // the /dev nodes exist and open
	CheckCapable    = "capable"     // capability, gfx target or model supports serving
)

// Report is what Detect found, in the JSON shape the host prints.
type Report struct {
	// Platform is the platform the host will serve on.
	Platform string `json:"platform"`
	// Devices lists the GPUs and NPUs seen on the PCI bus, by PCI address.
	Devices []Device `json:"devices"`
	// CPU describes the host CPU.
	CPU CPU `json:"cpu"`
	// DefaultBackend holds sglang's default backends on this platform.
	DefaultBackend DefaultBackend `json:"default_backend"`
	// Plugins is filled in by the host with the plugins it found.
	Plugins []PluginInfo `json:"plugins"`

	// Root is the directory the report was read from.
	Root string `json:"-"`
	// TPSize is the tensor-parallel size the defaults were computed for.
	TPSize int `json:"-"`
}

// Device is one accelerator seen on the PCI bus.
type Device struct {
	Vendor     string `json:"vendor"`      // VendorNVIDIA, VendorAMD, ...
	Model      string `json:"model"`       // e.g. "NVIDIA H200 SXM 141GB"
	PCIAddress string `json:"pci_address"` // e.g. "0000:3b:00.0"
	// PCIID is "vendor:device" in lower-case hex, e.g. "10de:2335".
	PCIID string `json:"pci_id"`
	// Arch is "sm90" (NVIDIA), "gfx942" (AMD), "ascend910b" (Huawei),
	// "xe-hpc" (Intel) or "" when unknown.
	Arch string `json:"arch"`
	// ComputeCapability is "major.minor" for NVIDIA GPUs, "" otherwise or
	// when unknown.
	ComputeCapability string `json:"compute_capability"`
	Usable            bool   `json:"usable"` // every check passed
	// Reason is empty when Usable, else "<check>: <what failed>".
	Reason string `json:"reason"`
	// VendorID and DeviceID are the PCI IDs in lower-case hex, such as
	// "10de" and "2335".
	VendorID string `json:"vendor_id"`
	DeviceID string `json:"device_id"`
	// Driver is the kernel driver bound to the device, "" when none.
	Driver string `json:"driver"`
	// DeviceNodes are, for an unlisted device, the device nodes its driver
	// made, each present or not and permitted or not.
	DeviceNodes []DeviceNode `json:"device_nodes,omitempty"`
	// PluginPlatform is, for an unlisted device, the platform name a
	// plugin declares for it (core.Hardware.PlatformName); the host fills
	// it in (Report.NamePlatforms).
	PluginPlatform string `json:"plugin_platform,omitempty"`

	ccSource string // where ComputeCapability came from: "pci id", "libcuda"
}

// Platform returns the platform this device serves on, from its vendor.
func (d Device) Platform() string {
	switch d.Vendor {
	case VendorNVIDIA:
		return PlatformCUDA
	case VendorAMD:
		return PlatformHIP
	case VendorHuawei:
		return PlatformNPU
	case VendorIntel:
		return PlatformXPU
	}
	return ""
}

// Check returns the name of the check that failed, from the Reason prefix,
// or "" for a usable device.
func (d Device) Check() string {
	if d.Usable {
		return ""
	}
	check, _, ok := strings.Cut(d.Reason, ": ")
	if !ok {
		return ""
	}
	return check
}

// capability returns the compute capability as major*10+minor, or 0.
func (d Device) capability() int {
	c, ok := parseCapability(d.ComputeCapability)
	if !ok {
		return 0
	}
	return c
}

// CPU describes the host CPU as far as backend selection cares.
type CPU struct {
	// Arch is "amd64", "arm64" or "" when unknown.
	Arch string `json:"arch"`
	// Vendor is vendor_id on x86 ("GenuineIntel") or the implementer name
	// on arm64 ("ARM", "HiSilicon").
	Vendor string `json:"vendor,omitempty"`
	// Model is the model name, or the arm64 part number.
	Model string `json:"model,omitempty"`
	// AMX reports usable Intel AMX: the CPU has it and the kernel allows it.
	AMX bool `json:"amx"`
	// AMXFlags lists the amx_* flags in /proc/cpuinfo.
	AMXFlags []string `json:"amx_flags,omitempty"`
	// AMXKernel is "supported", "unsupported", or "not checked" (fixture
	// roots, or a CPU without AMX).
	AMXKernel string `json:"amx_kernel,omitempty"`
	// Reason says why AMX is not usable; empty when it is.
	Reason string `json:"reason,omitempty"`
}

// DefaultBackend holds the default attention backend for each DeepSeek
// attention kind.
type DefaultBackend struct {
	// MLA is the default for DeepSeek-V3/R1 (multi-head latent attention).
	MLA string `json:"mla"`
	// DSA is the default for DeepSeek-V3.2 (DeepSeek sparse attention).
	DSA string `json:"dsa"`
	// SGLangDefault is sglang's own choice where attnplug's differs (DSA
	// on sm80-89 and on XPU, where sglang picks dsa and attnplug falls back
	// to triton), so that scripts that mirror sglang keep working; nil
	// where they agree.
	SGLangDefault *SGLangDefault `json:"sglang_default,omitempty"`
}

// SGLangDefault is sglang's default attention backend for each attention
// kind, and why attnplug's default differs from it.
type SGLangDefault struct {
	MLA string `json:"mla"`
	DSA string `json:"dsa"`
	// Reason says, per attention kind that differs, why attnplug chose
	// otherwise.
	Reason string `json:"reason"`
}

// PluginInfo is one plugin the host found, filled in by the host.
type PluginInfo struct {
	Name  string   `json:"name"`  // the plugin (backend family), e.g. "fa3"
	Path  string   `json:"path"`  // the plugin binary
	Names []string `json:"names"` // the backend names it serves here
	// Status is the registry's status of the plugin: "ready", "broken", ...
	Status string `json:"status"`
	// Served reports that the plugin is usable and the hardware of at
	// least one of its names matches this host, so the host starts it.
	Served bool   `json:"served"`
	Reason string `json:"reason,omitempty"` // why not served
}

// usableOn returns the usable devices of a platform.
func (r *Report) usableOn(platform string) []Device {
	var out []Device
	for _, d := range r.Devices {
		if d.Usable && d.Platform() == platform {
			out = append(out, d)
		}
	}
	return out
}

// platformOrder is the order in which usable accelerators win the platform.
func platformOrder() []string {
	return []string{PlatformCUDA, PlatformHIP, PlatformNPU, PlatformXPU}
}

// choosePlatform returns the first platform in platformOrder with a usable
// device, else PlatformCPU.
func choosePlatform(devs []Device) string {
	for _, p := range platformOrder() {
		for _, d := range devs {
			if d.Usable && d.Platform() == p {
				return p
			}
		}
	}
	return PlatformCPU
}
