package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// gpuBackend is an in-process backend with the device code of devkernels
// (stand-in images: nothing is launched here); lie makes its plans ask for
// a grid the device does not have.
type gpuBackend struct{ lie bool }

var gpuKernel = core.Kernel{Name: "flash_attn_with_kvcache", Library: "fa3", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 64}, QuerySplit: true}

func (b *gpuBackend) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: "gpu", Version: "1.0.0", DeviceCode: true, Handlers: []core.HandlerInfo{{
		Name: "gpu_mla", Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA}, Kernels: []core.Kernel{gpuKernel},
	}}}, nil
}

func (b *gpuBackend) Dispatch(context.Context, *core.Request) (core.Method, error) {
	return core.MLA, nil
}

func (b *gpuBackend) KernelModules(context.Context, core.DeviceInfo) ([]core.KernelModule, error) {
	mods := devkernels.Spec()
	for i := range mods {
		mods[i].Arch, mods[i].Format, mods[i].Image = "sm_90", core.FormatCUBIN, []byte("stand-in "+mods[i].Name)
		mods[i].SHA256 = core.ImageSHA256(mods[i].Image)
	}
	return mods, nil
}

func (b *gpuBackend) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	p, err := devkernels.Plan(gpuKernel, req)
	if err == nil && b.lie {
		p.Launches[0].Grid[1] = 1 << 20
	}
	return p, err
}

func kernelServer(t *testing.T, be core.Backend) (*Client, *registry.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{t.TempDir()}, Platform: core.PlatformCUDA, Backends: []core.Backend{be}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	c, _ := serveRegistry(t, reg, Config{})
	return c, reg
}

func h200() core.DeviceInfo {
	return core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
}

// TestKernelsOverTheEngineAPI: a client gets the modules and the checked
// plans of a name as the server's registry has them, and the errors by
// kind: no device code, a malformed request, a plan the host refuses.
func TestKernelsOverTheEngineAPI(t *testing.T) {
	c, reg := kernelServer(t, &gpuBackend{})
	ctx := testContext(t)
	mods, err := c.KernelModules(ctx, "gpu_mla", h200())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := reg.KernelModules(ctx, "gpu_mla", h200())
	if !reflect.DeepEqual(mods, want) {
		t.Errorf("modules over the API differ from the registry's")
	}
	req := &core.PlanRequest{Backend: "gpu_mla", Method: core.MLA, DType: "bf16", Graph: true,
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{100, 2000}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 512, MaxSeqLen: 8192},
		Device: h200()}
	p, err := c.PlanKernel(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := reg.PlanKernel(ctx, req)
	if !reflect.DeepEqual(p, local) {
		t.Errorf("the plan over the API differs from the registry's:\n%+v\n%+v", p, local)
	}
	if p.Reads != core.PlanReadsDeclared|core.PlanReadsQLens || !p.Launches[0].PerBatch {
		t.Errorf("plan reads %s, first launch per batch %v", p.Reads, p.Launches[0].PerBatch)
	}
	if _, err := c.KernelModules(ctx, "triton", h200()); !errors.Is(err, core.ErrNoPlan) {
		t.Errorf("modules of triton: %v, want ErrNoPlan", err)
	}
	bad := *req
	bad.Dims.Heads = 0
	if _, err := c.PlanKernel(ctx, &bad); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "heads") {
		t.Errorf("a malformed request: %v, want ErrInvalidRequest naming heads", err)
	}
	bad = *req
	bad.Shape.SeqLens = []int64{1}
	if _, err := c.PlanKernel(ctx, &bad); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("seq_lens and q_lens of different lengths: %v, want ErrInvalidRequest", err)
	}
	// A million prefix chunks (issue 40): refused before any plugin plans.
	bad = *req
	bad.Method, bad.Dims.HeadDimQK, bad.Dims.HeadDimV = core.MHAChunkedKV, 192, 128
	bad.Shape = core.PlanShape{SeqLens: []int64{1048576}, QLens: []int64{1}, ChunkCapacity: 1}
	if _, err := c.PlanKernel(ctx, &bad); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "shape.chunk_capacity: 1 cuts") {
		t.Errorf("a plan past core's bounds: %v, want ErrInvalidRequest naming shape.chunk_capacity", err)
	}

	liar, _ := kernelServer(t, &gpuBackend{lie: true})
	if _, err := liar.PlanKernel(ctx, req); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "plan refused") {
		t.Errorf("a plan the host's check refuses: %v, want ErrNoPlan saying it was refused", err)
	}
}

