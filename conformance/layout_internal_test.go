package conformance

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
)

// TestLayoutAcceptsTheDeviceKernelsPlans: the layout checks are sound on
// the project's own plans, every batch the device-code check asks of every
// method devkernels plans, with and without CUDA graphs.
func TestLayoutAcceptsTheDeviceKernelsPlans(t *testing.T) {
	dev, err := ExampleDevice(DefaultArch)
	if err != nil {
		t.Fatal(err)
	}
	kernels := map[core.Method]string{core.MLA: "flash_attn_with_kvcache", core.MHA: "flash_attn_varlen_func",
		core.MHAOneShot: "flash_attn_varlen_func", core.MHAChunkedKV: "flash_attn_varlen_func"}
	n := 0
	var ks []core.Kernel
	for _, m := range planMethods() {
		ks = append(ks, core.Kernel{Name: kernels[m], Method: m, PageSizes: []int{1, 64}, DTypes: []string{"bf16", "fp8_e4m3"}})
	}
	// dsa's sparse MLA, over bf16 and FP8 caches.
	ks = append(ks, core.Kernel{Name: "flash_mla_sparse_fwd", Method: core.MLA, PageSizes: []int{64}, DTypes: []string{"bf16", "fp8_e4m3"}, Sparse: true})
	for _, k := range ks {
		m := k.Method
		for _, req := range planBatches("fa3", m, k, dev) {
			p, err := devkernels.Plan(k, &req)
			if errors.Is(err, core.ErrNoPlan) {
				t.Fatalf("%s: no plan for %s: %v", m, batchString(&req), err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if why := layoutProblem(p, &req); why != "" {
				t.Errorf("%s plan for %s (%s): %s", m, batchString(&req), p.Note, why)
			}
			n++
		}
	}
	if n < 40 {
		t.Errorf("%d plans checked", n)
	}
}

// TestLayoutRefusesTheExamplePlan: a plan of one launch over requests x
// heads that binds neither seq_lens nor qo_indptr nor metadata (the first
// example of device code in the docs) fails with pages of 64 tokens and in
// target verify, and passes where it can be right (page size 1, one query
// per request); binding the two tensors makes it pass everywhere.
func TestLayoutRefusesTheExamplePlan(t *testing.T) {
	example := func(req *core.PlanRequest, bind ...string) *core.Plan {
		tensor := func(n string) core.Arg { return core.Arg{Param: n, Kind: core.ArgTensor, Name: n} }
		args := []core.Arg{tensor("q"), tensor("kv_cache"), tensor("kv_indptr"), tensor("kv_indices"), tensor("out"), tensor("lse"),
			{Param: "batch", Kind: core.ArgInt, Int: int64(len(req.Shape.SeqLens))},
			{Param: "scale", Kind: core.ArgFloat, Float: req.Dims.SoftmaxScale}}
		for _, b := range bind {
			args = append(args, tensor(b))
		}
		return &core.Plan{Launches: []core.Launch{{Grid: [3]uint32{uint32(len(req.Shape.SeqLens)), uint32(req.Dims.Heads), 1}, Args: args}}}
	}
	req := func(page int, q ...int64) *core.PlanRequest {
		r := &core.PlanRequest{Method: core.MLA, Dims: core.PlanDims{Heads: 16, SoftmaxScale: 0.1}, Shape: core.PlanShape{PageSize: page}}
		for i, x := range q {
			r.Shape.SeqLens = append(r.Shape.SeqLens, 100+int64(i)*37)
			r.Shape.QLens = append(r.Shape.QLens, x)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		req  *core.PlanRequest
		want string
	}{
		{"decode, page size 1", req(1, 1, 1, 1), ""},
		{"decode, page size 64", req(64, 1, 1, 1), "no launch binds seq_lens (nor metadata): with page size 64"},
		{"target verify, page size 1", req(1, 2, 4, 1), "no launch binds qo_indptr (nor metadata): with 7 query tokens for 3 requests"},
		{"target verify, 2 tokens each, page size 1", req(1, 2, 2, 2), "no launch binds qo_indptr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := layoutProblem(example(tc.req), tc.req)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if got := layoutProblem(example(tc.req, "seq_lens", "qo_indptr"), tc.req); got != "" {
				t.Errorf("binding seq_lens and qo_indptr: %q", got)
			}
		})
	}
	// A single request of 3 query tokens: an integer may carry its length.
	r := req(64, 3)
	p := example(r, "qo_indptr")
	p.Launches[0].Args = append(p.Launches[0].Args, core.Arg{Param: "seq_len", Kind: core.ArgInt, Int: r.Shape.SeqLens[0]})
	if got := layoutProblem(p, r); got != "" {
		t.Errorf("one request, its length an integer: %q", got)
	}
	// The MHA layout: metadata or nothing.
	mha := &core.PlanRequest{Method: core.MHA, Shape: core.PlanShape{SeqLens: []int64{10, 20}, QLens: []int64{10, 20}}}
	if got := layoutProblem(&core.Plan{Launches: []core.Launch{{}}}, mha); !strings.Contains(got, "MHA layout has no per-request tensor") {
		t.Errorf("MHA without metadata: %q", got)
	}
}

// docsKernel is the catalog kernel of docs/writing-a-backend.md section
// 11 (the vendor example's DecodeKernel).
var docsKernel = core.Kernel{Name: "acme_mla_decode", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 64}}

