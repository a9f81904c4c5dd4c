package registry_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/registry"
)

// acme is a backend a Go host links: "acme_mla" answers MLA on decode and
// MHA otherwise; "acme_panic" panics when asked to (a request in target
// verify mode), and "fa3" is claimed too, to be shadowed by the plugin.
type acme struct{ calls atomic.Int64 }

func (a *acme) Describe(context.Context) (*core.Description, error) {
	h := func(name string) core.HandlerInfo {
		return core.HandlerInfo{Name: name, Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA, core.MHA}}
	}
	return &core.Description{Name: "acme", Version: "1.2.3", Handlers: []core.HandlerInfo{h("acme_mla"), h("acme_panic"), h("fa3"), h("triton")}}, nil
}

func (a *acme) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	a.calls.Add(1)
	if req.Backend == "acme_panic" && req.Batch.Mode == core.ModeTargetVerify {
		panic("acme: a bug")
	}
	if req.Batch.Mode == core.ModeDecode {
		return core.MLA, nil
	}
	return core.MHA, nil
}

func TestInProcessBackendIsRoutedAsAPlugin(t *testing.T) {
	be := &acme{}
	r, logs := open(t, registry.Config{Backends: []core.Backend{be}})
	ctx := testContext(t)

	a, err := r.Dispatch(ctx, decode("acme_mla"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (core.Answer{Method: core.MLA, Handler: "acme_mla", Plugin: "acme"}); a != want {
		t.Fatalf("got %+v, want %+v", a, want)
	}
	// The answer cache keys on the declared reads: the same facts again
	// make no call.
	before := be.calls.Load()
	for range 10 {
		if _, err := r.Dispatch(ctx, decode("acme_mla")); err != nil {
			t.Fatal(err)
		}
	}
	if n := be.calls.Load() - before; n != 0 {
		t.Errorf("%d calls for answers the cache holds", n)
	}
	// A plugin serving the same name keeps it, and so does triton.
	if a, _ := r.Dispatch(ctx, decode("fa3")); a.Plugin != "fa3" {
		t.Errorf("fa3 answered by %q, want the plugin", a.Plugin)
	}
	if a, _ := r.Dispatch(ctx, decode("triton")); a.Plugin != core.PluginCore || a.Handler != core.TritonName {
		t.Errorf("triton answered by %+v, want the triton rules", a)
	}
	if !strings.Contains(logs.String(), "the plugin serves it") || !strings.Contains(logs.String(), "claims the triton name") {
		t.Errorf("the shadowed names are not logged:\n%s", logs)
	}
	// Listed as any name is.
	if h, family, ok := r.Handler("acme_mla"); !ok || family != "acme" || h.Name != "acme_mla" {
		t.Errorf("Handler(acme_mla) = %+v, %q, %v", h, family, ok)
	}
	routes, _, _ := r.Routes()
	found := false
	for _, ri := range routes {
		if ri.Name == "acme_mla" {
			found = ri.Plugin == "acme" && ri.Version == "1.2.3" && ri.Cacheable
		}
	}
	if !found {
		t.Errorf("Routes lists no cacheable acme_mla of acme 1.2.3: %+v", routes)
	}
	// A batch goes through the same call.
	reqs := []core.Request{*decode("acme_mla"), core.NewRequest("acme_mla", core.ModeExtend)}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := r.DispatchBatch(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Answer.Method != core.MLA || out[1].Answer.Method != core.MHA || out[1].Answer.Plugin != "acme" {
		t.Errorf("batch: %+v", out)
	}
}

func TestInProcessBackendPanicFallsBack(t *testing.T) {
	r, logs := open(t, registry.Config{Backends: []core.Backend{&acme{}}})
	ctx := testContext(t)
	req := core.NewRequest("acme_panic", core.ModeTargetVerify)
	a, err := r.Dispatch(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Fallback, string(registry.ReasonCrashed)) || !strings.Contains(a.Fallback, "acme: a bug") || a.Plugin != core.PluginCore {
		t.Errorf("got %+v, want a triton answer with a crash fallback naming the panic", a)
	}
	if !strings.Contains(logs.String(), "falling back to the triton rules") {
		t.Errorf("the fallback is not logged:\n%s", logs)
	}
	// The backend keeps serving its other requests.
	if a, err := r.Dispatch(ctx, decode("acme_panic")); err != nil || a.Fallback != "" || a.Method != core.MLA {
		t.Errorf("after the panic: %+v, %v", a, err)
	}

	strict, _ := open(t, registry.Config{Backends: []core.Backend{&acme{}}, Strict: true})
	if _, err := strict.Dispatch(ctx, &req); !errors.Is(err, core.ErrRefused) {
		t.Errorf("strict: got %v, want ErrRefused", err)
	}
}

// mute describes itself badly.
type mute struct{ acme }

func (*mute) Describe(context.Context) (*core.Description, error) {
	return nil, errors.New("cannot say")
}

func TestInProcessBackendThatCannotDescribeFailsNew(t *testing.T) {
	_, err := registry.New(testContext(t), registry.Config{Backends: []core.Backend{&mute{}}, SocketDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "cannot say") {
		t.Fatalf("got %v, want New to fail with the backend's error", err)
	}
}

func TestInProcessKernelRunsByConfigKernels(t *testing.T) {
	var ran atomic.Int64
	kernels := func(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo) (*core.KernelResult, error) {
		ran.Add(1)
		return &core.KernelResult{Kernel: k.Name}, nil
	}
	r, _ := open(t, registry.Config{Backends: []core.Backend{&catalogued{}}, Kernels: kernels})
	ka, err := r.RunKernel(testContext(t), &core.KernelRequest{Backend: "acme_mla", Method: core.MLA})
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 || ka.Plugin != "acme" || ka.Kernel != "acme_decode" || ka.Fallback != "" {
		t.Errorf("got %+v after %d runs, want acme's catalog kernel run by Config.Kernels", ka, ran.Load())
	}
}

// TestSubsetCatalogLeavesTheRestToTheHost: a catalog that covers MLA of
// the two methods a name declares is served; MLA runs the backend's own
// kernel, MHA the host's reference kernel in the host's process, named as
// such, with no fallback; a method the name does not declare has no
// kernel.
func TestSubsetCatalogLeavesTheRestToTheHost(t *testing.T) {
	var ran []string
	var mu sync.Mutex
	kernels := func(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo) (*core.KernelResult, error) {
		mu.Lock()
		ran = append(ran, k.Name+"/"+k.Library)
		mu.Unlock()
		return &core.KernelResult{Kernel: k.Name, Library: k.Library}, nil
	}
	r, _ := open(t, registry.Config{Backends: []core.Backend{&subset{}}, Kernels: kernels})
	ctx := testContext(t)
	if h, _, ok := r.Handler("acme_mla"); !ok || len(h.Kernels) != 1 || len(h.Catalog()) != 2 || !reflect.DeepEqual(h.Catalog()[1], core.HostReferenceKernel(core.MHA)) {
		t.Fatalf("handler %+v: want one kernel of its own and the host's for MHA", h)
	}
	ka, err := r.RunKernel(ctx, &core.KernelRequest{Backend: "acme_mla", Method: core.MLA})
	if err != nil || ka.Plugin != "acme" || ka.Kernel != "acme_decode" {
		t.Errorf("MLA: %+v, %v; want acme's kernel", ka, err)
	}
	ka, err = r.RunKernel(ctx, &core.KernelRequest{Backend: "acme_mla", Method: core.MHA})
	if err != nil || ka.Plugin != core.PluginCore || ka.Kernel != "reference" || ka.Library != core.LibHostReference || ka.Fallback != "" {
		t.Errorf("MHA: %+v, %v; want the host's reference kernel, no fallback", ka, err)
	}
	if _, err := r.RunKernel(ctx, &core.KernelRequest{Backend: "acme_mla", Method: core.DSANPU}); !errors.Is(err, core.ErrNoKernel) {
		t.Errorf("a method it does not declare: %v, want ErrNoKernel", err)
	}
	if want := []string{"acme_decode/acme", "reference/" + core.LibHostReference}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}

// subset is acme with a catalog of its MLA kernel only.
type subset struct{ acme }

func (c *subset) Describe(ctx context.Context) (*core.Description, error) {
	d, _ := c.acme.Describe(ctx)
	for i := range d.Handlers {
		d.Handlers[i].Kernels = []core.Kernel{{Name: "acme_decode", Library: "acme", Method: core.MLA, DTypes: []string{"bf16"}}}
	}
	return d, nil
}

// catalogued is acme with a kernel catalog.
type catalogued struct{ acme }

func (c *catalogued) Describe(ctx context.Context) (*core.Description, error) {
	d, _ := c.acme.Describe(ctx)
	for i := range d.Handlers {
		d.Handlers[i].Kernels = []core.Kernel{
			{Name: "acme_decode", Library: "acme", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576}, PageSizes: []int{1}},
			{Name: "acme_prefill", Library: "acme", Method: core.MHA, DTypes: []string{"bf16"}, HeadDims: []int{576}, PageSizes: []int{1}},
		}
	}
	return d, nil
}

func TestDispatchBatchLeavesTheRequestsAlone(t *testing.T) {
	r, _ := open(t, registry.Config{Platform: core.PlatformCUDA})
	reqs := []core.Request{*decode("fa3"), *decode("no_such"), *decode("triton")}
	out := make([]registry.BatchAnswer, len(reqs))
	if err := r.DispatchBatch(testContext(t), reqs, out); err != nil {
		t.Fatal(err)
	}
	for i, req := range reqs {
		if out[i].Err != nil {
			t.Fatalf("%s: %v", req.Backend, out[i].Err)
		}
		if req.Runtime.Platform != core.PlatformUnset {
			t.Errorf("%s: the caller's request now has platform %s", req.Backend, req.Runtime.Platform)
		}
	}
}

// planner is a backend in process with device code: the MLA decode of
// package devkernels (its module's entries, a stand-in image: nothing is
// launched here), planned by devkernels.Plan, counting the plan requests.
type planner struct{ plans atomic.Int64 }

var plannerKernel = core.Kernel{Name: "flash_attn_with_kvcache", Library: "fa3", Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 64}}

func (p *planner) Describe(context.Context) (*core.Description, error) {
	return &core.Description{Name: "acme_gpu", Version: "1.0.0", DeviceCode: true, Handlers: []core.HandlerInfo{{
		Name: "acme_gpu", Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA},
		Kernels: []core.Kernel{plannerKernel},
	}}}, nil
}

func (p *planner) Dispatch(context.Context, *core.Request) (core.Method, error) { return core.MLA, nil }

func (p *planner) KernelModules(_ context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	mods := devkernels.Spec()
	for i := range mods {
		mods[i].Arch, mods[i].Format, mods[i].Image = "compute_90", core.FormatPTX, ptxstub.Image("compute_90", "stand-in for "+mods[i].Name, mods[i].Entries)
		mods[i].SHA256 = core.ImageSHA256(mods[i].Image)
	}
	return mods, nil
}

func (p *planner) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	p.plans.Add(1)
	return devkernels.Plan(plannerKernel, req)
}

