package detect

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PCI vendor IDs of the accelerators Detect knows.
const (
	pciVendorNVIDIA = 0x10de
	pciVendorAMD    = 0x1002
	pciVendorHuawei = 0x19e5
	pciVendorIntel  = 0x8086
)

// PCI classes (base<<8 | subclass) that matter here.
const (
	pciClassDisplay     = 0x03   // base class: VGA, 3D, other display
	pciClassAccelerator = 0x12   // base class: processing accelerator
	pciClassCoprocessor = 0x0b40 // co-processor
	pciClassBridgeOther = 0x0680 // NVSwitch
	pciClassAudio       = 0x0403 // HDMI/DP audio functions of GPUs
)

// pciDev is one entry of sys/bus/pci/devices.
type pciDev struct {
	addr   string // "0000:3b:00.0"
	vendor uint16
	device uint16
	class  uint32 // 24-bit class code
	driver string // basename of the driver symlink, "" when none
	err    error  // a file that should parse did not
	// unlisted marks a processing accelerator or co-processor that no
	// vendor code of Detect handles: it is listed generically.
	unlisted bool
}

// id returns "vvvv:dddd".
func (p pciDev) id() string { return fmt.Sprintf("%04x:%04x", p.vendor, p.device) }

// knownVendor reports whether Detect handles devices of this vendor.
func knownVendor(v uint16) bool {
	switch v {
	case pciVendorNVIDIA, pciVendorAMD, pciVendorHuawei, pciVendorIntel:
		return true
	}
	return false
}

// acceleratorClass reports whether a class code can be a GPU or NPU of
// the vendor: display controllers and processing accelerators (plus
// co-processors for Ascend, display only for Intel). NVSwitch bridges and
// audio functions are excluded.
func acceleratorClass(vendor uint16, class uint32) bool {
	sub := class >> 8
	base := class >> 16
	if sub == pciClassBridgeOther || sub == pciClassAudio {
		return false
	}
	if vendor == pciVendorIntel {
		return base == pciClassDisplay
	}
	return base == pciClassDisplay || base == pciClassAccelerator || sub == pciClassCoprocessor
}

// unlistedClass reports a class code that makes a device of a vendor
// Detect does not handle an accelerator: a processing accelerator or a
// co-processor. Display controllers of such vendors (a server's BMC VGA)
// are not.
func unlistedClass(class uint32) bool {
	return class>>16 == pciClassAccelerator || class>>8 == pciClassCoprocessor
}

// scanPCI lists the accelerators in sys/bus/pci/devices, sorted by address:
// those of known vendors, and, marked unlisted, the processing
// accelerators and co-processors that no vendor code handles. A missing
// directory gives none.
func scanPCI(e *env) []pciDev {
	const dir = "sys/bus/pci/devices"
	entries, err := os.ReadDir(e.path(dir))
	if err != nil {
		return nil
	}
	var out []pciDev
	for _, ent := range entries {
		addr := ent.Name()
		rel := dir + "/" + addr
		vb, err := e.readFile(rel + "/vendor")
		if err != nil {
			continue
		}
		vendor, err := parseHex(firstLine(vb), 16)
		if err != nil {
			continue
		}
		p := pciDev{addr: addr, vendor: uint16(vendor), unlisted: !knownVendor(uint16(vendor))}
		if _, _, _, _, ok := parsePCIAddress(addr); !ok {
			p.err = fmt.Errorf("malformed PCI address %q", addr)
		}
		cb, err := e.readFile(rel + "/class")
		if err != nil {
			continue // without a class we cannot tell a GPU from a NIC
		}
		class, err := parseHex(firstLine(cb), 24)
		if err != nil {
			p.err = fmt.Errorf("%s/class: %w", disp(rel), err)
		} else {
			p.class = uint32(class)
			switch {
			case !p.unlisted && acceleratorClass(p.vendor, p.class):
			case unlistedClass(p.class):
				p.unlisted = true
			default:
				continue
			}
		}
		if err != nil && p.unlisted {
			continue // a device of no known vendor whose class cannot be read
		}
		db, err := e.readFile(rel + "/device")
		if err == nil {
			var dev uint64
			dev, err = parseHex(firstLine(db), 16)
			p.device = uint16(dev)
		}
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("%s/device: %w", disp(rel), err)
		}
		if target, err := os.Readlink(e.path(rel + "/driver")); err == nil {
			p.driver = filepath.Base(target)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// parseHex parses "0x10de" or "10de" as an unsigned number of at most
// bits bits.
func parseHex(s string, bits int) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if t == "" {
		return 0, fmt.Errorf("empty hex value %q", s)
	}
	v, err := strconv.ParseUint(t, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("bad hex value %q: %w", s, err)
	}
	return v, nil
}

// parsePCIAddress splits "dddd:bb:dd.f" into its numbers.
func parsePCIAddress(addr string) (domain, bus, dev, fn uint64, ok bool) {
	parts := strings.Split(addr, ":")
	if len(parts) != 3 {
		return 0, 0, 0, 0, false
	}
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 {
		return 0, 0, 0, 0, false
	}
	var err error
	if domain, err = strconv.ParseUint(parts[0], 16, 32); err != nil {
		return 0, 0, 0, 0, false
	}
	if bus, err = strconv.ParseUint(parts[1], 16, 8); err != nil {
		return 0, 0, 0, 0, false
	}
	if dev, err = strconv.ParseUint(devfn[0], 16, 5); err != nil {
		return 0, 0, 0, 0, false
	}
	if fn, err = strconv.ParseUint(devfn[1], 16, 3); err != nil {
		return 0, 0, 0, 0, false
	}
	return domain, bus, dev, fn, true
}

// canonicalPCIAddress rewrites an address such as "00000000:3B:00.0" (as
// libcuda may print it) into the sysfs form "0000:3b:00.0".
func canonicalPCIAddress(addr string) (string, bool) {
	d, b, dv, f, ok := parsePCIAddress(strings.TrimSpace(addr))
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, dv, f), true
}

// drmNodes maps PCI addresses to their DRM node names ("card0",
// "renderD128") from the device symlinks in sys/class/drm.
func drmNodes(e *env) map[string][]string {
	const dir = "sys/class/drm"
	entries, err := os.ReadDir(e.path(dir))
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, ent := range entries {
		name := ent.Name()
		if strings.Contains(name, "-") || !(strings.HasPrefix(name, "card") || strings.HasPrefix(name, "renderD")) {
			continue // connectors such as card0-HDMI-A-1, and "version"
		}
		target, err := os.Readlink(e.path(dir + "/" + name + "/device"))
		if err != nil {
			continue
		}
		addr := filepath.Base(target)
		out[addr] = append(out[addr], name)
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

// renderNodeOf returns the renderD* name among a device's DRM nodes.
func renderNodeOf(names []string) string {
	for _, n := range names {
		if strings.HasPrefix(n, "renderD") {
			return n
		}
	}
	return ""
}
