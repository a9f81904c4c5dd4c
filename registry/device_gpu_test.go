package registry_test

import (
	"errors"
	"os"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch/cudaexec"
	"github.com/attnplug/attnplug/registry"
)

// TestDeviceCodeFromThePluginLoads takes the real fa3 and flashinfer
// plugins' device code for this machine's GPU through the registry: the
// images that crossed the process boundary are the ones devkernels builds
// in process, byte for byte; the host's executor loads them, and prepares
// the registry's plan. It needs a CUDA GPU and NVRTC, and skips saying why
// without them (ATTNPLUG_REQUIRE_GPU=1 makes that a failure).
func TestDeviceCodeFromThePluginLoads(t *testing.T) {
	dev, err := cuda.Open()
	if err != nil {
		skipNoGPU(t, err)
	}
	defer dev.Close()
	ex := cudaexec.NewExecutor(dev)
	defer ex.Close()
	info := ex.Device()
	var b devkernels.Builder
	want, err := b.Modules(info)
	if errors.Is(err, core.ErrNoPlan) {
		skipNoGPU(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	for _, name := range []string{"fa3", "flashmla"} {
		mods, err := r.KernelModules(ctx, name, info)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(mods) != len(want) {
			t.Fatalf("%s: %d modules, devkernels builds %d", name, len(mods), len(want))
		}
		for i := range mods {
			if mods[i].SHA256 != want[i].SHA256 || string(mods[i].Image) != string(want[i].Image) {
				t.Errorf("%s: module %s: sha256 %s, devkernels builds %s", name, mods[i].Name, mods[i].SHA256, want[i].SHA256)
			}
		}
		if err := ex.Load(mods); err != nil {
			t.Fatalf("%s: load: %v", name, err)
		}
		req := planReq(name, 0)
		req.Device = info
		plan, err := r.PlanKernel(ctx, req)
		if err != nil {
			t.Fatalf("%s: plan: %v", name, err)
		}
		p, err := ex.Prepare(req, plan)
		if err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		p.Close()
	}
}

func skipNoGPU(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("ATTNPLUG_REQUIRE_GPU") == "1" {
		t.Fatalf("ATTNPLUG_REQUIRE_GPU=1 and no CUDA device with NVRTC to run on: %v", err)
	}
	t.Skipf("no CUDA device with NVRTC to run on: %v", err)
}