// TestInProcessBackendHandsDeviceCode: a backend a Go host links hands
// modules and plans through the registry as a plugin does, checked the same
// way; a graph plan that holds for a batch size (declared by its Reads) is
// asked for once for a serving loop of growing lengths, and a new batch
// size or query length asks again.
func TestInProcessBackendHandsDeviceCode(t *testing.T) {
	be := &planner{}
	r, _ := open(t, registry.Config{Backends: []core.Backend{be}})
	ctx := testContext(t)
	mods, err := r.KernelModules(ctx, "acme_gpu", h200())
	if err != nil || len(mods) != len(devkernels.Spec()) {
		t.Fatalf("modules: %v, %v", mods, err)
	}
	step := func(b int, seq, q int64) *core.PlanRequest {
		req := &core.PlanRequest{Backend: "acme_gpu", Method: core.MLA, DType: "bf16", Graph: true,
			Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
			Shape:  core.PlanShape{PageSize: 64, NumPages: 4096, MaxSeqLen: 8192},
			Device: h200()}
		for i := range b {
			req.Shape.SeqLens = append(req.Shape.SeqLens, seq+int64(i))
			req.Shape.QLens = append(req.Shape.QLens, q)
		}
		return req
	}
	var first *core.Plan
	for s := range 1000 {
		p, err := r.PlanKernel(ctx, step(16, int64(100+s), 1))
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		if first == nil {
			first = p
		}
		if p != first {
			t.Fatalf("step %d got another plan", s)
		}
	}
	if n := be.plans.Load(); n != 1 {
		t.Errorf("%d plan requests for 1000 steps of batch 16, want 1", n)
	}
	if first.Reads != core.PlanReadsDeclared|core.PlanReadsQLens || len(first.Metadata) != 0 || !first.Launches[0].PerBatch {
		t.Errorf("the graph plan reads %s, has %d metadata buffers, first launch per batch %v; want batch+q_lens, none, true",
			first.Reads, len(first.Metadata), first.Launches[0].PerBatch)
	}
	for _, req := range []*core.PlanRequest{step(64, 100, 1), step(16, 100, 2)} {
		if _, err := r.PlanKernel(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := be.plans.Load(); n != 3 {
		t.Errorf("%d plan requests after a new batch size and a new query length, want 3", n)
	}
	// Without a bound on the lengths, a plan reads them: each step asks.
	req := step(16, 100, 1)
	req.Shape.MaxSeqLen = 0
	r.PlanKernel(ctx, req)
	req.Shape.SeqLens[0]++
	r.PlanKernel(ctx, req)
	if n := be.plans.Load(); n != 5 {
		t.Errorf("%d plan requests after two steps without a bound, want 5", n)
	}
}

// TestModulesForAnotherArchitecture: modules whose images cannot run on the
// device they were asked for (the planner's compute_90 PTX, for an A100)
// are refused, the reason naming the module, its architecture and the
// device's, and the backend's plans are not asked for.
func TestModulesForAnotherArchitecture(t *testing.T) {
	be := &planner{}
	r, logs := open(t, registry.Config{Backends: []core.Backend{be}})
	ctx := testContext(t)
	a100 := h200()
	a100.Name, a100.ComputeCapability, a100.SMs, a100.MaxSharedPerBlock = "NVIDIA A100", 80, 108, 166912
	_, err := r.KernelModules(ctx, "acme_gpu", a100)
	want := `is PTX for compute_90, which needs compute capability 9.0 or newer, not compute capability 8.0 (asked for NVIDIA A100)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("modules for an A100: %v, want an error saying %q", err, want)
	}
	req := planReq("acme_gpu", 1)
	req.Device = a100
	if _, err := r.PlanKernel(ctx, req); err == nil {
		t.Error("a plan for the A100 from a backend whose modules do not run there")
	}
	if n := be.plans.Load(); n != 0 {
		t.Errorf("the backend was asked for %d plans", n)
	}
	if !strings.Contains(logs.String(), "compute_90") {
		t.Errorf("the fallback is not logged with its reason:\n%s", logs.String())
	}
	if _, err := r.KernelModules(ctx, "acme_gpu", h200()); err != nil {
		t.Errorf("modules for the H200: %v", err)
	}
}
