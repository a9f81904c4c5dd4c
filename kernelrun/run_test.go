package kernelrun

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/shm"
)

// openTestRegistry opens a registry over the plugins of dir, in process,
// with the real plugin binaries.
func openTestRegistry(t *testing.T, dirs ...string) *registry.Registry {
	t.Helper()
	reg, err := registry.New(testContext(t), registry.Config{PluginDirs: dirs, Platform: core.PlatformCUDA, CallTimeout: 20 * time.Second, Kernels: backendkit.Run})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// invariantFamily is one kind of batch of the invariant test.
type invariantFamily struct {
	name   string
	mode   core.ForwardMode
	prefix []int64
	seq    []int64
	cap    int64
	thresh int64
	dsa    bool // a DSA layer with a top-k shorter than the sequences
}

var invariantFamilies = []invariantFamily{
	{"no_prefix", core.ModeExtend, []int64{0}, []int64{12}, 1 << 17, 0, false},
	{"long_prefix", core.ModeExtend, []int64{40}, []int64{44}, 1 << 17, 8, false},
	{"several_requests", core.ModeExtend, []int64{0, 5, 17}, []int64{3, 9, 30}, 1 << 17, 4, false},
	{"decode", core.ModeDecode, []int64{8, 16, 4}, []int64{9, 17, 5}, 1 << 17, 0, false},
	{"target_verify", core.ModeTargetVerify, []int64{10, 6}, []int64{13, 9}, 1 << 17, 0, false},
	{"past_chunk_capacity", core.ModeExtend, []int64{24, 30}, []int64{28, 33}, 6, 8, false},
	{"past_capacity_no_prefix", core.ModeExtend, []int64{0, 0}, []int64{20, 20}, 30, 0, false},
	{"dsa_topk", core.ModeExtend, []int64{0, 9}, []int64{20, 14}, 1 << 17, 0, true},
	{"dsa_topk_decode", core.ModeDecode, []int64{19}, []int64{20}, 1 << 17, 0, true},
}

// invariantProfiles are the runtime and layer facts the test varies: one
// each for the paths of every rule to every method.
var invariantProfiles = []struct {
	name string
	set  func(*core.Request)
	// dense reports a profile in which dsa may choose dense MHA.
	dense bool
}{
	{"cuda", func(*core.Request) {}, false},
	{"deterministic", func(r *core.Request) { r.Runtime.DeterministicInference = true }, false},
	{"piecewise_graph", func(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true }, false},
	{"breakable_graph", func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true }, false},
	{"prefill_cp", func(r *core.Request) { r.Batch.MLAPrefillCP = true }, false},
	{"hip_fused_decode", func(r *core.Request) { r.Runtime.Platform = core.PlatformHIP; r.Layer.ROCmFusedDecodeMLA = true }, false},
	{"cpu_amx", func(r *core.Request) {
		r.Runtime.Platform = core.PlatformCPU
		r.Layer.FusedQKVAProjWithMQA, r.Layer.IntelAMX = true, true
	}, false},
	{"npu_dsa_layer", func(r *core.Request) { r.Runtime.Platform = core.PlatformNPU; r.Layer.UseDSA = true }, false},
	{"dsa_use_mha", func(r *core.Request) { r.Runtime.DSAUseMHA, r.Runtime.DSAUseMHASet = true, true }, true},
	{"sm90_dsa_decides", func(r *core.Request) { r.Runtime.ComputeCapability = 90 }, true},
}

// randomSmallConfig draws small MLA dimensions.
func randomSmallConfig(rng *rand.Rand) kernels.Config {
	nope, rope := 2+rng.IntN(7), 2*(1+rng.IntN(4))
	return kernels.Config{
		Heads: 1 + rng.IntN(3), KVLoraRank: 4 + rng.IntN(13), QKNopeHeadDim: nope, QKRopeHeadDim: rope,
		VHeadDim: 2 + rng.IntN(7), SoftmaxScale: 0.2 + rng.Float64(), RopeBase: 100 + 10000*rng.Float64(),
	}
}

