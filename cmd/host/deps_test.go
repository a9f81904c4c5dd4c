package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostLinksNoTestHarness: the attnplug command and kernelrun link no
// test harness: the binaries' builder and the GPU tests' harness.
func TestHostLinksNoTestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/attnplug/attnplug/cmd/host", "github.com/attnplug/attnplug/kernelrun").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/internal/testbin", "/internal/gpucheck", "/internal/testplugins/fault", "/internal/testplugins/liar", "/internal/ruletest"} {
			if strings.HasSuffix(dep, "github.com/attnplug/attnplug"+banned) {
				t.Errorf("the host links %s", dep)
			}
		}
	}
}
