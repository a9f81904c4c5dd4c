package gpucheck

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// builtBackend is package devkernels as a backend linked into the host: its
// modules built for the device it is asked about (the images, or NVRTC),
// its plans devkernels.Plan's, each request counted.
type builtBackend struct {
	kernel      core.Kernel
	build       devkernels.Builder
	mods, plans atomic.Int64
}

func (b *builtBackend) Describe(ctx context.Context) (*core.Description, error) {
	return (&loopBackend{kernel: b.kernel}).Describe(ctx)
}

func (b *builtBackend) Dispatch(context.Context, *core.Request) (core.Method, error) {
	return core.MLA, nil
}

func (b *builtBackend) KernelModules(_ context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	b.mods.Add(1)
	return b.build.Modules(dev)
}

func (b *builtBackend) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	b.plans.Add(1)
	return devkernels.Plan(b.kernel, req)
}

// TestInProcessBackendOnDevice: a backend linked into the host (no plugin
// process) hands its modules and plans through the registry, and the host
// object (devicehost.Host, as `attnplug run --device cuda` holds it) loads
// them once, plans through the registry, launches and is checked against
// the fp64 reference with its outputs poisoned first: 16 and 128 heads
// (on an H200 the 128-head plan runs the wgmma module), pages of 1 and 64,
// plans for one batch and plans that hold for a batch size.
func TestInProcessBackendOnDevice(t *testing.T) {
	ctx := t.Context()
	be := &builtBackend{kernel: Case{}.CatalogKernel()}
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{}, Backends: []core.Backend{be}, Logger: hclog.NewNullLogger(), ExpectedNames: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	e, err := devicehost.OpenWith(reg)
	needGPU(t, err)
	defer e.Close()
	cases := []Case{
		{Heads: 16, PageSize: 64, SeqLens: []int64{3000, 17, 700}, QLens: []int64{1, 2, 1}, Seed: 1},
		{Heads: 128, PageSize: 64, SeqLens: []int64{5000, 64, 1}, QLens: []int64{1, 1, 1}, Seed: 2},
		{Heads: 128, PageSize: 1, SeqLens: []int64{900, 4097}, QLens: []int64{4, 2}, Seed: 3, Graph: true, MaxSeqLen: 8192},
		{Heads: 16, PageSize: 1, SeqLens: []int64{3, 2048}, QLens: []int64{3, 1}, Seed: 4, Graph: true, MaxSeqLen: 4096},
	}
	for _, c := range cases {
		b, err := e.Alloc(c, 1)
		if err != nil {
			t.Fatalf("%s: alloc: %v", c.Describe(), err)
		}
		p, err := e.Host.Plan(ctx, &b.Req)
		if err != nil {
			b.Free(e)
			t.Fatalf("%s: plan through the registry: %v", c.Describe(), err)
		}
		err = e.Dev.Do(func(x *cuda.Ctx) error {
			if err := b.Poison(x); err != nil {
				return err
			}
			return p.Launch(x, e.Stream(), b.Tensors(0))
		})
		if err == nil {
			var ch Check
			if ch, err = e.Verify(b, 0, 32); err == nil && !ch.OK() {
				t.Errorf("%s (%s): %v", c.Describe(), p.Plan().Note, ch)
			}
			t.Logf("%s (%s): %v", c.Describe(), p.Plan().Note, ch)
		}
		p.Close()
		b.Free(e)
		if err != nil {
			t.Fatalf("%s: %v", c.Describe(), err)
		}
	}
	if n := be.mods.Load(); n != 1 {
		t.Errorf("the backend was asked for its modules %d times, want once", n)
	}
	if n := be.plans.Load(); n != int64(len(cases)) {
		t.Errorf("the backend was asked for %d plans, want %d", n, len(cases))
	}
}
