package detect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// VendorUnlisted is the Device.Vendor of an accelerator of no platform
// attnplug lists: a processing accelerator or co-processor of a PCI vendor
// that no vendor code of Detect knows. Such a device is described by its
// IDs, its driver and its device nodes; a plugin that declares it
// (core.Hardware.Devices) runs on it.
const VendorUnlisted = "unlisted"

// DeviceNode is a device node a driver made for an unlisted device.
type DeviceNode struct {
	// Path is the node, such as "/dev/accel/accel0".
	Path string `json:"path"`
	// Present reports that the node exists.
	Present bool `json:"present"`
	// Permitted reports that it opens for this user.
	Permitted bool `json:"permitted"`
}

// unlistedDevices builds the verdicts of unlisted devices: usable when a
// driver other than vfio-pci is bound and the device nodes the driver made
// (found in sysfs under the device) exist and open.
func unlistedDevices(e *env, pcis []pciDev) []Device {
	out := make([]Device, 0, len(pcis))
	for _, p := range pcis {
		kind := "processing accelerator"
		if p.class>>8 == pciClassCoprocessor {
			kind = "co-processor"
		}
		d := Device{Vendor: VendorUnlisted, Model: fmt.Sprintf("PCI %s %s", kind, p.id()), PCIAddress: p.addr, PCIID: p.id()}
		for _, rel := range deviceNodes(e, p.addr) {
			n := DeviceNode{Path: disp(rel)}
			why := e.openRel(rel)
			n.Present = !strings.HasSuffix(why, " missing")
			n.Permitted = why == ""
			d.DeviceNodes = append(d.DeviceNodes, n)
			if why != "" && d.Reason == "" {
				d.Reason = reason(CheckDeviceNode, "%s", why)
			}
		}
		switch {
		case p.err != nil:
			d.Reason = reason(CheckPresent, "%v", p.err)
		case driverReason(p) != "":
			d.Reason = driverReason(p)
		case len(d.DeviceNodes) == 0:
			d.Reason = reason(CheckDeviceNode, "driver %s made no device node under %s (none of its class directories holds a dev entry)", p.driver, disp("sys/bus/pci/devices/"+p.addr))
		}
		d.Usable = d.Reason == ""
		out = append(out, d)
	}
	return out
}

// deviceNodes returns the device nodes (root-relative) of the PCI device
// at addr: every sysfs class device under it that has a dev entry, as
// sys/bus/pci/devices/<addr>/<class>/<name>/dev; the node is
// /dev/accel/<name> for the accel class, /dev/dri/<name> for drm and
// /dev/<name> otherwise.
func deviceNodes(e *env, addr string) []string {
	base := "sys/bus/pci/devices/" + addr
	classes, err := os.ReadDir(e.path(base))
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range classes {
		if !c.IsDir() || c.Name() == "driver" || c.Name() == "subsystem" || c.Name() == "power" {
			continue
		}
		names, err := os.ReadDir(e.path(base + "/" + c.Name()))
		if err != nil {
			continue
		}
		for _, n := range names {
			if _, err := os.Stat(e.path(base + "/" + c.Name() + "/" + n.Name() + "/dev")); errors.Is(err, fs.ErrNotExist) || err != nil {
				continue
			}
			switch c.Name() {
			case "accel":
				out = append(out, "dev/accel/"+n.Name())
			case "drm":
				out = append(out, "dev/dri/"+n.Name())
			default:
				out = append(out, "dev/"+n.Name())
			}
		}
	}
	sort.Strings(out)
	return out
}

// hostDevice returns d as a core.HostDevice, and whether its PCI ID parses.
func (d Device) hostDevice() (core.HostDevice, bool) {
	v, dev, ok := strings.Cut(d.PCIID, ":")
	vendor, err1 := strconv.ParseUint(v, 16, 16)
	device, err2 := strconv.ParseUint(dev, 16, 16)
	if !ok || err1 != nil || err2 != nil {
		return core.HostDevice{}, false
	}
	return core.HostDevice{VendorID: uint16(vendor), DeviceID: uint16(device), Driver: d.Driver, PCIAddress: d.PCIAddress}, true
}

// NamePlatforms sets the PluginPlatform of each unlisted device that an
// entry of hw declares (core.Hardware.Devices) to that entry's
// PlatformName: the host calls it with the hardware its plugins declare.
func (r *Report) NamePlatforms(hw []core.Hardware) {
	for i := range r.Devices {
		d := &r.Devices[i]
		hd, ok := d.hostDevice()
		if d.Vendor != VendorUnlisted || !ok {
			continue
		}
		for _, h := range hw {
			for _, p := range h.Devices {
				if h.PlatformName != "" && p.Matches(hd) && d.PluginPlatform == "" {
					d.PluginPlatform = h.PlatformName
				}
			}
		}
	}
}
