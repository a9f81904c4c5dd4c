package registry_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/registry/backend"
)

// The tests of this file run the liar plugin (internal/testplugins/liar)
// as a real process: it hands fake PTX modules and plans that lie on
// command, and counts the calls that reach it.

// liar is a registry over a directory holding only the liar plugin.
type liar struct {
	r    *registry.Registry
	logs *syncBuffer
	dir  string
	log  string // the plugin's call log
}

// openLiar opens a registry over the liar plugin, whose processes lie as
// lies says (ATTNPLUG_LIE).
func openLiar(t *testing.T, lies string, cfg registry.Config) *liar {
	t.Helper()
	dir := testPluginDir(t, "liar")
	l := &liar{dir: dir, log: filepath.Join(t.TempDir(), "calls")}
	t.Setenv("ATTNPLUG_LIE", lies)
	t.Setenv("ATTNPLUG_LIE_LOG", l.log)
	cfg.PluginDirs = []string{dir}
	l.r, l.logs = open(t, cfg)
	t.Cleanup(func() {
		l.r.Close()
		if left := testbin.ProcessesUnder(dir); len(left) > 0 {
			t.Errorf("liar plugin processes left after Close: %v", left)
		}
	})
	return l
}

// calls counts the calls of kind ("modules" or "plan") that reached the
// plugin.
func (l *liar) calls(t *testing.T, kind string) int {
	t.Helper()
	data, err := os.ReadFile(l.log)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), kind+"\n")
}

func h200() core.DeviceInfo {
	return core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
}

// planReq is a decode batch for backend: request lengths vary with i.
func planReq(backend string, i int) *core.PlanRequest {
	return &core.PlanRequest{
		Backend: backend, Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{4096 + int64(i), 1, 300}, QLens: []int64{1, 1, 2}, PageSize: 64, NumPages: 200},
		Device: h200(),
	}
}