// TestRunInvariant is the invariant of attnplug run: for random small MLA
// configurations and every kind of batch, the method each backend name
// picks, run by the kernel of that name's plugin (in the plugin's process,
// through shared memory), matches the float64 reference attention within
// 1e-5; and every method of every name's catalog is run at least once.
func TestRunInvariant(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs every kernel on many random shapes (make test runs it)")
	}
	reg := openTestRegistry(t, bins.PluginDir)
	names := append(reg.Names(), core.TritonName, "FA3")
	rng := rand.New(rand.NewPCG(7, 11))
	covered := map[string]map[string]bool{}
	runs := 0
	for _, name := range names {
		for _, fam := range invariantFamilies {
			for _, prof := range invariantProfiles {
				if fam.dsa && (prof.dense || !slices.ContainsFunc(reg.Kernels(name), func(k core.Kernel) bool { return k.Sparse })) {
					// A top-k shorter than the sequences is for the sparse
					// backends only, and never with dense MHA: that is what
					// the dense threshold (= index_topk) prevents.
					continue
				}
				o := DefaultOptions()
				o.Dims = randomSmallConfig(rng)
				o.TopK = 2048 // at least every sequence: sparse attention equals dense
				if fam.dsa {
					o.TopK = 3 + rng.IntN(5)
				}
				req := core.NewRequest(name, fam.mode)
				req.Batch.ExtendPrefixLens, req.Batch.SeqLens = slices.Clone(fam.prefix), slices.Clone(fam.seq)
				req.Batch.MaxChunkCapacity = fam.cap
				if fam.thresh > 0 {
					req.Layer.ChunkedPrefixCacheThreshold = fam.thresh
				}
				req.Layer.UseDSA = fam.dsa
				req.Runtime.Platform = core.PlatformCUDA
				prof.set(&req)
				seed := rng.Uint64()
				a, err := Run(testContext(t), reg, o, &req, &TensorSpec{Random: &seed})
				what := fmt.Sprintf("%s/%s/%s (dims %+v, top-k %d)", name, fam.name, prof.name, o.Dims, o.TopK)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				runs++
				if a.RelError > 1e-5 {
					t.Errorf("%s: %s by %s (%s): rel_error %.3g > 1e-5", what, a.Method, a.Kernel, a.KernelPlugin, a.RelError)
				}
				if a.KernelFallback != "" {
					t.Errorf("%s: the host ran the kernel itself: %s", what, a.KernelFallback)
				}
				wantPlugin := a.Plugin
				if a.KernelPlugin != wantPlugin {
					t.Errorf("%s: decided by %s, kernel run by %s", what, wantPlugin, a.KernelPlugin)
				}
				if !a.Emulated {
					t.Errorf("%s: not emulated, but there is no device code", what)
				}
				m, _ := core.ParseMethod(a.Method)
				if !slices.ContainsFunc(reg.Kernels(a.Handler), func(k core.Kernel) bool { return k.Method == m && k.Name == a.Kernel }) {
					t.Errorf("%s: kernel %s is not %s's kernel for %s", what, a.Kernel, a.Handler, a.Method)
				}
				if covered[a.Handler] == nil {
					covered[a.Handler] = map[string]bool{}
				}
				covered[a.Handler][a.Method] = true
			}
		}
	}
	for _, name := range append(reg.Names(), core.TritonName) {
		for _, k := range reg.Kernels(name) {
			if !covered[name][k.Method.String()] {
				t.Errorf("%s: method %s (kernel %s) never ran", name, k.Method, k.Name)
			}
		}
	}
	t.Logf("%d runs; methods run per name: %v", runs, covered)
}

