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
			setArg(p, "q_nope", func(a *core.Arg) { a.Name = "weights" })
		}},
		{"pointer as integer", "bound to an integer", func(p *core.Plan, r *core.PlanRequest) {
			setArg(p, "q_nope", func(a *core.Arg) { *a = core.Arg{Param: "q_nope", Kind: core.ArgInt, Int: 0xdead} })
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
	chunk := func(method core.Method, seq ...int64) *core.PlanRequest {
		r := *chunked
		r.Method, r.Shape = method, core.PlanShape{SeqLens: seq, QLens: []int64{5, 7}, PrefixChunk: true}
		return &r
	}
	if err := launch.CheckRequest(chunk(core.MHAChunkedKV, 0, 3)); err != nil {
		t.Errorf("a prefix chunk of 0 and 3 keys under 5 and 7 new tokens: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		req         *core.PlanRequest
	}{
		{"a million prefix chunks", "shape.chunk_capacity", chunked},
		{"a device of a billion multiprocessors", "device.sms", &sms},
		{"a prefix chunk of MHA_ONE_SHOT", "shape.prefix_chunk", chunk(core.MHAOneShot, 4, 4)},
		{"a prefix chunk of no key", "shape.seq_lens are all 0", chunk(core.MHAChunkedKV, 0, 0)},
		{"a prefix chunk of -1 keys", "shape.seq_lens[1] -1", chunk(core.MHAChunkedKV, 4, -1)},
		{"a sparse cache of more slots than i32 name", "more than topk_indices (i32) name", bigSparse(decode)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := launch.CheckRequest(tc.req)
			if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want ErrInvalidRequest naming %s", err, tc.field)
			}
		})
	}
}

