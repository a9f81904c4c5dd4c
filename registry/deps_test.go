package registry_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
)

// TestDispatchPathLinksNoKernelStack: the dispatch path (registry, core,
// wire) imports none of the kernel stack, so it builds on every platform;
// a host that runs kernels in process hands the registry its runner.
func TestDispatchPathLinksNoKernelStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/attnplug/attnplug/registry", "github.com/attnplug/attnplug/core", "github.com/attnplug/attnplug/wire").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/cuda", "/shm", "/kernels", "/backendkit", "/devkernels", "/launch/cudaexec"} {
			if strings.HasSuffix(dep, "github.com/attnplug/attnplug"+banned) {
				t.Errorf("the dispatch path imports %s", dep)
			}
		}
	}
}

// TestNoInProcessKernels: a registry given no in-process kernel runner
// answers a triton kernel call with ErrNoKernel, saying why.
func TestNoInProcessKernels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	_, err = reg.RunKernel(ctx, &core.KernelRequest{Backend: core.TritonName, Method: core.MLA})
	if !errors.Is(err, core.ErrNoKernel) || !strings.Contains(err.Error(), "Config.Kernels") {
		t.Fatalf("got %v, want ErrNoKernel naming Config.Kernels", err)
	}
}
