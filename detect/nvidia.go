package detect

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// nvidiaModel is a row of the NVIDIA device-ID table.
type nvidiaModel struct {
	name string
	cc   int // compute capability, major*10+minor
}

// nvidiaModels maps PCI device IDs (vendor 0x10de) to model and compute
// capability. IDs are from the PCI ID database (pci.ids, pciutils/pciids);
// capabilities from NVIDIA's CUDA GPU list. A function, so the table is
// never shared mutable state.
func nvidiaModels() map[uint16]nvidiaModel {
	return map[uint16]nvidiaModel{
		// Ampere GA100: sm80.
		0x20b0: {"A100 SXM4 40GB", 80},
		0x20b1: {"A100 PCIe 40GB", 80},
		0x20b2: {"A100 SXM4 80GB", 80},
		0x20b3: {"A100-SXM-64GB", 80},
		0x20b5: {"A100 PCIe 80GB", 80},
		0x20b7: {"A30 PCIe", 80},
		0x20b8: {"A100X", 80},
		0x20b9: {"A30X", 80},
		0x20bd: {"A800 SXM4 40GB", 80},
		0x20f1: {"A100 PCIe 40GB", 80},
		0x20f3: {"A800-SXM4-80GB", 80},
		0x20f5: {"A800 80GB PCIe", 80},
		0x20f6: {"A800 40GB PCIe", 80},
		0x20fd: {"AX800", 80},
		// Ampere GA102: sm86.
		0x2235: {"A40", 86},
		0x2236: {"A10", 86},
		// Ada AD10x: sm89.
		0x2684: {"GeForce RTX 4090", 89},
		0x2685: {"GeForce RTX 4090 D", 89},
		0x26b5: {"L40", 89},
		0x26b7: {"L20", 89},
		0x26b8: {"L40G", 89},
		0x26b9: {"L40S", 89},
		0x26ba: {"L20", 89},
		0x27b8: {"L4", 89},
		// Hopper GH100: sm90.
		0x230c: {"H20 NVL16", 90},
		0x230e: {"H20 NVL16", 90},
		0x2313: {"H100 CNX", 90},
		0x2321: {"H100 NVL", 90}, // pci.ids: "H100L 94GB"
		0x2322: {"H800 PCIe", 90},
		0x2324: {"H800", 90},
		0x2328: {"H20B", 90},
		0x2329: {"H20", 90},
		0x232c: {"H20 HBM3e", 90},
		0x2330: {"H100 SXM5 80GB", 90},
		0x2331: {"H100 PCIe", 90},
		0x2335: {"H200 SXM 141GB", 90},
		0x2336: {"H100", 90},
		0x2337: {"H100 SXM5 64GB", 90},
		0x2338: {"H100 SXM5 96GB", 90},
		0x2339: {"H100 SXM5 94GB", 90},
		0x233a: {"H800L 94GB", 90},
		0x233b: {"H200 NVL", 90},
		0x233d: {"H100 96GB", 90},
		0x2342: {"GH200 120GB / 480GB", 90},
		0x2348: {"GH200 144G HBM3e", 90},
		// Blackwell GB100/GB102: sm100.
		0x2901: {"B200", 100},
		0x2909: {"HGX B200 168GB", 100},
		0x2920: {"B100", 100}, // pci.ids: "TS4 / B100"
		0x29bc: {"B100", 100},
		0x2941: {"GB200", 100}, // pci.ids: "HGX GB200"
		// Blackwell Ultra GB110: sm103.
		0x3182: {"B300 SXM6 AC", 103},
		0x31a1: {"GB300 MaxQ", 103},
		0x31c2: {"GB300", 103},
		0x31c3: {"GB300", 103},
		// Jetson Thor GB10B: sm110.
		0x2b00: {"Jetson AGX Thor", 110},
		// Blackwell GB202: sm120.
		0x2b85: {"GeForce RTX 5090", 120},
		0x2b87: {"GeForce RTX 5090 D", 120},
		0x2bb1: {"RTX PRO 6000 Blackwell Workstation Edition", 120},
		0x2bb4: {"RTX PRO 6000 Blackwell Max-Q Workstation Edition", 120},
		0x2bb5: {"RTX PRO 6000 Blackwell Server Edition", 120},
		// GB10 (DGX Spark): sm121.
		0x2e12: {"GB10", 121},
	}
}

// minServingCapability is sm80: sglang's MLA backends need Ampere or newer.
const minServingCapability = 80

// nvidiaInfo is what proc/driver/nvidia/gpus/<addr>/information says.
type nvidiaInfo struct {
	model    string
	minor    int
	hasMinor bool
	bus      string
}