// TestPlansCachedByRequest runs decode steps of 61 layers: each step asks
// the plugin for one plan at most, and steps seen before ask for none.
func TestPlansCachedByRequest(t *testing.T) {
	l := openLiar(t, "", registry.Config{})
	ctx := testContext(t)
	mods, err := l.r.KernelModules(ctx, "liar", h200())
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 1 || mods[0].SHA256 != core.ImageSHA256(mods[0].Image) || mods[0].Arch != "compute_90" {
		t.Fatalf("modules: %+v", mods)
	}
	step := func(i int) {
		t.Helper()
		var first *core.Plan
		for layer := 0; layer < 61; layer++ {
			p, err := l.r.PlanKernel(ctx, planReq("liar", i))
			if err != nil {
				t.Fatalf("step %d layer %d: %v", i, layer, err)
			}
			if first == nil {
				first = p
			} else if p != first {
				t.Fatalf("step %d layer %d: another plan than layer 0's", i, layer)
			}
		}
		if err := launch.Check(first, planReq("liar", i), mods, h200()); err != nil {
			t.Fatalf("step %d: the registry passed a plan that fails the check: %v", i, err)
		}
		// The plan names the image it was checked against.
		if got := first.ModuleSHA256; len(got) != 1 || got[mods[0].Name] != mods[0].SHA256 {
			t.Fatalf("step %d: module hashes %v, want %s: %s", i, got, mods[0].Name, mods[0].SHA256)
		}
	}
	for i := 0; i < 5; i++ {
		step(i)
	}
	if got := l.calls(t, "plan"); got != 5 {
		t.Errorf("5 steps of 61 layers: %d plan requests reached the plugin, want 5", got)
	}
	// Warm: the same batches again ask nothing.
	for i := 0; i < 5; i++ {
		step(i)
	}
	if got := l.calls(t, "plan"); got != 5 {
		t.Errorf("after warm-up: %d plan requests in all, want still 5", got)
	}
	// Any field of the request makes another plan.
	for _, edit := range []func(*core.PlanRequest){
		func(r *core.PlanRequest) { r.Graph = true },
		func(r *core.PlanRequest) { r.Device.SMs = 78 },
		func(r *core.PlanRequest) { r.Dims.SoftmaxScale = 0.1353 },
		func(r *core.PlanRequest) { r.Shape.QLens = []int64{1, 1, 1} },
		func(r *core.PlanRequest) { r.Shape.NumPages = 201 },
		func(r *core.PlanRequest) { r.Shape.ChunkCapacity = 4096 },
	} {
		req := planReq("liar", 0)
		edit(req)
		if _, err := l.r.PlanKernel(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.calls(t, "plan"); got != 11 {
		t.Errorf("6 requests differing in one field each: %d plan requests in all, want 11", got)
	}
	if got := l.calls(t, "modules"); got != 2 {
		t.Errorf("%d module requests, want 2: one per device (78 SMs is another)", got)
	}
}

// TestKernelModulesOncePerDevice asks for the modules of two devices from
// many goroutines at once: one call per device reaches the plugin.
func TestKernelModulesOncePerDevice(t *testing.T) {
	l := openLiar(t, "image_mib=8", registry.Config{})
	ctx := testContext(t)
	other := h200()
	other.ComputeCapability, other.Name = 100, "NVIDIA B200"
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := h200()
			if i%2 == 1 {
				dev = other
			}
			mods, err := l.r.KernelModules(ctx, "liar", dev)
			if err == nil && (len(mods) != 1 || len(mods[0].Image) < 8<<20) {
				err = fmt.Errorf("modules: %d, image of %d bytes", len(mods), len(mods[0].Image))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	if got := l.calls(t, "modules"); got != 2 {
		t.Errorf("%d module requests for two devices, want 2", got)
	}
}

// TestKernelModulesKeepTheDevicesInUse: the modules of at most 16
// devices are kept, the least recently used one dropped for a new one, so
// that devices described by a client one after the other cannot push out
// the device an engine asks for at every step.
func TestKernelModulesKeepTheDevicesInUse(t *testing.T) {
	l := openLiar(t, "", registry.Config{})
	ctx := testContext(t)
	dev := func(i int) core.DeviceInfo {
		d := h200()
		d.SMs = 100 + i
		return d
	}
	ask := func(i int) {
		t.Helper()
		if _, err := l.r.KernelModules(ctx, "liar", dev(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 16 {
		ask(i)
	}
	ask(0)  // kept; now the most recent
	ask(16) // a 17th device: device 1, the least recent, goes
	ask(0)
	ask(16)
	if got := l.calls(t, "modules"); got != 17 {
		t.Errorf("%d module requests, want 17 (16 devices, then the 17th)", got)
	}
	ask(1)
	if got := l.calls(t, "modules"); got != 18 {
		t.Errorf("%d module requests after the evicted device came back, want 18", got)
	}
}

// TestLyingPlansRefused checks that the registry refuses each lie with an
// error wrapping core.ErrNoPlan that names it, logs it as a fallback, and
// does not ask again for the same request.
func TestLyingPlansRefused(t *testing.T) {
	for _, tc := range []struct {
		lie, want string
		reason    registry.Reason
		planError bool
	}{
		{"unknown_entry", `module "liar_mla" has no entry "liar_mla_split_v2"`, registry.ReasonBadPlan, true},
		{"unknown_module", `unknown module "liar_mla_extra"`, registry.ReasonBadPlan, true},
		{"grid", "grid dimension 1 is 65536, the device allows 65535", registry.ReasonBadPlan, true},
		{"block", "has 2048 threads, the device allows 1024", registry.ReasonBadPlan, true},
		{"shared", "232449 bytes of shared memory per block, the device allows 232448", registry.ReasonBadPlan, true},
		{"unbound", `parameter "lse" of liar_mla_combine is not bound`, registry.ReasonBadPlan, true},
		{"schedule", "keys [256, 556) of request 2, which has 300", registry.ReasonBadPlan, true},
		{"shape", `tensor "out" declared as bf16 [4 17 512]`, registry.ReasonBadPlan, true},
		{"wrong_kernel", `the plan runs kernel "flash_attn_with_kvcache", but liar's catalog runs "liar_mla_decode"`, registry.ReasonBadPlan, true},
		{"hash", `kernel module "liar_mla" declares sha256`, registry.ReasonBadModules, false},
	} {
		t.Run(tc.lie, func(t *testing.T) {
			l := openLiar(t, tc.lie, registry.Config{})
			ctx := testContext(t)
			for i := 0; i < 2; i++ {
				_, err := l.r.PlanKernel(ctx, planReq("liar", 0))
				var pe *launch.PlanError
				switch {
				case !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), string(tc.reason)):
					t.Fatalf("call %d: got %v, want ErrNoPlan with %s naming %q", i, err, tc.reason, tc.want)
				case errors.As(err, &pe) != tc.planError:
					t.Errorf("call %d: errors.As(*launch.PlanError) is %v, want %v", i, !tc.planError, tc.planError)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.planError]; l.calls(t, "plan") != want {
				t.Errorf("%d plan requests for the same refused request twice, want %d", l.calls(t, "plan"), want)
			}
			if !strings.Contains(l.logs.String(), string(tc.reason)) {
				t.Errorf("the refusal was not logged with %s:\n%s", tc.reason, l.logs)
			}
			// The plugin is fine: dispatches still reach it.
			a, err := l.r.Dispatch(ctx, decode("liar"))
			if err != nil || a.Plugin != "liar" || a.Fallback != "" {
				t.Errorf("dispatch after the refusal: %+v, %v", a, err)
			}
		})
	}
}

// fp8Req and sparseReq are planReq over an FP8 cache, and on a sparse
// layer (DeepSeek sparse attention's top-2048).
func fp8Req(backend string) *core.PlanRequest {
	r := planReq(backend, 0)
	r.KVDType = "fp8_e4m3"
	return r
}

func sparseReq(backend string) *core.PlanRequest {
	r := planReq(backend, 0)
	r.Dims.TopK = 2048
	return r
}

// TestPlansOnlyForWhatTheyWereMadeFor runs the liar plugin as a plugin
// that ignores the cache dtype (or the top-k) of a plan request: one whose
// catalog lists a bf16 cache (a dense kernel) is never asked for an FP8
// (a sparse) plan, and the answer names what the catalog lacks; one whose
// catalog claims it is asked, and its plan, made for a bf16 cache (a dense
// layer), is refused by the host's check, naming the tensor its launches
// never read. Either way the bf16 dense plan still comes.
func TestPlansOnlyForWhatTheyWereMadeFor(t *testing.T) {
	for _, tc := range []struct {
		lies  string
		req   *core.PlanRequest
		want  string
		asked bool // the catalog claims the request: the plugin is asked, its plan refused
	}{
		{"ignores_kv_dtype", fp8Req("liar"), "liar's catalog: no device plan: kernel liar_mla_decode takes KV caches of [bf16], not kv_dtype fp8_e4m3", false},
		{"ignores_top_k", sparseReq("liar"), "liar's catalog: no device plan: kernel liar_mla_decode is dense, and the request is sparse (dims.top_k 2048)", false},
		{"ignores_kv_dtype,catalog_fp8", fp8Req("liar"), `no launch binds tensor "kv_scale", and the request's KV cache is kv_dtype fp8_e4m3: the plan was not made for this request`, true},
		{"ignores_top_k,catalog_sparse", sparseReq("liar"), `no launch binds tensor "topk_indices", and the request is sparse (dims.top_k 2048): the plan was not made for this request`, true},
	} {
		t.Run(tc.lies, func(t *testing.T) {
			l := openLiar(t, tc.lies, registry.Config{})
			ctx := testContext(t)
			for i := 0; i < 2; i++ {
				_, err := l.r.PlanKernel(ctx, tc.req)
				var pe *launch.PlanError
				switch {
				case !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want):
					t.Fatalf("call %d: got %v, want ErrNoPlan naming %q", i, err, tc.want)
				case errors.As(err, &pe) != tc.asked:
					t.Errorf("call %d: errors.As(*launch.PlanError) is %v, want %v", i, !tc.asked, tc.asked)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.asked]; l.calls(t, "plan") != want {
				t.Errorf("%d plan requests reached the plugin, want %d", l.calls(t, "plan"), want)
			}
			if tc.asked && !strings.Contains(l.logs.String(), string(registry.ReasonBadPlan)) {
				t.Errorf("the refused plan was not logged with %s:\n%s", registry.ReasonBadPlan, l.logs)
			}
			if !tc.asked && strings.Contains(l.logs.String(), noDeviceCodeLog) {
				t.Errorf("a request the catalog does not list was logged as a fallback:\n%s", l.logs)
			}
			// The catalog's own request: a plan, which the host's check passes.
			dense := planReq("liar", 0)
			if strings.Contains(tc.lies, "catalog_sparse") {
				dense.Dims.TopK = 0
				if _, err := l.r.PlanKernel(ctx, dense); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "the request is dense") {
					t.Errorf("a dense request to a sparse catalog: %v, want ErrNoPlan saying the request is dense", err)
				}
				return
			}
			if _, err := l.r.PlanKernel(ctx, dense); err != nil {
				t.Errorf("the bf16 dense request: %v", err)
			}
		})
	}
}

// noDeviceCodeLog is what the registry logs of a device-code fallback.
const noDeviceCodeLog = "no device plan: the kernel runs another way"

// TestPlanPluginDies checks that a plugin that dies while planning is
// asked once more, on its restarted process, and when that one dies too
// gives ErrNoPlan with the reason; it is restarted as after a failed
// dispatch.
func TestPlanPluginDies(t *testing.T) {
	l := openLiar(t, "crash_plan", registry.Config{})
	ctx := testContext(t)
	_, err := l.r.PlanKernel(ctx, planReq("liar", 0))
	if !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), string(registry.ReasonCrashed)) {
		t.Fatalf("got %v, want ErrNoPlan with %s", err, registry.ReasonCrashed)
	}
	if got := l.calls(t, "plan"); got != 2 {
		t.Errorf("%d plan requests reached the plugin, want 2 (the request and its one retry)", got)
	}
	info := l.r.Plugins()
	if len(info) != 1 || info[0].Status != registry.StatusFailed || !strings.Contains(info[0].LastError, "plan kernel") || info[0].Restarts != 1 {
		t.Errorf("plugins: %+v, want liar failed in PlanKernel after one restart", info)
	}
}

// TestPlanCallsAreAdmittedFewAtATime: many clients asking for plans at
// once reach a plugin backend.MaxPlanCalls at a time, and a plan's
// deadline starts once it is asked of the plugin: 16 plans of 250 ms each
// under a call deadline of 600 ms are all answered, none counts against
// the plugin, and the plugin never holds more than MaxPlanCalls of them.
// (Asked all at once, a plugin computing its plans on two cores took each
// past the deadline, and the timeouts quarantined it.)
func TestPlanCallsAreAdmittedFewAtATime(t *testing.T) {
	l := openLiar(t, "plan_sleep=250ms", registry.Config{CallTimeout: 600 * time.Millisecond})
	ctx := testContext(t)
	if _, err := l.r.KernelModules(ctx, "liar", h200()); err != nil {
		t.Fatal(err)
	}
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := l.r.PlanKernel(ctx, planReq("liar", i))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a plan among %d asked at once: %v", n, err)
		}
	}
	data, err := os.ReadFile(l.log)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, line := range strings.Split(string(data), "\n") {
		var k int
		if _, err := fmt.Sscanf(line, "in_flight %d", &k); err == nil {
			most = max(most, k)
		}
	}
	if most < 1 || most > backend.MaxPlanCalls {
		t.Errorf("the plugin held up to %d plan calls at once, want 1 to %d", most, backend.MaxPlanCalls)
	}
	if info := l.r.Plugins(); len(info) != 1 || info[0].Status != registry.StatusRunning || info[0].LastError != "" || info[0].Restarts != 0 {
		t.Errorf("plugins: %+v, want liar running with no failure", info)
	}
}

