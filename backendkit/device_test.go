package backendkit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
	aiter "github.com/attnplug/attnplug/plugins/aiter/rules"
	ascend "github.com/attnplug/attnplug/plugins/ascend/rules"
	dsa "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3 "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinfer "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	intelxpu "github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/hashicorp/go-hclog"
)

func deviceContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func sm90() core.DeviceInfo {
	return core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H100 80GB HBM3", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
}

func planner(t *testing.T, newBackend func(hclog.Logger) (core.Backend, error)) core.KernelPlanner {
	t.Helper()
	b, err := newBackend(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	kp, ok := b.(core.KernelPlanner)
	if !ok {
		t.Fatalf("%T is not a core.KernelPlanner", b)
	}
	return kp
}

// TestDeviceCodeDeclared checks which in-tree plugins declare device code:
// those with a dense CUDA kernel that devkernels runs (fa3 and flashinfer:
// MLA decode and prefill; dsa: its dense prefill), and no other.
func TestDeviceCodeDeclared(t *testing.T) {
	ctx := deviceContext(t)
	for _, tc := range []struct {
		name string
		new  func(hclog.Logger) (core.Backend, error)
		want bool
	}{
		{"fa3", fa3.New, true},
		{"flashinfer", flashinfer.New, true},
		{"aiter", aiter.New, false},
		{"ascend", ascend.New, false},
		{"dsa", dsa.New, true},
		{"intel_xpu", intelxpu.New, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kp := planner(t, tc.new)
			d, err := kp.(core.Backend).Describe(ctx)
			if err != nil || d.DeviceCode != tc.want {
				t.Fatalf("Describe: DeviceCode %v, %v; want %v", d.DeviceCode, err, tc.want)
			}
			if tc.want {
				return
			}
			if _, err := kp.KernelModules(ctx, sm90()); !errors.Is(err, core.ErrNoPlan) {
				t.Errorf("KernelModules without device code: got %v, want ErrNoPlan", err)
			}
		})
	}
}

// TestKernelModulesShared checks that concurrent and later calls for one
// device share one build and its outcome. Without NVRTC the outcome is an
// error wrapping core.ErrNoPlan; with it, modules whose hashes hold.
func TestKernelModulesShared(t *testing.T) {
	ctx := deviceContext(t)
	kp := planner(t, fa3.New)
	type outcome struct {
		mods []core.KernelModule
		err  error
	}
	got := make([]outcome, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := kp.KernelModules(ctx, sm90())
			got[i] = outcome{m, err}
		}()
	}
	wg.Wait()
	again, againErr := kp.KernelModules(ctx, sm90())
	got = append(got, outcome{again, againErr})
	first := got[0]
	for i, o := range got {
		// The build's own outcome, the same value every time.
		if errors.Unwrap(o.err) != errors.Unwrap(first.err) || len(o.mods) != len(first.mods) || (len(o.mods) > 0 && &o.mods[0] != &first.mods[0]) {
			t.Fatalf("call %d: %v, %d modules; call 0: %v, %d modules: not one shared build", i, o.err, len(o.mods), first.err, len(first.mods))
		}
	}
	if first.err != nil {
		if !errors.Is(first.err, core.ErrNoPlan) {
			t.Fatalf("KernelModules: %v, want modules or an error wrapping ErrNoPlan", first.err)
		}
		t.Logf("no device code on this machine: %v", first.err)
		return
	}
	for _, m := range first.mods {
		if m.SHA256 != core.ImageSHA256(m.Image) || len(m.Entries) == 0 {
			t.Errorf("module %s: sha256 %s, image hashes to %s, %d entries", m.Name, m.SHA256, core.ImageSHA256(m.Image), len(m.Entries))
		}
	}
}

func decodeRequest(backend string) *core.PlanRequest {
	return &core.PlanRequest{
		Backend: backend, Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 128, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{4096, 1, 300}, QLens: []int64{1, 1, 2}, PageSize: 64, NumPages: 100},
		Device: sm90(),
	}
}