// parseNVIDIAInformation parses the driver's per-GPU information file.
// It fails when the file has no "key: value" line or a malformed
// "Device Minor".
func parseNVIDIAInformation(b []byte) (nvidiaInfo, error) {
	var info nvidiaInfo
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		lines++
		key = strings.TrimSpace(key)
		val = strings.TrimSpace(val)
		switch key {
		case "Model":
			info.model = val
		case "Bus Location":
			info.bus = val
		case "Device Minor":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 255 {
				return info, fmt.Errorf("bad Device Minor %q", val)
			}
			info.minor, info.hasMinor = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return info, fmt.Errorf("reading information: %w", err)
	}
	if lines == 0 {
		return info, fmt.Errorf("no \"key: value\" lines")
	}
	return info, nil
}

// formatCapability writes 90 as "9.0".
func formatCapability(cc int) string {
	if cc <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", cc/10, cc%10)
}

// parseCapability reads "9.0" as 90.
func parseCapability(s string) (int, bool) {
	maj, min, ok := strings.Cut(s, ".")
	if !ok {
		return 0, false
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if err1 != nil || err2 != nil || a <= 0 || b < 0 || b > 9 {
		return 0, false
	}
	return a*10 + b, true
}

// nvidiaDevices builds the verdicts for NVIDIA GPUs: driver bound and
// loaded, allocated to this container, device nodes, capability >= 8.0.
func nvidiaDevices(ctx context.Context, e *env, pcis []pciDev) []Device {
	if len(pcis) == 0 {
		return nil
	}
	models := nvidiaModels()
	driverLoaded := e.exists("proc/driver/nvidia/version")
	var fromDriver map[string]cudaDevice
	if e.cuda != nil && driverLoaded {
		if devs, err := e.cuda(ctx); err == nil {
			fromDriver = map[string]cudaDevice{}
			for _, d := range devs {
				if addr, ok := canonicalPCIAddress(d.pciAddress); ok {
					fromDriver[addr] = d
				}
			}
		}
	}
	out := make([]Device, 0, len(pcis))
	for _, p := range pcis {
		d := Device{Vendor: VendorNVIDIA, PCIAddress: p.addr, PCIID: p.id()}
		m, known := models[p.device]
		cc := 0
		if known {
			d.Model, cc, d.ccSource = "NVIDIA "+m.name, m.cc, "pci id"
		} else {
			d.Model = fmt.Sprintf("NVIDIA device 0x%04x", p.device)
		}
		infoRel := "proc/driver/nvidia/gpus/" + p.addr + "/information"
		infoBytes, infoErr := e.readFile(infoRel)
		var info nvidiaInfo
		var parseErr error
		if infoErr == nil {
			info, parseErr = parseNVIDIAInformation(infoBytes)
			if !known && info.model != "" {
				d.Model = info.model
			}
		}
		if cd, ok := fromDriver[p.addr]; ok && cd.major > 0 {
			cc, d.ccSource = cd.major*10+cd.minor, "libcuda"
			if !known && cd.name != "" {
				d.Model = cd.name
			}
		}
		d.ComputeCapability = formatCapability(cc)
		if cc > 0 {
			d.Arch = fmt.Sprintf("sm%d", cc)
		}

		d.Reason = func() string {
			if p.err != nil {
				return reason(CheckPresent, "%v", p.err)
			}
			if r := driverReason(p, "nvidia"); r != "" {
				return r
			}
			if !driverLoaded {
				return reason(CheckDriver, "NVIDIA driver not loaded: %s missing", disp("proc/driver/nvidia/version"))
			}
			if infoErr != nil {
				return reason(CheckAllocated, "%s not in %s (not allocated to this container)", p.addr, disp("proc/driver/nvidia/gpus"))
			}
			if r := e.openRel("dev/nvidiactl"); r != "" {
				return reason(CheckDeviceNode, "%s", r)
			}
			if parseErr != nil {
				return reason(CheckDeviceNode, "cannot tell the device minor: %s: %v", disp(infoRel), parseErr)
			}
			if !info.hasMinor {
				return reason(CheckDeviceNode, "cannot tell the device minor: no \"Device Minor\" in %s", disp(infoRel))
			}
			if r := e.openRel(fmt.Sprintf("dev/nvidia%d", info.minor)); r != "" {
				return reason(CheckDeviceNode, "%s", r)
			}
			if cc == 0 {
				return reason(CheckCapable, "unknown device id 0x%04x: compute capability unknown", p.device)
			}
			if cc < minServingCapability {
				return reason(CheckCapable, "compute capability %s is below 8.0 (sglang's MLA backends need sm80+)", d.ComputeCapability)
			}
			return ""
		}()
		d.Usable = d.Reason == ""
		out = append(out, d)
	}
	return out
}