// TestRunDSADenseEqualsSparse: when no sequence is longer than the top-k,
// the dsa plugin's dense MHA_ONE_SHOT kernel and its sparse MLA kernel give
// the same answer.
func TestRunDSADenseEqualsSparse(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 12 {
		o := DefaultOptions()
		o.Dims = randomSmallConfig(rng)
		n := 1 + rng.IntN(3)
		var prefix, seq []int64
		for range n {
			p := int64(rng.IntN(10))
			prefix, seq = append(prefix, p), append(seq, p+1+int64(rng.IntN(12)))
		}
		o.TopK = int(slices.Max(seq)) + rng.IntN(3)
		seed := rng.Uint64()
		var outs [2]*Answer
		for j, useMHA := range []bool{true, false} {
			req := core.NewRequest("dsa", core.ModeExtend)
			req.Batch.ExtendPrefixLens, req.Batch.SeqLens, req.Batch.MaxChunkCapacity = prefix, seq, 1<<17
			req.Layer.UseDSA = true
			req.Runtime.DSAUseMHA, req.Runtime.DSAUseMHASet = useMHA, true
			a, err := Run(testContext(t), reg, o, &req, &TensorSpec{Random: &seed})
			if err != nil {
				t.Fatal(err)
			}
			outs[j] = a
		}
		if outs[0].Method != "MHA_ONE_SHOT" || outs[1].Method != "MLA" || outs[0].Sparse || !outs[1].Sparse {
			t.Fatalf("case %d: got %s (sparse %v) and %s (sparse %v)", i, outs[0].Method, outs[0].Sparse, outs[1].Method, outs[1].Sparse)
		}
		dense := make([]float64, len(outs[0].out))
		for k, x := range outs[0].out {
			dense[k] = float64(x)
		}
		if e := kernels.RelError(outs[1].out, dense); e > 1e-5 {
			t.Errorf("case %d (seq %v, top-k %d): sparse MLA and dense MHA_ONE_SHOT differ by %.3g", i, seq, o.TopK, e)
		}
	}
}

// TestCheckTensorBytes covers what the command test cannot reach cheaply:
// the MHA_ONE_SHOT decompression bound, a lower limit and sizes past int64.
func TestCheckTensorBytes(t *testing.T) {
	cfg := kernels.Config{Heads: 1 << 16, KVLoraRank: 1, QKNopeHeadDim: 1, QKRopeHeadDim: 2, VHeadDim: 1,
		SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 1 << 17}
	b := kernels.BatchShape{SeqLens: []int{1 << 14}, PrefixLens: []int{1<<14 - 1}} // one new token
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTensorBytes(cfg, b, l, core.MLA, 1<<30); err != nil {
		t.Errorf("MLA on a %d-byte layout: %v", l.Bytes(), err)
	}
	err = checkTensorBytes(cfg, b, l, core.MHAOneShot, 1<<30)
	if err == nil || !strings.Contains(err.Error(), "MHA_ONE_SHOT decompresses") {
		t.Errorf("MHA_ONE_SHOT decompressing 8 GiB: got %v, want it refused", err)
	}
	err = checkTensorBytes(cfg, b, l, core.MLA, 1<<10)
	if err == nil || !strings.Contains(err.Error(), "more than --max-tensor-bytes 1024") {
		t.Errorf("a %d-byte layout under a 1 KiB limit: got %v, want it refused", l.Bytes(), err)
	}
	if got := satMul(4, 1<<40, 1<<40); got != math.MaxInt64 {
		t.Errorf("satMul(4, 2^40, 2^40) = %d, want it saturated", got)
	}
	if got := satAdd(math.MaxInt64-1, 2); got != math.MaxInt64 {
		t.Errorf("satAdd(MaxInt64-1, 2) = %d, want it saturated", got)
	}
	if got := satMul(4, 3, 5); got != 60 {
		t.Errorf("satMul(4, 3, 5) = %d, want 60", got)
	}
}

// fillFast fills b with a cheap pseudo-random pattern of small floats.
func fillFast(v []float32, seed uint32) {
	const chunk = 1 << 16
	x := seed | 1
	for i := 0; i < min(len(v), chunk); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = float32(int32(x%2001)-1000) / 1000
	}
	for done := min(len(v), chunk); done < len(v); done *= 2 {
		copy(v[done:], v[:done])
	}
}

