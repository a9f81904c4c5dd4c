package devkernels

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestImagesAreCurrent fails while the images built ahead of time were
// built from other sources or flags than these: rebuild them with make
// device-code (where nvcc is) and commit devkernels/images.
func TestImagesAreCurrent(t *testing.T) {
	if why := Stale(); why != "" {
		t.Fatal(why)
	}
}

// TestImagesForEachArchitecture: the cubin of the device's major
// architecture, else the newest PTX it runs, with the manifest's hash and
// every entry the plans name; no compiler involved.
func TestImagesForEachArchitecture(t *testing.T) {
	t.Setenv(EnvDeviceCode, "")
	for _, tc := range []struct {
		cc     int
		format core.ModuleFormat
		arch   string
	}{
		{80, core.FormatCUBIN, "sm_80"}, {86, core.FormatCUBIN, "sm_80"}, {89, core.FormatCUBIN, "sm_80"},
		{90, core.FormatCUBIN, "sm_90"}, {100, core.FormatPTX, "compute_90"}, {120, core.FormatPTX, "compute_90"},
	} {
		var b Builder
		b.Log = func(msg string) { t.Errorf("compute %d: NVRTC was asked: %s", tc.cc, msg) }
		mods, err := b.Modules(core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: tc.cc})
		if err != nil {
			t.Fatalf("compute %d: %v", tc.cc, err)
		}
		want := specFor(tc.cc) // the Hopper modules serve compute capability 9.0 alone
		if tc.cc != 90 && len(want) != len(Spec())-2 {
			t.Fatalf("compute %d: %d modules of %d, want all but the two Hopper ones", tc.cc, len(want), len(Spec()))
		}
		if len(mods) != len(want) {
			t.Fatalf("compute %d: %d modules, want %d", tc.cc, len(mods), len(want))
		}
		for i, m := range mods {
			format, arch := tc.format, tc.arch
			if hopperOnly(m.Name) {
				format, arch = core.FormatCUBIN, "sm_90a"
			}
			if m.Format != format || m.Arch != arch || m.SHA256 != core.ImageSHA256(m.Image) || m.Name != want[i].Name {
				t.Errorf("compute %d: module %s is %s for %s (sha %s), want %s %s for %s", tc.cc, m.Name, m.Format, m.Arch, m.SHA256[:8], want[i].Name, format, arch)
			}
			for _, e := range m.Entries {
				if !strings.Contains(string(m.Image), e.Name) {
					t.Errorf("compute %d: %s's image has no %s", tc.cc, m.Name, e.Name)
				}
			}
		}
	}
	if _, err := (&Builder{}).Modules(core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: 75}); err == nil {
		t.Error("compute 7.5 got modules")
	}
	t.Setenv(EnvDeviceCode, "nvrtc")
	if _, why := Kernels.aheadOfTime(90); why == "" {
		t.Errorf("$%s=nvrtc still hands the images", EnvDeviceCode)
	}
}
