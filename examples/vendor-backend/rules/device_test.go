package rules

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// planner returns acme's backend as the host sees its device code.
func planner(t *testing.T) core.KernelPlanner {
	t.Helper()
	b, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !d.DeviceCode {
		t.Fatal("the description does not declare device code: the host would never ask for it")
	}
	p, ok := b.(core.KernelPlanner)
	if !ok {
		t.Fatalf("%T is not a core.KernelPlanner", b)
	}
	return p
}

// h200 is the device the plans are asked for: conform's example sm_90
// device.
func h200(t *testing.T) core.DeviceInfo {
	t.Helper()
	dev, err := conformance.ExampleDevice("sm_90")
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// mlaRequest is a plan request of acme_mla's MLA for a batch of heads
// heads over pages of page tokens.
func mlaRequest(dev core.DeviceInfo, heads, page int, seq, q []int64) core.PlanRequest {
	s := core.PlanShape{SeqLens: seq, QLens: q, PageSize: page}
	for _, n := range seq {
		s.NumPages += int((n + int64(page) - 1) / int64(page))
	}
	s.NumPages += 8
	return core.PlanRequest{
		Backend: Name, Method: core.MLA, DType: "bf16", Device: dev, Shape: s,
		Dims: core.PlanDims{Heads: heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
	}
}

// checkPlan is the host's check of a plugin's plan (the registry's
// CheckPlan): launch.Check against the modules and the device, and the
// kernel the catalog names for the method.
func checkPlan(t *testing.T, p *core.Plan, req *core.PlanRequest, mods []core.KernelModule) {
	t.Helper()
	if err := launch.Check(p, req, mods, req.Device); err != nil {
		t.Fatalf("the host refuses the plan: %v", err)
	}
	if p.Kernel != DecodeKernel().Name {
		t.Fatalf("the plan runs kernel %q, the catalog %q", p.Kernel, DecodeKernel().Name)
	}
}

func TestEntriesMatchTheImages(t *testing.T) {
	b, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := b.(*Backend).KernelModules(t.Context(), core.DeviceInfo{Platform: core.PlatformCUDA, ComputeCapability: 90})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if err := launch.CheckEntries(m); err != nil {
			t.Error(err)
		}
	}
}

// TestPlansPassTheHostChecks plans decode, target verify and graph batches
// and checks each plan as the host does: one launch over (requests,
// heads) binding every tensor of the layout.
func TestPlansPassTheHostChecks(t *testing.T) {
	p := planner(t)
	dev := h200(t)
	mods, err := p.KernelModules(t.Context(), dev)
	if err != nil {
		t.Fatal(err)
	}
	graph := mlaRequest(dev, 16, 64, []int64{16384, 16384, 16384, 16384, 16384, 16384, 16384}, []int64{1, 1, 1, 1, 1, 1, 1})
	graph.Graph, graph.Shape.MaxSeqLen = true, 16384
	verifyGraph := mlaRequest(dev, 128, 1, []int64{8192, 8192}, []int64{3, 3})
	verifyGraph.Graph, verifyGraph.Shape.MaxSeqLen = true, 8192
	for _, tc := range []struct {
		name  string
		req   core.PlanRequest
		holds bool // the plan holds for the batch size
	}{
		{"decode, page 64", mlaRequest(dev, 16, 64, []int64{1, 100, 5000}, []int64{1, 1, 1}), false},
		{"decode, page 1, 128 heads", mlaRequest(dev, 128, 1, []int64{7, 4096}, []int64{1, 1}), false},
		{"target verify", mlaRequest(dev, 16, 64, []int64{4, 300, 2048, 9}, []int64{2, 3, 4, 1}), false},
		{"graph decode with a bound", graph, true},
		{"graph verify with a bound", verifyGraph, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := p.PlanKernel(t.Context(), &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, plan, &tc.req, mods)
			l := plan.Launches[0]
			if len(plan.Launches) != 1 || l.Grid != [3]uint32{uint32(len(tc.req.Shape.SeqLens)), uint32(tc.req.Dims.Heads), 1} || l.Block != [3]uint32{128, 1, 1} {
				t.Errorf("launches %+v: want one over (requests, heads) of 128 threads", plan.Launches)
			}
			var bound []string
			for _, a := range l.Args {
				if a.Kind == core.ArgTensor {
					bound = append(bound, a.Name)
				}
			}
			for _, want := range []string{"seq_lens", "qo_indptr", "kv_indptr", "kv_indices"} {
				if !slices.Contains(bound, want) {
					t.Errorf("the plan does not bind %s: its kernel cannot know each request's keys and queries", want)
				}
			}
			if got, want := plan.Reads, core.PlanReadsDeclared|core.PlanReadsQLens; tc.holds != (got == want) {
				t.Errorf("reads %s, holds for the batch size %v", got, tc.holds)
			}
			if !tc.holds {
				return
			}
			// Other lengths under the bound: the same plan.
			other := tc.req
			other.Shape.SeqLens = slices.Clone(other.Shape.SeqLens)
			for i := range other.Shape.SeqLens {
				other.Shape.SeqLens[i] = int64(4 + 37*i)
			}
			again, err := p.PlanKernel(t.Context(), &other)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, again, &other, mods)
			if !reflect.DeepEqual(again, plan) {
				t.Errorf("the plan changed with the lengths under the bound:\n%+v\n%+v", plan, again)
			}
		})
	}
}