// TestShm256MB sends a 256 MiB c_kv to a real plugin process: the kernel
// runs there on the shared memory and its answer equals the same kernel run
// in this process, while the gRPC request stays a few hundred bytes.
func TestShm256MB(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a 256 MiB round trip over shared memory (make test runs it)")
	}
	reg := openTestRegistry(t, bins.PluginDir)
	cfg := kernels.Config{Heads: 1, KVLoraRank: 512, QKNopeHeadDim: 16, QKRopeHeadDim: 64, VHeadDim: 16,
		SoftmaxScale: 0.125, RopeBase: 10000, ChunkCapacity: 1 << 17}
	const seq = 1 << 17 // 131072 tokens × 512 × 4 bytes = 256 MiB of c_kv
	b := kernels.BatchShape{SeqLens: []int{seq}, PrefixLens: []int{seq - 1}}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := 4 * l.CKV.Len; got != 256<<20 {
		t.Fatalf("c_kv has %d bytes, want 256 MiB", got)
	}
	seg, err := shm.Create(int64(l.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	in, out, err := l.SplitBytes(seg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range [][]float32{in.QNope, in.QPe, in.CKV, in.KPe, in.WKC, in.WVC} {
		fillFast(v, uint32(i+1))
	}
	in.Positions[0] = seq - 1
	req := &core.KernelRequest{
		Backend: "fa3", Method: core.MLA, Dims: cfg,
		SeqLens: []int64{seq}, PrefixLens: []int64{seq - 1},
		Buffer:  core.SharedBuffer{Path: seg.Path(), Size: seg.Size(), Mem: seg.Bytes()},
		Tensors: backendkit.Refs(l),
	}
	start := time.Now()
	a, err := reg.RunKernel(testContext(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if a.Plugin != "fa3" || a.Fallback != "" {
		t.Fatalf("kernel run by %q (fallback %q), want the fa3 plugin", a.Plugin, a.Fallback)
	}
	t.Logf("256 MiB c_kv: the fa3 plugin ran %s in %v (kernel %v)",
		a.Kernel, time.Since(start).Round(time.Millisecond), time.Duration(a.TimeNS).Round(time.Millisecond))
	got := slices.Clone(out)
	if slices.ContainsFunc(got, func(x float32) bool { return x == 0 }) {
		t.Fatalf("output not written: %v", got)
	}
	clear(out)
	k, _ := (&core.HandlerInfo{Kernels: reg.Kernels("fa3")}).Kernel(core.MLA)
	if _, err := backendkit.Run(testContext(t), k, req, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, out) {
		t.Errorf("plugin output %v, in-process %v", got, out)
	}
}

func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, target)
	}
	return out
}

// TestRunPluginDiesMidKernel: a plugin that dies during RunKernel gives the
// host an error; the host runs the kernel itself, the answer is still
// right, the plugin restarts, and neither a descriptor nor a shared-memory
// segment is left behind.
func TestRunPluginDiesMidKernel(t *testing.T) {
	tree := &testbin.Bins{PluginDir: t.TempDir()}
	fault, err := testbin.BuildFault(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := testbin.FaultScript(tree.PluginDir, fault, "fault", "kernel_crash"); err != nil {
		t.Fatal(err)
	}
	// Warm up what the process opens once (netpoll, ...).
	warm := openTestRegistry(t, tree.PluginDir)
	warm.Close()
	shmBefore, _ := filepath.Glob("/dev/shm/attnplug-*")
	fdsBefore := openFDs(t)

	reg, err := registry.New(testContext(t), registry.Config{PluginDirs: []string{tree.PluginDir}, Platform: core.PlatformCUDA,
		RestartBackoff: time.Millisecond, Kernels: backendkit.Run})
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	ctx := testContext(t)
	for i := range 3 {
		req := core.NewRequest("fault", core.ModeDecode)
		req.Batch.SeqLens = []int64{9, 4}
		seed := uint64(i)
		var a *Answer
		// Until the restart backoff has passed, the host decides and runs
		// the kernel without asking the plugin (its cached answers are not
		// served while it is down); run again until the plugin is asked.
		asked := pollUntil(ctx, func() bool {
			var err error
			if a, err = Run(ctx, reg, o, &req, &TensorSpec{Random: &seed}); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			return !strings.Contains(a.KernelFallback, string(registry.ReasonBackoff)) && !strings.Contains(a.Fallback, string(registry.ReasonBackoff))
		})
		if !asked {
			t.Fatalf("run %d: the fault plugin was not asked again after its crash: %v", i, ctx.Err())
		}
		if a.Plugin != "fault" || a.KernelPlugin != core.PluginCore || a.KernelFallback == "" || a.RelError > 1e-5 {
			t.Errorf("run %d: decided by %s, kernel by %s (fallback %q), rel_error %g; want the host to run it after the crash",
				i, a.Plugin, a.KernelPlugin, a.KernelFallback, a.RelError)
		}
		if i == 0 && !strings.Contains(a.KernelFallback, "plugin_crashed") {
			t.Errorf("run 0: fallback %q, want plugin_crashed", a.KernelFallback)
		}
	}
	var restarts int
	for _, p := range reg.Plugins() {
		if p.Name == "fault" {
			restarts = p.Restarts
		}
	}
	if restarts < 1 {
		t.Errorf("the fault plugin restarted %d times, want at least once", restarts)
	}
	reg.Close()
	closed, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var fds []string
	if !pollUntil(closed, func() bool {
		fds = openFDs(t)
		leaked := slices.ContainsFunc(fds, func(s string) bool { return strings.Contains(s, "memfd:attnplug") })
		return !leaked && len(fds) <= len(fdsBefore)
	}) {
		t.Errorf("descriptors: %d before, %d after: %v", len(fdsBefore), len(fds), fds)
	}
	if after, _ := filepath.Glob("/dev/shm/attnplug-*"); len(after) > len(shmBefore) {
		t.Errorf("/dev/shm: %v before, %v after", shmBefore, after)
	}
}

// pollUntil checks cond every few milliseconds until it holds, and reports
// whether it did before ctx ended.
func pollUntil(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// TestRunContextDeadline keeps Run honest about cancellation.
func TestRunContextDeadline(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := core.NewRequest("fa3", core.ModeDecode)
	req.Batch.SeqLens = []int64{4}
	seed := uint64(1)
	if _, err := Run(ctx, reg, DefaultOptions(), &req, &TensorSpec{Random: &seed}); err == nil {
		t.Error("Run with a cancelled context: got nil error")
	}
}

// TestRunDenseDSAPastTopKSaysSo: dsa_use_mha forcing dense attention on a
// DSA layer whose sequence is longer than the top-k is compared with
// dense attention, the math that ran, and the answer says the request is
// outside what sglang would choose and by how much dense differs from the
// layer's sparse attention; within the top-k it says nothing.
func TestRunDenseDSAPastTopKSaysSo(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	o := DefaultOptions()
	o.TopK = 8
	seed := uint64(9)
	for _, tc := range []struct {
		seq     int64
		outside bool
	}{{40, true}, {8, false}} {
		req := core.NewRequest("dsa", core.ModeExtend)
		req.Batch.ExtendPrefixLens, req.Batch.SeqLens, req.Batch.MaxChunkCapacity = []int64{0}, []int64{tc.seq}, 1<<17
		req.Layer.UseDSA = true
		req.Runtime.DSAUseMHA, req.Runtime.DSAUseMHASet = true, true
		a, err := Run(testContext(t), reg, o, &req, &TensorSpec{Random: &seed})
		if err != nil {
			t.Fatal(err)
		}
		if a.Method != "MHA_ONE_SHOT" || a.Sparse || a.RelError > 1e-5 {
			t.Errorf("seq %d: got %s sparse=%v rel_error %.3g, want a dense MHA_ONE_SHOT within 1e-5 of dense attention", tc.seq, a.Method, a.Sparse, a.RelError)
		}
		want := fmt.Sprintf("outside what sglang would choose: MHA_ONE_SHOT runs dense attention over a sequence of %d tokens on a DSA layer with top_k 8", tc.seq)
		if got := a.OutsideSGLang; tc.outside != strings.HasPrefix(got, want) || !tc.outside && got != "" {
			t.Errorf("seq %d: outside_sglang %q, want it to start %q: %v", tc.seq, got, want, tc.outside)
		}
		if tc.outside && !strings.Contains(a.OutsideSGLang, "(dsa_use_mha forced it here)") {
			t.Errorf("outside_sglang %q does not name dsa_use_mha", a.OutsideSGLang)
		}
	}
}
