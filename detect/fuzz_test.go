package detect

import (
	"os"
	"path/filepath"
	"testing"
)

// seedFiles adds fixture files matching a pattern to a fuzz corpus.
func seedFiles(f *testing.F, pattern string) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*", filepath.FromSlash(pattern)))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseCPUInfo(f *testing.F) {
	seedFiles(f, "proc/cpuinfo")
	f.Add([]byte(""))
	f.Add([]byte(":\n: :\nflags:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseCPUInfo(b)
		if err != nil {
			return
		}
		if a := c.arch(); a != "" && a != "amd64" && a != "arm64" {
			t.Errorf("arch %q", a)
		}
		if c.hasAMX() && len(c.amxFlags()) < 2 {
			t.Errorf("hasAMX with flags %v", c.amxFlags())
		}
	})
}

func FuzzParseKFDProperties(f *testing.F) {
	seedFiles(f, "sys/class/kfd/kfd/topology/nodes/*/properties")
	f.Add([]byte("gfx_target_version 18446744073709551615\n"))
	f.Add([]byte("a b c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		props, err := parseKFDProperties(b)
		if err != nil {
			return
		}
		if g := gfxName(props["gfx_target_version"]); props["gfx_target_version"] != 0 && len(g) < 6 {
			t.Errorf("gfx name %q for %d", g, props["gfx_target_version"])
		}
	})
}

func FuzzParseNVIDIAInformation(f *testing.F) {
	seedFiles(f, "proc/driver/nvidia/gpus/*/information")
	f.Add([]byte("Device Minor: -1\n"))
	f.Add([]byte("Device Minor: 99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseNVIDIAInformation(b)
		if err != nil {
			return
		}
		if info.hasMinor && (info.minor < 0 || info.minor > 255) {
			t.Errorf("minor %d accepted", info.minor)
		}
	})
}
