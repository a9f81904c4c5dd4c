package detect

import (
	"context"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestFilePlatform: the platform from files alone is the report's, but an
// NVIDIA GPU that passed every check but the device-ID table (libcuda not
// asked) still makes it cuda; a GPU that failed another check does not.
func TestFilePlatform(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  core.Platform
	}{
		{"healthy nvidia", nvidiaTree("0x2335", nil), core.PlatformCUDA},
		{"unknown nvidia device id", nvidiaTree("0x2bff", nil), core.PlatformCUDA},
		{"unknown device id, no device node", nvidiaTree("0x2bff", func(m map[string]string) { delete(m, "dev/nvidia0") }), core.PlatformCPU},
		{"healthy amd", amdTree("90402", nil), core.PlatformHIP},
		{"no accelerator", map[string]string{"proc/cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse avx2\n"}, core.PlatformCPU},
	} {
		if got := FilePlatform(context.Background(), tree(t, tc.files)); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := FilePlatform(context.Background(), "/no/such/root"); got != core.PlatformCPU {
		t.Errorf("missing root: got %v, want cpu", got)
	}
}