// TestNoPlan: what acme_decode does not run is refused with core.ErrNoPlan,
// naming why; a name acme does not serve and a malformed request get
// their own errors.
func TestNoPlan(t *testing.T) {
	p := planner(t)
	dev := h200(t)
	base := func() core.PlanRequest { return mlaRequest(dev, 16, 64, []int64{100, 200}, []int64{1, 1}) }
	with := func(f func(*core.PlanRequest)) core.PlanRequest {
		r := base()
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name string
		req  core.PlanRequest
		want error
		why  string
	}{
		{"chunked-prefix MHA, the host's", with(func(r *core.PlanRequest) {
			r.Method, r.Dims.HeadDimQK, r.Dims.HeadDimV, r.Shape.ChunkCapacity = core.MHAChunkedKV, 192, 128, 8192
		}), core.ErrNoPlan, "no kernel for MHA_CHUNKED_KV"},
		{"an FP8 cache", with(func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }), core.ErrNoPlan, `a KV cache of "fp8_e4m3"`},
		{"fp16 queries", with(func(r *core.PlanRequest) { r.DType = "fp16" }), core.ErrNoPlan, `queries and output in "fp16"`},
		{"sparse attention", with(func(r *core.PlanRequest) { r.Dims.TopK = 2048 }), core.ErrNoPlan, "sparse attention"},
		{"other head dims", with(func(r *core.PlanRequest) { r.Dims.HeadDimQK, r.Dims.HeadDimV = 320, 256 }), core.ErrNoPlan, "head dims 320/256"},
		{"a page size off the catalog", with(func(r *core.PlanRequest) { r.Shape.PageSize = 16; r.Shape.NumPages = 64 }), core.ErrNoPlan, "page size 16"},
		{"an sm_75 device", with(func(r *core.PlanRequest) { r.Device.ComputeCapability = 75 }), core.ErrNoPlan, "compute capability 75"},
		{"a HIP device", with(func(r *core.PlanRequest) { r.Device.Platform = core.PlatformHIP }), core.ErrNoPlan, "needs CUDA"},
		{"another name", with(func(r *core.PlanRequest) { r.Backend = "fa3" }), core.ErrUnknownBackend, `"fa3"`},
		{"no heads", with(func(r *core.PlanRequest) { r.Dims.Heads = 0 }), core.ErrInvalidRequest, "dims.heads 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := p.PlanKernel(t.Context(), &tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("got %+v, %v; want an error wrapping %v that says %q", plan, err, tc.want, tc.why)
			}
		})
	}
	for _, dev := range []core.DeviceInfo{{Platform: core.PlatformCUDA, ComputeCapability: 75}, {Platform: core.PlatformHIP}} {
		if mods, err := p.KernelModules(t.Context(), dev); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "compute capability 8.0 or newer") {
			t.Errorf("modules for %+v: %d modules, %v; want core.ErrNoPlan naming the compute capability", dev, len(mods), err)
		}
	}
}
