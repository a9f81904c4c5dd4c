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

// TestPluginsEmbedOnlyTheirDeviceCode: a plugin binary embeds the device
// images it hands and no other: the CUDA plugins package devkernels' (and
// not the verification layer's fills), the ROCm, NPU and XPU plugins none
// (nor the CUDA driver and NVRTC).
func TestPluginsEmbedOnlyTheirDeviceCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/attnplug/attnplug/"
	for plugin, wantKernels := range map[string]bool{"fa3": true, "flashinfer": true, "dsa": true, "aiter": false, "ascend": false, "intel_xpu": false} {
		out, err := exec.Command("go", "list", "-deps", mod+"plugins/"+plugin).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := " " + strings.Join(strings.Fields(string(out)), " ") + " "
		if got := strings.Contains(deps, " "+mod+"devkernels "); got != wantKernels {
			t.Errorf("plugin %s links devkernels' images: %v, want %v", plugin, got, wantKernels)
		}
		banned := []string{"devkernels/fill", "devicecheck"}
		if !wantKernels {
			banned = append(banned, "cuda") // NVRTC, for device code it has none of
		}
		for _, banned := range banned {
			if strings.Contains(deps, " "+mod+banned+" ") {
				t.Errorf("plugin %s links %s", plugin, banned)
			}
		}
	}
}