// TestPlanStepOverTheEngineAPI: an engine's step becomes its plan request
// on the server, with the bound a graph plan holds for (the pool's, not the
// context length), the page table's room and the plan's key, the plan the
// registry's for that request; a step no engine sends is refused naming
// the field. Queries offered split are planned split where the catalog's
// kernel takes them so.
func TestPlanStepOverTheEngineAPI(t *testing.T) {
	c, reg := kernelServer(t, &gpuBackend{})
	ctx := testContext(t)
	step := core.StepRequest{
		Backend: "gpu_mla", Mode: core.ModeDecode, Method: core.MLA, Device: h200(),
		Model: core.StepModel{Heads: 16, KVLoraRank: 512, QKRopeHeadDim: 64, QKNopeHeadDim: 128, VHeadDim: 128, SoftmaxScale: 0.1352},
		Pool:  core.StepPool{PageSize: 64, Slots: 53056, MaxTokens: 53038, RowWidth: 163844, ContextLen: 163840},
		Batch: core.StepBatch{Size: 4, QueryTokens: 1, Graph: true},
	}
	sp, err := c.PlanStep(ctx, &step)
	if err != nil {
		t.Fatal(err)
	}
	if sp.MaxSeqLen != 53038 || sp.PagesPerRequest != 829 || sp.Request.Shape.MaxSeqLen != 53038 || sp.Request.Shape.NumPages != 829 {
		t.Errorf("bound %d, pages per request %d, request shape %+v", sp.MaxSeqLen, sp.PagesPerRequest, sp.Request.Shape)
	}
	local, err := reg.PlanKernel(ctx, &sp.Request)
	if err != nil || !reflect.DeepEqual(sp.Plan, local) {
		t.Errorf("the step's plan differs from the registry's for its request (%v)", err)
	}
	if want := sp.Request.Key(local.Reads.Effective()); sp.Key != want {
		t.Errorf("key %s, want %s", sp.Key, want)
	}
	p, err := c.PlanKernel(ctx, &sp.Request)
	if err != nil || p.Reads != sp.Plan.Reads {
		t.Fatalf("PlanKernel of the step's request: %v", err)
	}
	// Queries offered split, to a kernel that takes them so: a plan of
	// q_nope and q_rope, under another key.
	split := step
	split.QuerySplit = true
	ss, err := c.PlanStep(ctx, &split)
	if err != nil || !ss.Request.QuerySplit || ss.Key == sp.Key || slices.ContainsFunc(ss.Plan.Tensors, func(s core.TensorSpec) bool { return s.Name == "q" }) {
		t.Errorf("a step offering split queries: %v", err)
	}
	bad := step
	bad.Pool.ContextLen = 0
	if _, err := c.PlanStep(ctx, &bad); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "pool.context_len") {
		t.Errorf("a step without a context length: %v, want ErrInvalidRequest naming pool.context_len", err)
	}
	bad = step
	bad.Mode = 99
	if _, err := c.PlanStep(ctx, &bad); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "mode") {
		t.Errorf("an unknown mode: %v", err)
	}
}