// TestOversizedPlanRequestsLeaveThePluginServing sends the plan request of
// issue 40 to the real fa3 plugin 32 times, 8 at a time: one request of a
// million keys at chunk capacity 1, a million prefix chunks, which used to
// pass every check, time fa3 out (its plan grew with the chunks), and
// after 25 of them quarantine it, every client's fa3 and fa4 then falling
// back to triton. Each is refused before it reaches the plugin, with
// ErrInvalidRequest naming the field, its value and the bound; fa3 has no
// failure and answers fa3 and fa4 itself.
func TestOversizedPlanRequestsLeaveThePluginServing(t *testing.T) {
	r, _ := open(t, registry.Config{})
	ctx := testContext(t)
	if _, err := r.KernelModules(ctx, "fa3", h200()); err != nil {
		t.Skipf("fa3 hands no device code on this machine: %v", err)
	}
	req := &core.PlanRequest{Backend: "fa3", Method: core.MHAChunkedKV, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722},
		Shape:  core.PlanShape{SeqLens: []int64{1048576}, QLens: []int64{1}, ChunkCapacity: 1},
		Device: h200()}
	var wg sync.WaitGroup
	for range 4 {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := r.PlanKernel(ctx, req)
				if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "shape.chunk_capacity: 1 cuts") || !strings.Contains(err.Error(), "4096") {
					t.Errorf("got %v, want ErrInvalidRequest naming shape.chunk_capacity, its value and the bound", err)
				}
			}()
		}
		wg.Wait()
	}
	for _, p := range r.Plugins() {
		if p.Name == "fa3" && (p.LastError != "" || p.Restarts != 0 || p.Status == registry.StatusQuarantined) {
			t.Errorf("fa3 after the oversized plan requests: %+v, want no failure", p)
		}
	}
	for _, name := range []string{"fa3", "fa4"} {
		if a, err := r.Dispatch(ctx, decode(name)); err != nil || a.Plugin != "fa3" || a.Fallback != "" {
			t.Errorf("%s after the oversized plan requests: %+v, %v; want fa3's own answer", name, a, err)
		}
	}
}

