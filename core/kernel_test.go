package core_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestKernelDimsValidate: each dimension out of range is refused with a
// FieldError naming it as the plugin protocol's KernelDims and attnplug
// run's "tensors" spell it, and its value.
func TestKernelDimsValidate(t *testing.T) {
	good := core.KernelDims{Heads: 2, KVLoraRank: 16, QKNopeHeadDim: 8, QKRopeHeadDim: 4, VHeadDim: 8, SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: 8, TopK: 2}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid dims: %v", err)
	}
	for _, tc := range []struct {
		edit func(*core.KernelDims)
		want string
	}{
		{func(d *core.KernelDims) { d.Heads = 0 }, "heads: 0 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.KVLoraRank = -8 }, "kv_lora_rank: -8 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.QKNopeHeadDim = 1 << 20 }, "qk_nope_head_dim: 1048576 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.QKRopeHeadDim = 3 }, "qk_rope_head_dim: 3 is odd (RoPE rotates pairs)"},
		{func(d *core.KernelDims) { d.VHeadDim = 0 }, "v_head_dim: 0 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.SoftmaxScale = -1 }, "softmax_scale: -1: want a finite number > 0"},
		{func(d *core.KernelDims) { d.SoftmaxScale = math.NaN() }, "softmax_scale: NaN: want a finite number > 0"},
		{func(d *core.KernelDims) { d.RopeBase = 1 }, "rope_base: 1: want a finite number > 1"},
		{func(d *core.KernelDims) { d.ChunkCapacity = 0 }, "chunk_capacity: 0 is outside [1, 1073741824]"},
		{func(d *core.KernelDims) { d.TopK = 70000 }, "top_k: 70000 is outside [0, 65536]"},
	} {
		d := good
		tc.edit(&d)
		err := d.Validate()
		var fe *core.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, core.ErrInvalidRequest) || err.Error() != tc.want {
			t.Errorf("got %v, want the FieldError %q", err, tc.want)
		}
	}
}

// TestKernelCovers: a catalog kernel covers a plan request only where it
// lists the request's dtype, cache dtype, head dims, page size, sparsity
// and split queries; otherwise the error wraps ErrNoPlan and names the field and
// value it does not list.
func TestKernelCovers(t *testing.T) {
	dense := core.Kernel{Name: "acme_mla", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 64}}
	fp8 := dense
	fp8.DTypes = []string{"bf16", "fp8_e4m3"}
	anyPage := dense
	anyPage.PageSizes = nil
	sparse := fp8
	sparse.Sparse, sparse.PageSizes = true, []int{64}
	split := dense
	split.QuerySplit = true
	prefill := core.Kernel{Name: "acme_prefill", Method: core.MHAOneShot, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}, PageSizes: []int{1}}
	req := func(edit func(*core.PlanRequest)) *core.PlanRequest {
		r := &core.PlanRequest{Backend: "acme", Method: core.MLA, DType: "bf16",
			Dims:  core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1},
			Shape: core.PlanShape{SeqLens: []int64{100}, QLens: []int64{1}, PageSize: 64, NumPages: 2}}
		if edit != nil {
			edit(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		k    core.Kernel
		req  *core.PlanRequest
		want string // "": covered
	}{
		{"bf16 decode", dense, req(nil), ""},
		{"an FP8 cache", dense, req(func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }), "kernel acme_mla takes KV caches of [bf16], not kv_dtype fp8_e4m3"},
		{"an FP8 cache, listed", fp8, req(func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }), ""},
		{"fp16 queries", fp8, req(func(r *core.PlanRequest) { r.DType = "fp16"; r.KVDType = "fp8_e4m3" }), "takes dtypes [bf16 fp8_e4m3], not dtype fp16"},
		{"a sparse layer", fp8, req(func(r *core.PlanRequest) { r.Dims.TopK = 2048 }), "kernel acme_mla is dense, and the request is sparse (dims.top_k 2048)"},
		{"a sparse layer, sparse kernel", sparse, req(func(r *core.PlanRequest) { r.Dims.TopK = 2048 }), ""},
		{"a dense layer, sparse kernel", sparse, req(nil), "is sparse (DeepSeek sparse attention), and the request is dense (no dims.top_k)"},
		{"page size 16", dense, req(func(r *core.PlanRequest) { r.Shape.PageSize = 16 }), "takes page sizes [1 64], not shape.page_size 16"},
		{"page size 16, any page size", anyPage, req(func(r *core.PlanRequest) { r.Shape.PageSize = 16 }), ""},
		{"head dims 192/128", dense, req(func(r *core.PlanRequest) { r.Dims.HeadDimQK, r.Dims.HeadDimV = 192, 128 }), "takes head dims [576 512], not dims.head_dim_qk 192"},
		{"head dim v 128", dense, req(func(r *core.PlanRequest) { r.Dims.HeadDimV = 128 }), "not dims.head_dim_v 128"},
		{"another method", dense, req(func(r *core.PlanRequest) { r.Method = core.MHA }), "runs MLA, not method MHA"},
		{"split queries", dense, req(func(r *core.PlanRequest) { r.QuerySplit = true }), "takes no split queries (query_split"},
		{"split queries, listed", split, req(func(r *core.PlanRequest) { r.QuerySplit = true }), ""},
		{"no dtypes listed", core.Kernel{Name: "bare", Method: core.MLA, HeadDims: []int{576, 512}}, req(nil), "kernel bare takes dtypes [], not dtype bf16"},
		{"a prefill, whatever the page size", prefill, req(func(r *core.PlanRequest) {
			r.Method, r.Dims.HeadDimQK, r.Dims.HeadDimV, r.Shape.PageSize = core.MHAOneShot, 192, 128, 0
		}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.k.Covers(tc.req)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want covered", err)
			case tc.want != "" && (!errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want ErrNoPlan naming %q", err, tc.want)
			}
		})
	}
}
