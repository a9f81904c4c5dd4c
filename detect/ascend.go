package detect

import "fmt"

// ascendModel is a row of the Ascend device-ID table.
type ascendModel struct {
	name    string
	arch    string
	capable bool
}

// ascendModels maps PCI device IDs (vendor 0x19e5) to Ascend models.
// sglang's ascend backend serves DeepSeek on Atlas A2 (910B) and A3 (910C);
// the 310 inference cards and the first 910 are not capable.
func ascendModels() map[uint16]ascendModel {
	return map[uint16]ascendModel{
		0xd100: {"Ascend 310", "ascend310", false},
		0xd500: {"Ascend 310P", "ascend310p", false},
		0xd801: {"Ascend 910", "ascend910", false},
		0xd802: {"Ascend 910B", "ascend910b", true},
		0xd803: {"Ascend 910C", "ascend910c", true},
	}
}

// ascendDevices builds the verdicts for Ascend NPUs: a driver bound, the
// davinci nodes open, a 910B or 910C. The i-th NPU in PCI order is taken
// to be /dev/davinci<i>, the driver's numbering on a bare-metal host.
func ascendDevices(e *env, pcis []pciDev) []Device {
	if len(pcis) == 0 {
		return nil
	}
	models := ascendModels()
	out := make([]Device, 0, len(pcis))
	for i, p := range pcis {
		d := Device{Vendor: VendorHuawei, PCIAddress: p.addr, PCIID: p.id()}
		m, known := models[p.device]
		if known {
			d.Model, d.Arch = "Huawei "+m.name, m.arch
		} else {
			d.Model = fmt.Sprintf("Huawei device 0x%04x", p.device)
		}
		d.Reason = func() string {
			if p.err != nil {
				return reason(CheckPresent, "%v", p.err)
			}
			if r := driverReason(p); r != "" {
				return r
			}
			for _, n := range []string{"dev/davinci_manager", "dev/devmm_svm", "dev/hisi_hdc", fmt.Sprintf("dev/davinci%d", i)} {
				if r := e.openRel(n); r != "" {
					return reason(CheckDeviceNode, "%s", r)
				}
			}
			switch {
			case !known:
				return reason(CheckCapable, "unknown Ascend device id 0x%04x", p.device)
			case !m.capable:
				return reason(CheckCapable, "%s is not supported for DeepSeek serving (sglang's ascend backend needs 910B or 910C)", m.name)
			}
			return ""
		}()
		d.Usable = d.Reason == ""
		out = append(out, d)
	}
	return out
}
