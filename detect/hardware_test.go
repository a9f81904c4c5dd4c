package detect

import (
	"context"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestHostInfo(t *testing.T) {
	tests := []struct {
		fixture string
		want    core.HostInfo
	}{
		{"h100", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 90, Archs: []string{"sm90"}, AMX: true,
			Devices: []core.HostDevice{{VendorID: 0x10de, DeviceID: 0x2330, Driver: "nvidia", PCIAddress: "0000:18:00.0"}, {VendorID: 0x10de, DeviceID: 0x2330, Driver: "nvidia", PCIAddress: "0000:2a:00.0"}}}},
		{"b200", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 100, Archs: []string{"sm100"}, AMX: true,
			Devices: []core.HostDevice{{VendorID: 0x10de, DeviceID: 0x2901, Driver: "nvidia", PCIAddress: "0000:1b:00.0"}, {VendorID: 0x10de, DeviceID: 0x2901, Driver: "nvidia", PCIAddress: "0000:43:00.0"}}}},
		{"nvidia_plus_igpu", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 89, Archs: []string{"sm89"},
			Devices: []core.HostDevice{{VendorID: 0x10de, DeviceID: 0x2684, Driver: "nvidia", PCIAddress: "0000:01:00.0"}}}},
		{"mi300x", core.HostInfo{Platform: core.PlatformHIP, Archs: []string{"gfx942"},
			Devices: []core.HostDevice{{VendorID: 0x1002, DeviceID: 0x74a1, Driver: "amdgpu", PCIAddress: "0000:05:00.0"}, {VendorID: 0x1002, DeviceID: 0x74a1, Driver: "amdgpu", PCIAddress: "0000:26:00.0"}}}},
		{"ascend910b", core.HostInfo{Platform: core.PlatformNPU, Archs: []string{"ascend910b"},
			Devices: []core.HostDevice{{VendorID: 0x19e5, DeviceID: 0xd802, Driver: "devdrv_device_driver", PCIAddress: "0000:81:00.0"}, {VendorID: 0x19e5, DeviceID: 0xd802, Driver: "devdrv_device_driver", PCIAddress: "0000:c1:00.0"}}}},
		{"intel_max1550", core.HostInfo{Platform: core.PlatformXPU, Archs: []string{"xe-hpc"}, AMX: true,
			Devices: []core.HostDevice{{VendorID: 0x8086, DeviceID: 0x0bd5, Driver: "i915", PCIAddress: "0000:29:00.0"}}}},
		{"vfio", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}, AMX: true}},
		{"cpu_noamx", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}}},
		{"arm64", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"arm64"}}},
		// An unlisted accelerator leaves the platform cpu, and is among the
		// devices by its IDs and driver; the one bound to vfio-pci is not.
		{"acme", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"},
			Devices: []core.HostDevice{{VendorID: 0xacce, DeviceID: 0x0001, Driver: "acme", PCIAddress: "0000:41:00.0"}}}},
		{"acme_no_node", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got := detectFixture(t, tt.fixture, Options{}).HostInfo()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	mixed := &Report{Platform: PlatformCUDA, Devices: []Device{
		{Vendor: VendorNVIDIA, Arch: "sm100", ComputeCapability: "10.0", Usable: true},
		{Vendor: VendorNVIDIA, Arch: "sm90", ComputeCapability: "9.0", Usable: true},
		{Vendor: VendorNVIDIA, Arch: "sm80", ComputeCapability: "8.0", Usable: false},
	}}
	if got := mixed.HostInfo(); got.ComputeCapability != 90 || !reflect.DeepEqual(got.Archs, []string{"sm100", "sm90"}) {
		t.Errorf("mixed: got %+v, want the lowest usable capability 90 and archs sm100, sm90", got)
	}
}

func TestRequirementHardware(t *testing.T) {
	cuda, hip := core.PlatformCUDA, core.PlatformHIP
	tests := []struct {
		backend string
		want    []core.Hardware
	}{
		{"triton", nil},
		{"fa3", []core.Hardware{{Platforms: []core.Platform{cuda}, MinCapability: 90, MaxCapability: 99}}},
		{"flashinfer", []core.Hardware{{Platforms: []core.Platform{cuda}, MinCapability: 80}}},
		{"dsa", []core.Hardware{{Platforms: []core.Platform{cuda}, MinCapability: 90}, {Platforms: []core.Platform{hip}}}},
		{"nsa", []core.Hardware{{Platforms: []core.Platform{cuda}, MinCapability: 90}, {Platforms: []core.Platform{hip}}}},
		{"aiter", []core.Hardware{{Platforms: []core.Platform{hip}, Archs: []string{"gfx90a", "gfx942", "gfx950"}}}},
		{"intel_amx", []core.Hardware{{Platforms: []core.Platform{core.PlatformCPU}, Archs: []string{"amd64"}, NeedsAMX: true}}},
	}
	for _, tt := range tests {
		got, ok := HardwareFor(tt.backend)
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("HardwareFor(%s): got %+v, %v; want %+v", tt.backend, got, ok, tt.want)
		}
	}
	if _, ok := HardwareFor("no_such"); ok {
		t.Errorf("HardwareFor(no_such): ok")
	}
	// A capability bound on any platform binds CUDA only.
	got := Requirement{MinCapability: 80}.Hardware()
	if len(got) != 2 || got[0].MinCapability != 80 || got[1].MinCapability != 0 || len(got[1].Platforms) != 4 {
		t.Errorf("any platform with a minimum: got %+v", got)
	}
}