// TestNoPlanAnswers checks the plugin's own "no plan" and "no device
// code": ErrNoPlan with its message, kept, not counted as a fallback.
func TestNoPlanAnswers(t *testing.T) {
	t.Run("no_plan", func(t *testing.T) {
		l := openLiar(t, "no_plan", registry.Config{})
		for i := 0; i < 3; i++ {
			if _, err := l.r.PlanKernel(testContext(t), planReq("liar", 0)); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "no plan, as asked") {
				t.Fatalf("got %v, want the plugin's ErrNoPlan", err)
			}
		}
		if got := l.calls(t, "plan"); got != 1 {
			t.Errorf("%d plan requests, want 1", got)
		}
		if strings.Contains(l.logs.String(), "no device plan: the kernel runs another way") {
			t.Errorf("an expected no-plan was logged as a fallback:\n%s", l.logs)
		}
	})
	t.Run("no_modules", func(t *testing.T) {
		l := openLiar(t, "no_modules", registry.Config{})
		for i := 0; i < 2; i++ {
			if _, err := l.r.PlanKernel(testContext(t), planReq("liar", 0)); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "no device code, as asked") {
				t.Fatalf("got %v, want the plugin's ErrNoPlan", err)
			}
		}
		if l.calls(t, "modules") != 1 || l.calls(t, "plan") != 0 {
			t.Errorf("%d module and %d plan requests, want 1 and 0", l.calls(t, "modules"), l.calls(t, "plan"))
		}
	})
}