func TestPlanKernelErrors(t *testing.T) {
	ctx := deviceContext(t)
	kp := planner(t, fa3.New)
	for _, tc := range []struct {
		name string
		edit func(*core.PlanRequest)
		is   []error
	}{
		{"unknown_backend", func(r *core.PlanRequest) { r.Backend = "nope" }, []error{core.ErrUnknownBackend}},
		{"method_not_in_catalog", func(r *core.PlanRequest) { r.Method = core.MHANPU }, []error{core.ErrNoPlan, core.ErrNoKernel}},
		{"cpu_kernel", func(r *core.PlanRequest) { r.Method = core.MLAFusedRoPECPU }, []error{core.ErrNoPlan}},
		{"hip_kernel", func(r *core.PlanRequest) { r.Method = core.MLAFusedRoPEROCm }, []error{core.ErrNoPlan}},
		{"fp8_not_covered", func(r *core.PlanRequest) { r.DType = "fp8_e4m3" }, []error{core.ErrNoPlan}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decodeRequest("fa3")
			tc.edit(req)
			_, err := kp.PlanKernel(ctx, req)
			for _, is := range tc.is {
				if !errors.Is(err, is) {
					t.Errorf("PlanKernel: got %v, want %v", err, is)
				}
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := kp.PlanKernel(cctx, decodeRequest("fa3")); !errors.Is(err, context.Canceled) {
		t.Errorf("PlanKernel with an ended context: got %v, want context.Canceled", err)
	}
}

// prefillRequest is a ragged prefill for backend: a fresh request and one
// with a prefix of 800 keys.
func prefillRequest(backend string, m core.Method) *core.PlanRequest {
	return &core.PlanRequest{
		Backend: backend, Method: m, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{300, 1000}, QLens: []int64{300, 200}, ChunkCapacity: 512},
		Device: sm90(),
	}
}

// TestPlanKernelChecks plans the kernels of every device-code name: a
// plan must pass the host's check against the modules for the same
// device (their names and entries, devkernels.Spec, where NVRTC is
// missing), or be refused with ErrNoPlan.
func TestPlanKernelChecks(t *testing.T) {
	ctx := deviceContext(t)
	for _, tc := range []struct {
		new   func(hclog.Logger) (core.Backend, error)
		names []string
	}{
		{fa3.New, []string{"fa3"}},
		{flashinfer.New, []string{"flashinfer", "flashmla"}},
		{dsa.New, []string{"dsa"}},
	} {
		kp := planner(t, tc.new)
		mods, modErr := kp.KernelModules(ctx, sm90())
		for _, name := range tc.names {
			for _, req := range []*core.PlanRequest{
				decodeRequest(name), prefillRequest(name, core.MHA), prefillRequest(name, core.MHAOneShot), prefillRequest(name, core.MHAChunkedKV),
			} {
				planChecked(t, kp, req, mods, modErr)
			}
		}
	}
}

// planChecked asks kp for req's plan and checks it as a host would.
func planChecked(t *testing.T, kp core.KernelPlanner, req *core.PlanRequest, mods []core.KernelModule, modErr error) {
	t.Run(req.Backend+"/"+req.Method.String(), func(t *testing.T) {
		ctx := deviceContext(t)
		p, err := kp.PlanKernel(ctx, req)
		if err != nil {
			if !errors.Is(err, core.ErrNoPlan) {
				t.Fatalf("PlanKernel: %v, want a plan or ErrNoPlan", err)
			}
			t.Logf("no device plan here: %v", err)
			return
		}
		if modErr != nil {
			t.Logf("no modules here (%v): checked against their spec", modErr)
			mods = devkernels.Spec()
		}
		if err := launch.Check(p, req, mods, req.Device); err != nil {
			t.Errorf("the plan fails the host's check: %v", err)
		}
	})
}
