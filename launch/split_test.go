package launch_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
)

// TestQuerySplitLayout: a request with QuerySplit binds q_nope and q_rope,
// strided, in place of q; the planner's plans for it pass the check in
// every decode form, and read both parts' strides.
func TestQuerySplitLayout(t *testing.T) {
	dense, sparse, decode := madeForKernels()
	split := func(r *core.PlanRequest) { r.QuerySplit = true }
	ts, err := launch.Tensors(decode(split))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"q_nope": {3, 16, 512}, "q_rope": {3, 16, 64}}
	for _, s := range ts {
		if s.Name == "q" {
			t.Errorf("a split request's layout has q")
		}
		if w, ok := want[s.Name]; ok {
			if !slices.Equal(s.Shape, w) || !s.Strided || s.DType != "bf16" {
				t.Errorf("%s: %+v, want bf16 %v, strided", s.Name, s, w)
			}
			delete(want, s.Name)
		} else if s.Strided {
			t.Errorf("%s is strided", s.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("the layout lacks %v", want)
	}
	for _, tc := range []struct {
		name string
		k    core.Kernel
		edit func(*core.PlanRequest)
	}{
		{"bf16", dense, split},
		{"fp8", dense, func(r *core.PlanRequest) { split(r); r.KVDType = "fp8_e4m3" }},
		{"sparse", sparse, func(r *core.PlanRequest) { split(r); r.Dims.TopK = 2048 }},
		{"sparse fp8", sparse, func(r *core.PlanRequest) { split(r); r.Dims.TopK = 2048; r.KVDType = "fp8_e4m3" }},
	} {
		r := decode(tc.edit)
		p := plannersPlan(t, tc.k, r)
		if err := launch.Check(p, r, devkernels.Spec(), h200); err != nil {
			t.Errorf("%s: the planner's split plan: %v", tc.name, err)
		}
		strides := map[string]int{}
		for _, l := range p.Launches {
			for _, a := range l.Args {
				if a.Kind == core.ArgStride {
					strides[a.Name]++
				}
			}
		}
		if strides["q_nope"] == 0 || strides["q_rope"] == 0 {
			t.Errorf("%s: the plan reads the strides of %v, want q_nope's and q_rope's", tc.name, strides)
		}
		// The same plan for the request with whole queries is refused,
		// and the whole plan for the split request.
		whole := *r
		whole.QuerySplit = false
		if err := launch.Check(p, &whole, devkernels.Spec(), h200); err == nil || !strings.Contains(err.Error(), `"q"`) {
			t.Errorf("%s: a split plan for whole queries: got %v, want a refusal naming q", tc.name, err)
		}
		if err := launch.Check(plannersPlan(t, tc.k, &whole), r, devkernels.Spec(), h200); err == nil || !strings.Contains(err.Error(), "q_nope") {
			t.Errorf("%s: a whole plan for split queries: got %v, want a refusal naming q_nope", tc.name, err)
		}
	}
}

// TestStrideArguments: a stride argument names a declared tensor and one
// of its dimensions, binds an i64, and a TMA descriptor never spans a
// strided tensor; a plan that declares a tensor strided where the layout
// does not (or the reverse) is refused.
func TestStrideArguments(t *testing.T) {
	dense, _, decode := madeForKernels()
	r := decode(func(r *core.PlanRequest) { r.QuerySplit = true })
	edit := func(f func(p *core.Plan)) *core.Plan {
		p := plannersPlan(t, dense, r)
		f(p)
		return p
	}
	arg := func(p *core.Plan, param string) *core.Arg {
		for i, l := range p.Launches {
			for j := range l.Args {
				if l.Args[j].Param == param {
					return &p.Launches[i].Args[j]
				}
			}
		}
		t.Fatalf("no launch binds %s", param)
		return nil
	}
	for _, tc := range []struct {
		name, want string
		p          *core.Plan
	}{
		{"stride of an undeclared tensor", `stride of tensor "q"`, edit(func(p *core.Plan) { arg(p, "q_nope_t").Name = "q" })},
		{"stride of a dimension past the shape", "dimension 3", edit(func(p *core.Plan) { arg(p, "q_rope_h").Dim = 3 })},
		{"negative dimension", "dimension -1", edit(func(p *core.Plan) { arg(p, "q_rope_h").Dim = -1 })},
		{"stride bound to an i32", "bound to a stride", edit(func(p *core.Plan) {
			*arg(p, "q_rope_col") = core.Arg{Param: "q_rope_col", Kind: core.ArgStride, Name: "q_rope", Dim: 0}
		})},
		{"stride bound to a pointer", "bound to a stride", edit(func(p *core.Plan) {
			*arg(p, "kv_cache") = core.Arg{Param: "kv_cache", Kind: core.ArgStride, Name: "q_rope", Dim: 0}
		})},
		{"strided where the layout is not", "declared strided true", edit(func(p *core.Plan) {
			i := slices.IndexFunc(p.Tensors, func(s core.TensorSpec) bool { return s.Name == "kv_cache" })
			p.Tensors[i].Strided = true
		})},
		{"contiguous where the layout is strided", "declared strided false", edit(func(p *core.Plan) {
			i := slices.IndexFunc(p.Tensors, func(s core.TensorSpec) bool { return s.Name == "q_nope" })
			p.Tensors[i].Strided = false
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := launch.Check(tc.p, r, devkernels.Spec(), h200)
			var pe *launch.PlanError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestQuerySplitRequests: queries split are MLA's, over head dims that
// leave rope columns.
func TestQuerySplitRequests(t *testing.T) {
	_, _, decode := madeForKernels()
	mha := &core.PlanRequest{Backend: "fa3", Method: core.MHAOneShot, DType: "bf16", QuerySplit: true,
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{300}, QLens: []int64{300}},
		Device: h200}
	for _, tc := range []struct {
		name string
		req  *core.PlanRequest
		want string
	}{
		{"MHA", mha, "query_split: queries split into q_nope and q_rope are MLA's, the method is MHA_ONE_SHOT"},
		{"no rope", decode(func(r *core.PlanRequest) { r.QuerySplit, r.Dims.HeadDimQK = true, 512 }), "query_split: dims.head_dim_v 512 leaves no rope columns"},
	} {
		if err := launch.CheckRequest(tc.req); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalidRequest saying %q", tc.name, err, tc.want)
		}
	}
}