// TestNoDeviceCode checks the names that have none: the triton rules, a
// name nobody serves, a plugin that declares none (fault, as a v1 plugin),
// and the real fa3 plugin on a machine without NVRTC.
func TestNoDeviceCode(t *testing.T) {
	ctx := testContext(t)
	r, _ := open(t, registry.Config{})
	for _, tc := range []struct{ name, want string }{
		{"triton", "triton rules in this process, which have no device code"},
		{"no_such", "triton rules in this process, which have no device code"},
		{"aiter", "plugin aiter declares no device code"},
	} {
		if _, err := r.KernelModules(ctx, tc.name, h200()); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("KernelModules(%s): got %v, want ErrNoPlan saying %q", tc.name, err, tc.want)
		}
		if _, err := r.PlanKernel(ctx, planReq(tc.name, 0)); !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PlanKernel(%s): got %v, want ErrNoPlan saying %q", tc.name, err, tc.want)
		}
	}
	bad := planReq("fa3", 0)
	bad.Dims.Heads = 0
	if _, err := r.PlanKernel(ctx, bad); !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "dims.heads") {
		t.Errorf("PlanKernel(heads 0): got %v, want ErrInvalidRequest naming dims.heads", err)
	}
	for _, name := range []string{"fa3", "flashinfer", "flashmla"} {
		mods, err := r.KernelModules(ctx, name, h200())
		if err != nil {
			if !errors.Is(err, core.ErrNoPlan) {
				t.Fatalf("KernelModules(%s): %v, want modules or ErrNoPlan", name, err)
			}
			t.Logf("%s: no device code on this machine: %v", name, err)
			continue
		}
		p, err := r.PlanKernel(ctx, planReq(name, 0))
		switch {
		case errors.Is(err, core.ErrNoPlan):
			t.Logf("%s: no plan: %v", name, err)
		case err != nil:
			t.Errorf("PlanKernel(%s): %v", name, err)
		default:
			if err := launch.Check(p, planReq(name, 0), mods, h200()); err != nil {
				t.Errorf("PlanKernel(%s): the registry passed a plan that fails the check: %v", name, err)
			}
		}
	}
}

