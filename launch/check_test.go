package launch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
)

var h200 = core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
	MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}

func goodPlan(t *testing.T) (*core.Plan, *core.PlanRequest) {
	t.Helper()
	req := &core.PlanRequest{
		Backend: "fa3", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 128, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{5000, 70, 9000}, QLens: []int64{2, 2, 2}, PageSize: 64, NumPages: 300},
		Device: h200,
	}
	k := core.Kernel{Name: "flash_attn_with_kvcache", Method: core.MLA, PageSizes: []int{64}}
	p, err := devkernels.Plan(k, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := launch.Check(p, req, devkernels.Spec(), h200); err != nil {
		t.Fatalf("the planner's own plan: %v", err)
	}
	return p, req
}

// TestCheckRefusesLyingPlans: every way a plan can lie about what it
// launches is refused, naming the problem.
func TestCheckRefusesLyingPlans(t *testing.T) {
	setArg := func(p *core.Plan, param string, f func(a *core.Arg)) {
		for i := range p.Launches[0].Args {
			if p.Launches[0].Args[i].Param == param {
				f(&p.Launches[0].Args[i])
			}
		}
	}
	cases := []struct {
		name, want string
		lie        func(p *core.Plan, r *core.PlanRequest)
	}{
		{"unknown entry", "no entry", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].Entry = "mla_decode_m128" }},
		{"unknown module", "unknown module", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].Module = "other" }},
		{"grid beyond limits", "grid dimension 1", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].Grid[1] = 70000 }},
		{"zero grid", "zero dimension", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].Grid[0] = 0 }},
		{"block too big", "threads", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].Block = [3]uint32{1024, 2, 1} }},
		{"shared memory", "shared memory", func(p *core.Plan, r *core.PlanRequest) { p.Launches[0].SharedBytes = 300000 }},
		{"unbound tensor parameter", "is not bound", func(p *core.Plan, r *core.PlanRequest) {
			p.Launches[0].Args = p.Launches[0].Args[1:]
		}},
		{"bound twice", "bound twice", func(p *core.Plan, r *core.PlanRequest) {
			p.Launches[0].Args = append(p.Launches[0].Args, p.Launches[0].Args[0])
		}},
		{"unknown parameter", "no parameter", func(p *core.Plan, r *core.PlanRequest) {
			p.Launches[0].Args = append(p.Launches[0].Args, core.Arg{Param: "evil", Kind: core.ArgInt})
		}},
		{"undeclared tensor", "does not declare", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "q", func(a *core.Arg) { a.Name = "weights" })
		}},
		{"pointer as integer", "bound to an integer", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "q", func(a *core.Arg) { *a = core.Arg{Param: "q", Kind: core.ArgInt, Int: 0xdead} })
		}},
		{"integer overflow", "does not fit an i32", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "heads", func(a *core.Arg) { a.Int = 1 << 40 })
		}},
		{"nan float", "finite", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "scale_log2", func(a *core.Arg) { a.Float = 1e300 })
		}},
		{"metadata offset", "outside metadata", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "schedule", func(a *core.Arg) { a.Offset = 1 << 30 })
		}},
		{"workspace offset", "outside the workspace", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "part_lse", func(a *core.Arg) { a.Offset = p.WorkspaceBytes + 4 })
		}},
		{"wrong output shape", "tensor \"out\"", func(p *core.Plan, r *core.PlanRequest) {
			for i := range p.Tensors {
				if p.Tensors[i].Name == "out" {
					p.Tensors[i].Shape = []int64{6, 128, 576}
				}
			}
		}},
		{"missing tensor", "is not declared", func(p *core.Plan, r *core.PlanRequest) { p.Tensors = p.Tensors[1:] }},
		{"schedule past a request", "keys [", func(p *core.Plan, r *core.PlanRequest) {
			p.Schedule[0].KVEnd = 100000
			p.Metadata[0].Int32s[2] = 100000
		}},
		{"schedule of an unknown request", "request 7", func(p *core.Plan, r *core.PlanRequest) {
			p.Schedule[0].Request = 7
			p.Metadata[0].Int32s[0] = 7
		}},
		{"schedule metadata differs", "differs", func(p *core.Plan, r *core.PlanRequest) { p.Metadata[0].Int32s[1] = 64 }},
		{"huge workspace", "workspace", func(p *core.Plan, r *core.PlanRequest) { p.WorkspaceBytes = 1 << 40 }},
		{"no launches", "no launches", func(p *core.Plan, r *core.PlanRequest) { p.Launches = nil }},
		{"more launches than a plan may have", "launches, more than the bound", func(p *core.Plan, r *core.PlanRequest) {
			for len(p.Launches) <= core.MaxPlanLaunches {
				p.Launches = append(p.Launches, p.Launches[0])
			}
		}},
		{"more metadata than a plan may have", "metadata of", func(p *core.Plan, r *core.PlanRequest) {
			p.Metadata = append(p.Metadata, core.MetaBuffer{Name: "padding", Int32s: make([]int32, core.MaxPlanMetadataBytes/4)})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, req := goodPlan(t)
			c.lie(p, req)
			err := launch.Check(p, req, devkernels.Spec(), h200)
			var pe *launch.PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *PlanError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %q, want it to name %q", err, c.want)
			}
		})
	}
}

// TestCheckRequestBounds: a request whose plan would be past core's bounds,
// or whose device is past the limits a planner sizes its schedule by, is
// refused before any planning, naming the field.
func TestCheckRequestBounds(t *testing.T) {
	chunked := &core.PlanRequest{Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{1 << 20}, QLens: []int64{1}, ChunkCapacity: 1},
		Device: h200}
	_, decode := goodPlan(t)
	sms := *decode
	sms.Device.SMs = 1 << 30
	for _, tc := range []struct {
		name, field string
		req         *core.PlanRequest
	}{
		{"a million prefix chunks", "shape.chunk_capacity", chunked},
		{"a device of a billion multiprocessors", "device.sms", &sms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := launch.CheckRequest(tc.req)
			if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want ErrInvalidRequest naming %s", err, tc.field)
			}
		})
	}
}
