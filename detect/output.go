package detect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints a report as aligned text for people.
func WriteTable(w io.Writer, r *Report) error {
	if r == nil {
		return fmt.Errorf("detect: write table: nil report")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	amx := "no"
	if r.CPU.AMX {
		amx = "yes"
	}
	cpu := strings.TrimSpace(strings.Join([]string{orUnknown(r.CPU.Arch), r.CPU.Vendor, r.CPU.Model}, "  "))
	fmt.Fprintf(tw, "platform:\t%s\n", r.Platform)
	fmt.Fprintf(tw, "default backend:\tmla=%s  dsa=%s\n", r.DefaultBackend.MLA, r.DefaultBackend.DSA)
	if sg := r.DefaultBackend.SGLangDefault; sg != nil {
		fmt.Fprintf(tw, "sglang's default:\tmla=%s  dsa=%s (%s)\n", sg.MLA, sg.DSA, sg.Reason)
	}
	fmt.Fprintf(tw, "cpu:\t%s\n", cpu)
	fmt.Fprintf(tw, "amx:\t%s", amx)
	if r.CPU.Reason != "" {
		fmt.Fprintf(tw, " (%s)", r.CPU.Reason)
	} else if r.CPU.AMXKernel != "" {
		fmt.Fprintf(tw, " (kernel: %s)", r.CPU.AMXKernel)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw)
	if len(r.Devices) == 0 {
		fmt.Fprintln(tw, "devices:\tnone")
	} else {
		fmt.Fprintln(tw, "VENDOR\tMODEL\tPCI ADDRESS\tPCI ID\tARCH\tCC\tUSABLE\tREASON")
		for _, d := range r.Devices {
			vendor := d.Vendor
			if d.PluginPlatform != "" {
				vendor += " (" + d.PluginPlatform + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", vendor, d.Model, d.PCIAddress, d.PCIID,
				dash(d.Arch), dash(d.ComputeCapability), yesNo(d.Usable), dash(d.Reason))
		}
	}
	if len(r.Plugins) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "PLUGIN\tNAMES\tSERVED\tREASON\tPATH")
		for _, p := range r.Plugins {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, dash(strings.Join(p.Names, ",")), yesNo(p.Served), dash(p.Reason), p.Path)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("detect: write table: %w", err)
	}
	return nil
}

// Finding levels.
const (
	LevelOK    = "ok"    // nothing to do
	LevelInfo  = "info"  // not usable, but by design
	LevelError = "error" // not usable, and something can be done
)

// Finding is one thing Doctor has to say.
type Finding struct {
	Level string `json:"level"` // LevelOK, LevelInfo or LevelError
	// Subject is the device ("NVIDIA H200 SXM 141GB at 0000:3b:00.0"),
	// "cpu" or "host".
	Subject string `json:"subject"`
	// Check is the failed check, "" for the host summary.
	Check string `json:"check,omitempty"`
	// Problem is the device's reason or the summary.
	Problem string `json:"problem"`
	// Advice lists what to do, most likely fix first.
	Advice []string `json:"advice,omitempty"`
}

// Doctor explains every unusable device and an unusable AMX, with what to
// do. On a healthy machine it returns one LevelOK finding saying so.
func Doctor(r *Report) []Finding {
	if r == nil {
		return []Finding{{Level: LevelError, Subject: "host", Problem: "no report"}}
	}
	var out []Finding
	for _, d := range r.Devices {
		if d.Usable {
			continue
		}
		f := Finding{
			Level:   LevelError,
			Subject: fmt.Sprintf("%s at %s", d.Model, d.PCIAddress),
			Check:   d.Check(),
			Problem: d.Reason,
		}
		f.Advice = advise(d)
		if d.Vendor == VendorIntel && f.Check == CheckCapable && strings.Contains(d.Reason, "integrated") {
			f.Level = LevelInfo
		}
		out = append(out, f)
	}
	if !r.CPU.AMX && len(r.CPU.AMXFlags) > 0 {
		level := LevelInfo
		if r.Platform == PlatformCPU {
			level = LevelError
		}
		out = append(out, Finding{
			Level:   level,
			Subject: "cpu",
			Check:   CheckCapable,
			Problem: "AMX not usable: " + r.CPU.Reason,
			Advice: []string{
				"AMX tile data needs Linux >= 5.16 (arch_prctl ARCH_REQ_XCOMP_PERM); upgrade the kernel",
				"in a VM, expose AMX to the guest (e.g. QEMU -cpu host or a Sapphire Rapids CPU model)",
			},
		})
	}
	errorsFound := false
	for _, f := range out {
		if f.Level == LevelError {
			errorsFound = true
		}
	}
	if !errorsFound {
		out = append(out, Finding{Level: LevelOK, Subject: "host", Problem: healthy(r)})
	}
	return out
}

// healthy summarizes a report with nothing to fix.
func healthy(r *Report) string {
	n := len(r.usableOn(r.Platform))
	if r.Platform == PlatformCPU {
		return fmt.Sprintf("healthy: no accelerator to fix; serving on cpu (%s), default mla=%s dsa=%s",
			orUnknown(r.CPU.Arch), r.DefaultBackend.MLA, r.DefaultBackend.DSA)
	}
	return fmt.Sprintf("healthy: %d usable device(s) on %s, default mla=%s dsa=%s",
		n, r.Platform, r.DefaultBackend.MLA, r.DefaultBackend.DSA)
}