// docsPlan is the plan of docs/writing-a-backend.md section 11
// (examples/vendor-backend's kernels.Plan, whose own tests and conform run
// it through the binary): none for what the catalog kernel does not list,
// else one block per request and head, binding seq_lens and qo_indptr,
// holding for the batch size where the request allows it.
func docsPlan(req *core.PlanRequest) (*core.Plan, error) {
	if err := docsKernel.Covers(req); err != nil {
		return nil, err
	}
	tensors, err := launch.Tensors(req)
	if err != nil {
		return nil, err
	}
	t := func(n string) core.Arg { return core.Arg{Param: n, Kind: core.ArgTensor, Name: n} }
	p := &core.Plan{
		Kernel: docsKernel.Name, Tensors: tensors,
		Launches: []core.Launch{{
			Module: "acme_decode", Entry: "acme_decode",
			Grid: [3]uint32{uint32(len(req.Shape.SeqLens)), uint32(req.Dims.Heads), 1}, Block: [3]uint32{128, 1, 1},
			Args: []core.Arg{t("q"), t("kv_cache"), t("kv_indptr"), t("kv_indices"), t("seq_lens"), t("qo_indptr"), t("out"), t("lse"),
				{Param: "heads", Kind: core.ArgInt, Int: int64(req.Dims.Heads)},
				{Param: "page_size", Kind: core.ArgInt, Int: int64(req.Shape.PageSize)},
				{Param: "scale", Kind: core.ArgFloat, Float: req.Dims.SoftmaxScale}},
		}},
	}
	if launch.PagesPerRequest(req) > 0 {
		p.Reads = core.PlanReadsDeclared | core.PlanReadsQLens
	}
	return p, nil
}

// TestTheDocsPlanPasses: the docs' example plan passes the host's check
// and the layout checks on every MLA batch the device-code check asks,
// and every probe gets no plan or a plan that passes them too.
func TestTheDocsPlanPasses(t *testing.T) {
	dev, err := ExampleDevice(DefaultArch)
	if err != nil {
		t.Fatal(err)
	}
	ptr := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	mods := []core.KernelModule{{Name: "acme_decode", Entries: []core.Entry{{Name: "acme_decode", Params: []core.Param{
		ptr("q"), ptr("kv_cache"), ptr("kv_indptr"), ptr("kv_indices"), ptr("seq_lens"), ptr("qo_indptr"), ptr("out"), ptr("lse"),
		{Name: "heads", Kind: core.ParamI32}, {Name: "page_size", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32},
	}}}}}
	check := func(what string, req *core.PlanRequest, p *core.Plan) {
		t.Helper()
		if err := launch.Check(p, req, mods, dev); err != nil {
			t.Errorf("%s%s: %v", what, batchString(req), err)
		}
		if why := layoutProblem(p, req); why != "" {
			t.Errorf("%s%s: %s", what, batchString(req), why)
		}
	}
	for _, req := range planBatches("acme_mla", core.MLA, docsKernel, dev) {
		p, err := docsPlan(&req)
		if err != nil {
			t.Fatal(err)
		}
		check("", &req, p)
	}
	plans := 0
	for _, pr := range planProbes("acme_mla", docsKernel, dev) {
		p, err := docsPlan(&pr.req)
		switch {
		case errors.Is(err, core.ErrNoPlan):
		case err != nil:
			t.Errorf("probe %s: %v", pr.what, err)
		default:
			plans++
			check("probe "+pr.what+": ", &pr.req, p)
		}
	}
	if plans == 0 {
		t.Error("no probe got a plan")
	}
}
