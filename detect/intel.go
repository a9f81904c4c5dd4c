package detect

import "fmt"

// intelModel is a row of the Intel GPU device-ID table.
type intelModel struct {
	name string
	arch string
}

// intelModels maps PCI device IDs (vendor 0x8086, display class) of
// data-center and discrete GPUs to model and architecture, from pci.ids.
func intelModels() map[uint16]intelModel {
	return map[uint16]intelModel{
		0x0bd0: {"Data Center GPU Max (Ponte Vecchio XL)", "xe-hpc"},
		0x0bd5: {"Data Center GPU Max 1550", "xe-hpc"},
		0x0bd6: {"Data Center GPU Max 1550", "xe-hpc"},
		0x0bd9: {"Data Center GPU Max 1100", "xe-hpc"},
		0x0bda: {"Data Center GPU Max 1100", "xe-hpc"},
		0x0bdb: {"Data Center GPU Max 1100", "xe-hpc"},
		0x56a0: {"Arc A770", "xe-hpg"},
		0x56a1: {"Arc A750", "xe-hpg"},
		0xe20b: {"Arc B580", "xe2-hpg"},
		0xe20c: {"Arc B570", "xe2-hpg"},
		0xe211: {"Arc Pro B60", "xe2-hpg"},
		0xe212: {"Arc Pro B50", "xe2-hpg"},
	}
}

// integratedIntel reports whether an Intel GPU is integrated: Intel puts
// the iGPU at bus 00, device 02 (0000:00:02.0). Bus 00 alone is not
// enough: in a VM, passed-through discrete GPUs often sit on bus 00 too.
func integratedIntel(addr string) bool {
	_, bus, dev, _, ok := parsePCIAddress(addr)
	return ok && bus == 0 && dev == 2
}

// intelDevices builds the verdicts for Intel GPUs: i915 or xe bound, the
// render node opens, not integrated.
func intelDevices(e *env, pcis []pciDev) []Device {
	if len(pcis) == 0 {
		return nil
	}
	models := intelModels()
	drm := drmNodes(e)
	out := make([]Device, 0, len(pcis))
	for _, p := range pcis {
		d := Device{Vendor: VendorIntel, PCIAddress: p.addr, PCIID: p.id()}
		integrated := integratedIntel(p.addr)
		m, known := models[p.device]
		switch {
		case known:
			d.Model, d.Arch = "Intel "+m.name, m.arch
		case integrated:
			d.Model = fmt.Sprintf("Intel integrated GPU 0x%04x", p.device)
		default:
			d.Model = fmt.Sprintf("Intel GPU 0x%04x", p.device)
		}
		d.Reason = func() string {
			if p.err != nil {
				return reason(CheckPresent, "%v", p.err)
			}
			if r := driverReason(p, "i915", "xe"); r != "" {
				return r
			}
			render := renderNodeOf(drm[p.addr])
			if render == "" {
				return reason(CheckDeviceNode, "no render node for %s in %s", p.addr, disp("sys/class/drm"))
			}
			if r := e.openRel("dev/dri/" + render); r != "" {
				return reason(CheckDeviceNode, "%s", r)
			}
			if integrated && !known {
				return reason(CheckCapable, "integrated GPU at %s is not used for serving", p.addr)
			}
			return ""
		}()
		d.Usable = d.Reason == ""
		out = append(out, d)
	}
	return out
}