// TestKernelsPlanOnlyForWhatPlansWereMadeFor runs serve's Kernels
// service over the real liar plugin told to ignore the cache dtype (or
// the top-k, the split queries) of a plan request: an FP8 (a sparse, a
// split) request, asked as a plan request (PlanKernel) or as an engine's
// step (PlanStep), gets no plan, naming what the catalog lacks when it
// lists a bf16 cache (a dense kernel), and the tensor the plan never reads
// (or reads undeclared) when the catalog claims it; the bf16 dense step
// still gets its plan, and a step that offers split queries to a kernel
// without them gets the plan of whole ones.
func TestKernelsPlanOnlyForWhatPlansWereMadeFor(t *testing.T) {
	dir := t.TempDir()
	if _, err := testbin.BuildTestPlugin(dir, "liar"); err != nil {
		t.Fatal(err)
	}
	plan := &core.PlanRequest{Backend: "liar", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{100, 2000}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 512},
		Device: h200()}
	step := core.StepRequest{
		Backend: "liar", Mode: core.ModeDecode, Method: core.MLA, Device: h200(),
		Model: core.StepModel{Heads: 16, KVLoraRank: 512, QKRopeHeadDim: 64, QKNopeHeadDim: 128, VHeadDim: 128, SoftmaxScale: 0.1352},
		Pool:  core.StepPool{PageSize: 64, Slots: 65536, MaxTokens: 65000, RowWidth: 8192, ContextLen: 8192},
		Batch: core.StepBatch{Size: 4, QueryTokens: 1, Graph: true},
	}
	fp8Plan, fp8Step := *plan, step
	fp8Plan.KVDType, fp8Step.Pool.KVDType = "fp8_e4m3", "fp8_e4m3"
	sparsePlan, sparseStep := *plan, step
	sparsePlan.Dims.TopK, sparseStep.Model.IndexTopK = 2048, 2048
	splitPlan, splitStep := *plan, step
	splitPlan.QuerySplit, splitStep.QuerySplit = true, true
	for _, tc := range []struct {
		lies string
		plan *core.PlanRequest
		step *core.StepRequest
		want string
	}{
		{"ignores_kv_dtype", &fp8Plan, &fp8Step, "kernel liar_mla_decode takes KV caches of [bf16], not kv_dtype fp8_e4m3"},
		{"ignores_top_k", &sparsePlan, &sparseStep, "kernel liar_mla_decode is dense, and the request is sparse (dims.top_k 2048)"},
		{"ignores_kv_dtype,catalog_fp8", &fp8Plan, &fp8Step, `no launch binds tensor "kv_scale", and the request's KV cache is kv_dtype fp8_e4m3`},
		{"ignores_top_k,catalog_sparse", &sparsePlan, &sparseStep, `no launch binds tensor "topk_indices", and the request is sparse (dims.top_k 2048)`},
		{"ignores_query_split,catalog_split", &splitPlan, &splitStep, `binds tensor "q", which the plan does not declare`},
	} {
		t.Run(tc.lies, func(t *testing.T) {
			t.Setenv("ATTNPLUG_LIE", tc.lies)
			ctx := testContext(t)
			reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{dir}, Platform: core.PlatformCUDA, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			c, _ := serveRegistry(t, reg, Config{})
			if _, err := c.PlanKernel(ctx, tc.plan); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PlanKernel: %v, want ErrNoPlan naming %q", err, tc.want)
			}
			if _, err := c.PlanStep(ctx, tc.step); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PlanStep: %v, want ErrNoPlan naming %q", err, tc.want)
			}
			if strings.Contains(tc.lies, "catalog_sparse") {
				return
			}
			if sp, err := c.PlanStep(ctx, &step); err != nil || sp.Plan.Kernel != "liar_mla_decode" {
				t.Errorf("the bf16 dense step: %v", err)
			}
			if strings.Contains(tc.lies, "catalog_split") {
				return
			}
			// Queries offered split to a kernel that takes them whole: the
			// plan of whole queries.
			if sp, err := c.PlanStep(ctx, &splitStep); err != nil || sp.Request.QuerySplit || !slices.ContainsFunc(sp.Plan.Tensors, func(s core.TensorSpec) bool { return s.Name == "q" }) {
				t.Errorf("a step offering split queries to a kernel without query_split: %v", err)
			}
		})
	}
}

// TestKernelsRefuseLongStrings: a string field of a Kernels request
// longer than anything valid (a 1 MB dtype) is an invalid request naming
// the field, whose error quotes the start of the value alone.
func TestKernelsRefuseLongStrings(t *testing.T) {
	c, _ := kernelServer(t, &gpuBackend{})
	ctx := testContext(t)
	big := strings.Repeat("x", 1<<20)
	plan := func(change func(*core.PlanRequest)) error {
		req := &core.PlanRequest{Backend: "gpu_mla", Method: core.MLA, DType: "bf16",
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
			Shape:  core.PlanShape{SeqLens: []int64{100}, QLens: []int64{1}, PageSize: 64, NumPages: 512},
			Device: h200()}
		change(req)
		_, err := c.PlanKernel(ctx, req)
		return err
	}
	dev := h200()
	dev.Name = big[:4096] // a modules request of 1 MB is refused by its size alone
	_, modErr := c.KernelModules(ctx, "gpu_mla", dev)
	for field, err := range map[string]error{
		"dtype":                       plan(func(r *core.PlanRequest) { r.DType = big }),
		"kv_dtype":                    plan(func(r *core.PlanRequest) { r.KVDType = big }),
		"device.name":                 plan(func(r *core.PlanRequest) { r.Device.Name = big }),
		"device.name (modules, 4 KB)": modErr,
	} {
		name, _, _ := strings.Cut(field, " ")
		if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(fmt.Sprint(err), name+": ") || len(err.Error()) > 300 {
			t.Errorf("%s of 1 MB: %.300v; want an invalid request naming the field, in a short error", field, err)
		}
	}
}