// advise returns what to do about an unusable device.
func advise(d Device) []string {
	addr := d.PCIAddress
	why := d.Reason
	switch d.Check() {
	case CheckPresent:
		return []string{"check that /sys is mounted and readable; the device's sysfs entry could not be parsed"}
	case CheckDriver:
		switch {
		case strings.Contains(why, "vfio-pci"):
			return []string{
				fmt.Sprintf("the device is reserved for a VM; to use it here unbind it: echo %s > /sys/bus/pci/drivers/vfio-pci/unbind", addr),
				"then load the vendor driver: " + vendorDriverHint(d) + "; and drop the device from vfio-pci.ids= or its driver_override",
			}
		case strings.Contains(why, "not loaded"):
			return []string{
				"on the host: load the driver with modprobe nvidia (check dmesg | grep NVRM if it fails)",
				"in a container: start it with the NVIDIA runtime (docker run --gpus all, or --runtime nvidia with the NVIDIA Container Toolkit) so /proc/driver/nvidia and /dev/nvidia* are mounted",
			}
		case strings.Contains(why, "no kernel driver"):
			return []string{"load the driver: " + vendorDriverHint(d)}
		default:
			return []string{"bind the vendor driver instead: " + vendorDriverHint(d)}
		}
	case CheckAllocated:
		return []string{
			"this container was not given the GPU: request it (docker run --gpus all or --gpus '\"device=...\"', Kubernetes nvidia.com/gpu limits; NVIDIA_VISIBLE_DEVICES)",
			"ignore this if the GPU is meant for another container",
		}
	case CheckDeviceNode:
		perm := strings.Contains(why, "permission denied")
		switch d.Vendor {
		case VendorNVIDIA:
			if perm {
				return []string{"make /dev/nvidia* readable: the driver's NVreg_DeviceFileMode (default 0666) or add the user to the group owning them"}
			}
			return []string{
				"create the nodes: run nvidia-smi once as root, or nvidia-modprobe -u -c=0",
				"in a container: pass them (--device /dev/nvidiactl --device /dev/nvidia0 --device /dev/nvidia-uvm), which the NVIDIA runtime does for you",
			}
		case VendorAMD, VendorIntel:
			if perm {
				return []string{"join the render and video groups: sudo usermod -aG render,video $USER and log in again (in a container: --group-add render --group-add video)"}
			}
			if d.Vendor == VendorAMD {
				return []string{"add --device /dev/kfd --device /dev/dri to the container (docker/podman run); on the host, check that amdgpu is loaded (modprobe amdgpu)"}
			}
			return []string{"add --device /dev/dri to the container; on the host, check that i915 or xe created /dev/dri/renderD*"}
		case VendorUnlisted:
			if perm {
				return []string{"give this user access to the device node: the group that owns it (ls -l), or a udev rule of the vendor's driver"}
			}
			return []string{
				"check that the vendor's driver is loaded and made the node (dmesg, ls -l /dev)",
				"in a container: pass the node with --device",
			}
		case VendorHuawei:
			if perm {
				return []string{"add the user to the HwHiAiUser group, which owns the davinci nodes"}
			}
			return []string{
				"install the Ascend driver (Ascend HDK npu-driver package) if it is missing",
				"in a container: --device /dev/davinci0 (one per NPU) --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc and mount /usr/local/Ascend/driver",
			}
		}
	case CheckCapable:
		switch d.Vendor {
		case VendorNVIDIA:
			if strings.Contains(why, "unknown device id") {
				return []string{
					"the device ID is not in attnplug's table; on the real root libcuda supplies the capability, so install the NVIDIA driver's libcuda.so.1",
					"or update attnplug",
				}
			}
			return []string{"sglang's DeepSeek (MLA) backends need sm80 (Ampere) or newer; use a newer GPU or serve on CPU"}
		case VendorAMD:
			if strings.Contains(why, "unknown") {
				return []string{"check that the ROCm kernel driver exposes /sys/class/kfd/kfd/topology (amdgpu loaded with KFD)"}
			}
			return []string{"use an MI200 (gfx90a), MI300 (gfx942) or MI350 (gfx950) series GPU"}
		case VendorHuawei:
			return []string{"DeepSeek serving on Ascend needs an Atlas A2 (910B) or A3 (910C)"}
		case VendorIntel:
			return []string{"nothing to do: integrated GPUs are not used for serving"}
		}
	}
	return nil
}

// vendorDriverHint says how to load a device's vendor driver.
func vendorDriverHint(d Device) string {
	switch d.Vendor {
	case VendorNVIDIA:
		return "modprobe nvidia (install the NVIDIA driver if it is missing)"
	case VendorAMD:
		return "modprobe amdgpu (install ROCm's amdgpu-dkms if it is missing)"
	case VendorIntel:
		return "modprobe xe or modprobe i915"
	case VendorHuawei:
		return "install the Ascend driver (Ascend HDK npu-driver) and reboot"
	}
	return "load the vendor driver"
}

// WriteDoctor prints findings for people.
func WriteDoctor(w io.Writer, findings []Finding) error {
	var b strings.Builder
	if len(findings) == 0 {
		b.WriteString("no findings\n")
	}
	for _, f := range findings {
		fmt.Fprintf(&b, "[%s] %s: %s\n", f.Level, f.Subject, f.Problem)
		for _, a := range f.Advice {
			fmt.Fprintf(&b, "    - %s\n", a)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("detect: write doctor: %w", err)
	}
	return nil
}

// yesNo shows a bool.
func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// dash shows "" as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