// TestCheckRefusesPlansMadeForAnotherRequest: a plan states what it was
// made for through the tensors it declares and binds. A plan of a bf16
// cache for an FP8 request, of a dense layer for a sparse one or of
// another batch is refused, naming what the request needs; so is a plan
// whose launches leave a tensor of the layout unbound
// (TestCheckPassesPlansMadeForTheirRequest: the planner's own plans pass).
func TestCheckRefusesPlansMadeForAnotherRequest(t *testing.T) {
	dense, sparse, decode := madeForKernels()
	fp8 := func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }
	topk := func(r *core.PlanRequest) { r.Dims.TopK = 2048 }
	plan := func(k core.Kernel, r *core.PlanRequest) *core.Plan { return plannersPlan(t, k, r) }
	// withTensors is p with the tensors of r: a plugin that calls
	// launch.Tensors on the request and plans as it always did.
	withTensors := func(p *core.Plan, r *core.PlanRequest) *core.Plan {
		t.Helper()
		ts, err := launch.Tensors(r)
		if err != nil {
			t.Fatal(err)
		}
		p.Tensors = ts
		return p
	}
	// A plan that binds no lse: the modules' entries take none.
	noLSE := func() (*core.Plan, []core.KernelModule) {
		p := plan(dense, decode(nil))
		for i := range p.Launches {
			p.Launches[i].Args = slices.DeleteFunc(p.Launches[i].Args, func(a core.Arg) bool { return a.Param == "lse" })
		}
		mods := devkernels.Spec()
		for i := range mods {
			for j := range mods[i].Entries {
				e := &mods[i].Entries[j]
				e.Params = slices.DeleteFunc(e.Params, func(p core.Param) bool { return p.Name == "lse" })
			}
		}
		return p, mods
	}
	for _, tc := range []struct {
		name string
		req  *core.PlanRequest
		plan func() (*core.Plan, []core.KernelModule)
		want string
	}{
		{"a bf16 plan for an FP8 cache", decode(fp8), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(nil)), devkernels.Spec()
		}, `tensor "kv_cache" declared as bf16 [300 64 576] (output false), the batch gives fp8_e4m3 [300 64 576] (output false) (the request's KV cache is kv_dtype fp8_e4m3)`},
		{"a bf16 plan declaring the FP8 tensors", decode(fp8), func() (*core.Plan, []core.KernelModule) {
			return withTensors(plan(dense, decode(nil)), decode(fp8)), devkernels.Spec()
		}, `no launch binds tensor "kv_scale", and the request's KV cache is kv_dtype fp8_e4m3: the plan was not made for this request`},
		{"an FP8 plan for a bf16 cache", decode(nil), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(fp8)), devkernels.Spec()
		}, `tensor "kv_cache" declared as fp8_e4m3`},
		{"a dense plan for a sparse layer", decode(topk), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(nil)), devkernels.Spec()
		}, `tensor "topk_indices" is not declared (the request is sparse (dims.top_k 2048))`},
		{"a dense plan declaring the sparse tensors", decode(topk), func() (*core.Plan, []core.KernelModule) {
			return withTensors(plan(dense, decode(nil)), decode(topk)), devkernels.Spec()
		}, `no launch binds tensor "topk_indices", and the request is sparse (dims.top_k 2048): the plan was not made for this request`},
		{"a sparse plan for a dense layer", decode(nil), func() (*core.Plan, []core.KernelModule) {
			return plan(sparse, decode(topk)), devkernels.Spec()
		}, `(the request is dense (no dims.top_k))`},
		{"a plan of other query lengths", decode(func(r *core.PlanRequest) { r.Shape.QLens = []int64{2, 1, 1} }), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(nil)), devkernels.Spec()
		}, `tensor "q" declared as bf16 [3 16 576] (output false), the batch gives bf16 [4 16 576]`},
		{"a plan of other heads", decode(func(r *core.PlanRequest) { r.Dims.Heads = 128 }), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(nil)), devkernels.Spec()
		}, `tensor "q" declared as bf16 [3 16 576] (output false), the batch gives bf16 [3 128 576]`},
		{"a plan of another cache", decode(func(r *core.PlanRequest) { r.Shape.NumPages = 301 }), func() (*core.Plan, []core.KernelModule) {
			return plan(dense, decode(nil)), devkernels.Spec()
		}, `tensor "kv_cache" declared as bf16 [300 64 576] (output false), the batch gives bf16 [301 64 576] (output false)`},
		{"an output no launch writes", decode(nil), noLSE, `no launch binds tensor "lse", an output the kernels never write`},
		// MHA's keys are ragged: a graph request's max_seq_len bounds no
		// tensor of it, so its plans read the lengths.
		{"an MHA plan claiming to hold for any lengths", mhaGraph(), func() (*core.Plan, []core.KernelModule) {
			p := plan(chunkKernel, chunkReq(false))
			p.Reads = core.PlanReadsDeclared | core.PlanReadsQLens
			return p, devkernels.Spec()
		}, `the plan declares it does not read the lengths (reads batch+q_lens), but its tensors' shapes follow them`},
		{"a causal MHA_CHUNKED_KV plan for a prefix chunk", chunkReq(true), func() (*core.Plan, []core.KernelModule) {
			return plan(chunkKernel, chunkReq(false)), devkernels.Spec()
		}, `tensor "k" declared as bf16 [150 16 192] (output false), the batch gives bf16 [700 16 192]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, mods := tc.plan()
			err := launch.Check(p, tc.req, mods, h200)
			var pe *launch.PlanError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a *PlanError naming %q", err, tc.want)
			}
		})
	}
}

// chunkKernel is fa3's MHA_CHUNKED_KV kernel, and chunkReq an MHA_CHUNKED_KV
// request of 100 and 50 new tokens over 500 and 200 keys: the keys of a
// prefix chunk (a planner that ignores shape.prefix_chunk plans it as the
// whole method: the new tokens over themselves, then 400 and 150 keys of
// prefix).
var chunkKernel = core.Kernel{Name: "flash_attn_varlen_func+merge_state", Method: core.MHAChunkedKV, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}, PrefixChunks: true}

func chunkReq(prefixChunk bool) *core.PlanRequest {
	return &core.PlanRequest{Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{500, 200}, QLens: []int64{100, 50}, PrefixChunk: prefixChunk},
		Device: h200}
}

// mhaGraph is chunkReq's batch as a graph request with a declared bound
// and a page size, which bound nothing of MHA's ragged keys.
func mhaGraph() *core.PlanRequest {
	r := chunkReq(false)
	r.Graph, r.Shape.MaxSeqLen, r.Shape.PageSize = true, 1024, 1
	return r
}

// madeForKernels returns the catalog kernels of a dense and a sparse MLA
// decode, and decode, a request of three requests that edit changes.
func madeForKernels() (dense, sparse core.Kernel, decode func(edit func(*core.PlanRequest)) *core.PlanRequest) {
	dense = core.Kernel{Name: "flash_attn_with_kvcache", Method: core.MLA, PageSizes: []int{64}, DTypes: []string{"bf16", "fp8_e4m3"}}
	sparse = core.Kernel{Name: "flash_mla_sparse_fwd", Method: core.MLA, PageSizes: []int{64}, DTypes: []string{"bf16", "fp8_e4m3"}, Sparse: true}
	decode = func(edit func(*core.PlanRequest)) *core.PlanRequest {
		r := &core.PlanRequest{Backend: "fa3", Method: core.MLA, DType: "bf16",
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
			Shape:  core.PlanShape{SeqLens: []int64{3000, 70, 9000}, QLens: []int64{1, 1, 1}, PageSize: 64, NumPages: 300},
			Device: h200}
		if edit != nil {
			edit(r)
		}
		return r
	}
	return dense, sparse, decode
}

// plannersPlan is devkernels' plan of r for kernel k.
func plannersPlan(t *testing.T, k core.Kernel, r *core.PlanRequest) *core.Plan {
	t.Helper()
	p, err := devkernels.Plan(k, r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckPassesPlansMadeForTheirRequest: the planner's own plans for a
// bf16 and an FP8 cache, dense and sparse, pass the check.
func TestCheckPassesPlansMadeForTheirRequest(t *testing.T) {
	dense, sparse, decode := madeForKernels()
	fp8 := func(r *core.PlanRequest) { r.KVDType = "fp8_e4m3" }
	topk := func(r *core.PlanRequest) { r.Dims.TopK = 2048 }
	for _, r := range []*core.PlanRequest{decode(nil), decode(fp8), decode(topk), decode(func(r *core.PlanRequest) { fp8(r); topk(r) })} {
		k := dense
		if r.Dims.TopK > 0 {
			k = sparse
		}
		if err := launch.Check(plannersPlan(t, k, r), r, devkernels.Spec(), h200); err != nil {
			t.Errorf("the planner's plan for kv_dtype %q, top_k %d: %v", r.KVDType, r.Dims.TopK, err)
		}
	}
}

// TestCheckLeavesIndexTensorsAndEmptyTensorsUnbound: kv_indptr, seq_lens
// and qo_indptr restate the shape a plan was asked for, so a plan that
// carries them in its metadata need not bind them; nor need a plan bind a
// tensor of no element (the prefixes of MHA_CHUNKED_KV without any).
func TestCheckLeavesIndexTensorsAndEmptyTensorsUnbound(t *testing.T) {
	p, _ := goodPlan(t) // checked there
	for _, name := range []string{"seq_lens", "qo_indptr"} {
		for _, l := range p.Launches {
			for _, a := range l.Args {
				if a.Kind == core.ArgTensor && a.Name == name {
					t.Fatalf("the decode plan binds %s: pick a plan that does not", name)
				}
			}
		}
	}
	chunked := &core.PlanRequest{Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{300, 40}, QLens: []int64{300, 40}, ChunkCapacity: 8192},
		Device: h200}
	k := core.Kernel{Name: "flash_attn_varlen_func", Method: core.MHAChunkedKV, DTypes: []string{"bf16"}}
	p, err := devkernels.Plan(k, chunked)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tensors[3].Name != "k_prefix" || p.Tensors[3].Bytes() != 0 {
		t.Fatalf("tensor 3 is %+v, want k_prefix of no element", p.Tensors[3])
	}
	if err := launch.Check(p, chunked, devkernels.Spec(), h200); err != nil {
		t.Errorf("MHA_CHUNKED_KV without a prefix: %v", err)
	}
}

// bigSparse is decode, sparse, over a cache of 2^32 slots (2^26 pages of
// 64 tokens).
func bigSparse(decode *core.PlanRequest) *core.PlanRequest {
	r := *decode
	r.Dims.TopK, r.Shape.NumPages, r.Shape.PageSize = 2048, 1<<26, 64
	r.Shape.SeqLens, r.Shape.QLens = []int64{4096}, []int64{1}
	return &r
}