// TestHardwareAgreesWithSatisfied holds core.SupportsAny on HostInfo to
// Requirement.Satisfied on the report, for every backend on every fixture.
func TestHardwareAgreesWithSatisfied(t *testing.T) {
	for _, name := range fixtureNames() {
		r := detectFixture(t, name, Options{})
		info := r.HostInfo()
		for _, b := range Backends() {
			q, _ := RequirementFor(b)
			want, why := q.Satisfied(*r)
			got, coreWhy := core.SupportsAny(q.Hardware(), info)
			if got != want {
				t.Errorf("%s on %s: core says %v (%s), detect says %v (%s)", b, name, got, coreWhy, want, why)
			}
		}
	}
}

// TestUnlistedDevices checks the generic listing of accelerators of no
// listed platform: IDs, driver, device nodes present and permitted.
func TestUnlistedDevices(t *testing.T) {
	r := detectFixture(t, "acme", Options{})
	if len(r.Devices) != 2 {
		t.Fatalf("devices: got %+v, want the two acme devices (not the BMC VGA)", r.Devices)
	}
	d := r.Devices[0]
	want := Device{
		Vendor: VendorUnlisted, Model: "PCI processing accelerator acce:0001", PCIAddress: "0000:41:00.0", PCIID: "acce:0001",
		Usable: true, VendorID: "acce", DeviceID: "0001", Driver: "acme",
		DeviceNodes: []DeviceNode{{Path: "/dev/accel/accel0", Present: true, Permitted: true}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("acme device:\ngot  %+v\nwant %+v", d, want)
	}
	if v := r.Devices[1]; v.Usable || v.Reason != "driver: bound to vfio-pci (passed through to a VM), not usable here" || v.Driver != "vfio-pci" {
		t.Errorf("vfio device: %+v", v)
	}
	if r.Platform != PlatformCPU {
		t.Errorf("platform: got %s, want cpu", r.Platform)
	}

	r = detectFixture(t, "acme_no_node", Options{})
	if len(r.Devices) != 2 {
		t.Fatalf("devices: %+v", r.Devices)
	}
	if d := r.Devices[0]; d.Usable || d.Reason != "device node: /dev/accel/accel0 missing" ||
		!reflect.DeepEqual(d.DeviceNodes, []DeviceNode{{Path: "/dev/accel/accel0"}}) {
		t.Errorf("acme without its node: %+v", d)
	}
	if d := r.Devices[1]; d.Usable || d.Model != "PCI co-processor 1e52:0100" || d.Reason != "driver: no kernel driver bound to 0000:61:00.0" {
		t.Errorf("co-processor without a driver: %+v", d)
	}

	// A node that exists but does not open for this user.
	root := copyFixture(t, "acme")
	e := testEnv(root)
	e.open = func(string) error { return fs.ErrPermission }
	r, err := detect(context.Background(), Options{}, e)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Devices[0]; d.Usable || d.Reason != "device node: /dev/accel/accel0: permission denied" ||
		!reflect.DeepEqual(d.DeviceNodes, []DeviceNode{{Path: "/dev/accel/accel0", Present: true}}) {
		t.Errorf("acme with a node not permitted: %+v", d)
	}
	if f := Doctor(r); len(f) == 0 || !strings.Contains(strings.Join(f[0].Advice, " "), "access to the device node") {
		t.Errorf("doctor: %+v", f)
	}
}

func TestNamePlatforms(t *testing.T) {
	r := detectFixture(t, "acme", Options{})
	r.NamePlatforms([]core.Hardware{
		{Platforms: []core.Platform{core.PlatformCUDA}},
		{PlatformName: "acme", Devices: []core.PCIDevice{{VendorID: 0xacce, DeviceIDs: []uint16{1}}}},
		{PlatformName: "other", Devices: []core.PCIDevice{{VendorID: 0xacce}}},
	})
	if r.Devices[0].PluginPlatform != "acme" || r.Devices[1].PluginPlatform != "acme" {
		t.Errorf("plugin platforms: %q, %q, want acme (the first entry that declares them)", r.Devices[0].PluginPlatform, r.Devices[1].PluginPlatform)
	}
	var sb strings.Builder
	if err := WriteTable(&sb, r); err != nil || !strings.Contains(sb.String(), "unlisted (acme)") {
		t.Errorf("table: %v\n%s", err, sb.String())
	}
	info := r.HostInfo()
	hw := core.Hardware{PlatformName: "acme", Devices: []core.PCIDevice{{VendorID: 0xacce, Drivers: []string{"acme"}}}}
	if ok, why := hw.Supports(info); !ok {
		t.Errorf("acme hardware on the acme host: %s", why)
	}
	r = detectFixture(t, "acme_no_node", Options{})
	if ok, why := hw.Supports(r.HostInfo()); ok || why != "needs a usable PCI device acce:* (driver acme) (acme), host has none" {
		t.Errorf("acme hardware without a usable device: %v, %q", ok, why)
	}
}
