package launch_test

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// TestArchRuns: which images run on which compute capability, and the
// reason given for one that does not.
func TestArchRuns(t *testing.T) {
	cubin, ptx := core.FormatCUBIN, core.FormatPTX
	for _, tc := range []struct {
		arch   string
		format core.ModuleFormat
		cc     int
		why    string // "" when it runs
	}{
		{"sm_80", cubin, 80, ""}, {"sm_80", cubin, 86, ""}, {"sm_80", cubin, 89, ""},
		{"sm_80", cubin, 90, "runs on compute capability 8.0 to 8.9, not on compute capability 9.0"},
		{"sm_86", cubin, 80, "runs on compute capability 8.6 to 8.9, not on compute capability 8.0"},
		{"sm_90", cubin, 90, ""}, {"sm_90", cubin, 100, "not on compute capability 10.0"},
		{"sm_90a", cubin, 90, ""},
		{"sm_90a", cubin, 100, "is built for sm_90a, which runs on compute capability 9.0 alone, not on compute capability 10.0"},
		{"compute_90a", ptx, 90, ""}, {"compute_90a", ptx, 89, "runs on compute capability 9.0 alone"},
		{"compute_80", ptx, 80, ""}, {"compute_80", ptx, 120, ""},
		{"compute_90", ptx, 86, "is PTX for compute_90, which needs compute capability 9.0 or newer, not compute capability 8.6"},
		{"compute_100", ptx, 120, ""},
		// Left to the driver: another platform's, unreadable, or a format
		// that does not match the name.
		{"gfx942", cubin, 90, ""}, {"sm_9x", cubin, 80, ""}, {"", ptx, 80, ""}, {"sm_90", ptx, 80, ""},
	} {
		err := launch.ArchRuns(core.KernelModule{Name: "m", Arch: tc.arch, Format: tc.format}, tc.cc)
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s %s on %d: %v", tc.arch, tc.format, tc.cc, err)
		case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), `"m"`)):
			t.Errorf("%s %s on %d: %v, want %q", tc.arch, tc.format, tc.cc, err, tc.why)
		}
	}
}