// TestModulePins checks the lock file's module pins: an image whose hash
// the lock does not pin is refused naming both hashes and the fix, a
// pinned one passes, and a lock without module pins pins none.
func TestModulePins(t *testing.T) {
	ctx := testContext(t)
	l := openLiar(t, "", registry.Config{})
	mods, err := l.r.KernelModules(ctx, "liar", h200())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := registry.FileSHA256(filepath.Join(l.dir, "attnplug-backend-liar"))
	if err != nil {
		t.Fatal(err)
	}
	lockWith := func(pins []registry.ModulePin) *registry.Lock {
		lk := &registry.Lock{Format: 1, Path: filepath.Join(t.TempDir(), registry.LockFileName), Plugins: []registry.LockEntry{
			{File: "attnplug-backend-liar", SHA256: sum, Version: "0.0.1-liar", Names: []string{"liar"}, Modules: pins},
		}}
		if err := lk.Write(lk.Path); err != nil {
			t.Fatal(err)
		}
		back, err := registry.ReadLock(lk.Path)
		if err != nil {
			t.Fatal(err)
		}
		return back
	}
	other := strings.Repeat("ab", 32)
	t.Run("unpinned_image_refused", func(t *testing.T) {
		lk := lockWith([]registry.ModulePin{{Name: "liar_mla", Arch: "compute_90", Format: "ptx", SHA256: other}})
		lr := openLiar(t, "variant=rebuilt", registry.Config{Lock: lk})
		_, err := lr.r.KernelModules(ctx, "liar", h200())
		for _, want := range []string{"has sha256 ", "pins module liar_mla as sha256 " + other, "attnplug lock --modules", "--arch sm_90", lk.Path} {
			if !errors.Is(err, core.ErrNoPlan) || !errors.Is(err, registry.ErrNotPinned) || !strings.Contains(fmt.Sprint(err), want) {
				t.Errorf("got %v, want ErrNoPlan and ErrNotPinned saying %q", err, want)
			}
		}
		if _, err := lr.r.PlanKernel(ctx, planReq("liar", 0)); !errors.Is(err, registry.ErrNotPinned) || lr.calls(t, "plan") != 0 {
			t.Errorf("PlanKernel with unpinned modules: %v after %d plan requests, want ErrNotPinned and none", err, lr.calls(t, "plan"))
		}
	})
	t.Run("pinned_image_passes", func(t *testing.T) {
		lk := lockWith(append(registry.ModulePins(mods, h200()), registry.ModulePin{Name: "liar_mla", SHA256: other}))
		lr := openLiar(t, "", registry.Config{Lock: lk})
		if _, err := lr.r.KernelModules(ctx, "liar", h200()); err != nil {
			t.Errorf("pinned modules: %v", err)
		}
		if _, err := lr.r.PlanKernel(ctx, planReq("liar", 0)); err != nil {
			t.Errorf("plan with pinned modules: %v", err)
		}
	})
	t.Run("no_pins_pin_nothing", func(t *testing.T) {
		lr := openLiar(t, "variant=rebuilt", registry.Config{Lock: lockWith(nil)})
		if _, err := lr.r.KernelModules(ctx, "liar", h200()); err != nil {
			t.Errorf("a lock without module pins: %v", err)
		}
	})
}
