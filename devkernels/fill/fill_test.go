package fill

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
)

// TestImagesAreCurrent fails while the fills' images were built from other
// sources or flags than these: rebuild them with make device-code (where
// nvcc is) and commit devkernels/fill/images.
func TestImagesAreCurrent(t *testing.T) {
	if why := Set.Stale(); why != "" {
		t.Fatal(why)
	}
}

// TestImagesForEachArchitecture: every device from compute capability 8.0
// gets its fills from the images, no compiler involved, each image with
// its manifest's hash and the entry signatures spec declares (checked as
// the host checks a plugin's PTX); the FP8 fills come from 9.0.
func TestImagesForEachArchitecture(t *testing.T) {
	t.Setenv(devkernels.EnvDeviceCode, "")
	for _, tc := range []struct {
		cc      int
		modules []string
		arch    string
	}{
		{80, []string{Module}, "sm_80"}, {86, []string{Module}, "sm_80"}, {89, []string{Module}, "sm_80"},
		{90, []string{Module, ModuleFP8}, "sm_90"}, {100, []string{Module, ModuleFP8}, "compute_90"},
	} {
		b := devkernels.Builder{Set: Set, Log: func(msg string) { t.Errorf("compute %d: NVRTC was asked: %s", tc.cc, msg) }}
		mods, err := b.Modules(core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: tc.cc})
		if err != nil {
			t.Fatalf("compute %d: %v", tc.cc, err)
		}
		var names []string
		for _, m := range mods {
			names = append(names, m.Name)
			if m.Arch != tc.arch || m.SHA256 != core.ImageSHA256(m.Image) {
				t.Errorf("compute %d: %s for %s (sha %s), want %s", tc.cc, m.Name, m.Arch, m.SHA256, tc.arch)
			}
			if err := launch.CheckEntries(m); err != nil {
				t.Errorf("compute %d: %v", tc.cc, err)
			}
		}
		if strings.Join(names, ",") != strings.Join(tc.modules, ",") {
			t.Errorf("compute %d: modules %v, want %v", tc.cc, names, tc.modules)
		}
	}
}
