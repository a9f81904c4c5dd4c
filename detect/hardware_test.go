package detect

import (
	"reflect"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestHostInfo(t *testing.T) {
	tests := []struct {
		fixture string
		want    core.HostInfo
	}{
		{"h100", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 90, Archs: []string{"sm90"}, AMX: true}},
		{"b200", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 100, Archs: []string{"sm100"}, AMX: true}},
		{"nvidia_plus_igpu", core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 89, Archs: []string{"sm89"}}},
		{"mi300x", core.HostInfo{Platform: core.PlatformHIP, Archs: []string{"gfx942"}}},
		{"ascend910b", core.HostInfo{Platform: core.PlatformNPU, Archs: []string{"ascend910b"}}},
		{"intel_max1550", core.HostInfo{Platform: core.PlatformXPU, Archs: []string{"xe-hpc"}, AMX: true}},
		{"vfio", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}, AMX: true}},
		{"cpu_noamx", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}}},
		{"arm64", core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"arm64"}}},
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
