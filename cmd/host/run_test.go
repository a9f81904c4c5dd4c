package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
				o := defaultRunOptions()
				o.cfg = randomSmallConfig(rng)
				o.topK = 2048 // at least every sequence: sparse attention equals dense
				if fam.dsa {
					o.topK = 3 + rng.IntN(5)
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
				a, err := runRequest(testContext(t), reg, o, &req, &tensorSpec{Random: &seed})
				what := fmt.Sprintf("%s/%s/%s (dims %+v, top-k %d)", name, fam.name, prof.name, o.cfg, o.topK)
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
		o := defaultRunOptions()
		o.cfg = randomSmallConfig(rng)
		n := 1 + rng.IntN(3)
		var prefix, seq []int64
		for range n {
			p := int64(rng.IntN(10))
			prefix, seq = append(prefix, p), append(seq, p+1+int64(rng.IntN(12)))
		}
		o.topK = int(slices.Max(seq)) + rng.IntN(3)
		seed := rng.Uint64()
		var outs [2]*runAnswer
		for j, useMHA := range []bool{true, false} {
			req := core.NewRequest("dsa", core.ModeExtend)
			req.Batch.ExtendPrefixLens, req.Batch.SeqLens, req.Batch.MaxChunkCapacity = prefix, seq, 1<<17
			req.Layer.UseDSA = true
			req.Runtime.DSAUseMHA, req.Runtime.DSAUseMHASet = useMHA, true
			a, err := runRequest(testContext(t), reg, o, &req, &tensorSpec{Random: &seed})
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
			t.Errorf("case %d (seq %v, top-k %d): sparse MLA and dense MHA_ONE_SHOT differ by %.3g", i, seq, o.topK, e)
		}
	}
}

// TestRunCommand runs attnplug run, the binary, on random and inline
// tensors, a bad line among them.
func TestRunCommand(t *testing.T) {
	cfg := kernels.Config{Heads: 1, KVLoraRank: 4, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 8}
	b := kernels.BatchShape{SeqLens: []int{3}, PrefixLens: []int{0}}
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 1)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	inline, _ := json.Marshal(map[string]any{
		"heads": 1, "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2, "softmax_scale": 0.5,
		"q_nope": raw.QNope, "q_pe": raw.QPe, "c_kv": raw.CKV, "k_pe": raw.KPe, "w_kc": raw.WKC, "w_vc": raw.WVC,
	})
	in := strings.Join([]string{
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0,0],"seq_lens":[16,24],"max_chunk_capacity":131072}`,
		`{"backend":"dsa","forward_mode":"DECODE","seq_lens":[30]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[3],"max_chunk_capacity":8,"tensors":` + string(inline) + `}`,
		`{"backend":"fa3","forward_mode":"DECODE"}`,
		`{"backend":"triton","forward_mode":"EXTEND","seq_lens":[5],"tensors":{"random":3,"heads":3}}`,
	}, "\n") + "\n"
	r := host(t, bins, in, "run", "--random-tensors", "--plugin-dir", bins.PluginDir)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1 (one line refused); stderr: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d answers, want 5:\n%s\nstderr: %s", len(lines), r.stdout, r.stderr)
	}
	want := []struct{ method, kernel, plugin string }{
		{"MHA_ONE_SHOT", "flash_attn_varlen_func", "fa3"},
		{"MLA", "flash_mla_sparse_fwd", "dsa"},
		{"MHA_ONE_SHOT", "flash_attn_varlen_func", "fa3"},
		{},
		{"MHA", "extend_attention_fwd", "core"},
	}
	for i, line := range lines {
		var a struct {
			Method, Kernel, Plugin, Error string
			KernelPlugin                  string  `json:"kernel_plugin"`
			Emulated                      bool    `json:"emulated"`
			TimeNS                        int64   `json:"time_ns"`
			RelError                      float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		if want[i].method == "" {
			if !strings.Contains(a.Error, "line 4: seq_lens: needed to run a kernel") {
				t.Errorf("answer 4: got %s, want the seq_lens error", line)
			}
			continue
		}
		if a.Method != want[i].method || a.Kernel != want[i].kernel || a.KernelPlugin != want[i].plugin || !a.Emulated ||
			a.TimeNS <= 0 || a.RelError > 1e-5 {
			t.Errorf("answer %d: got %s, want %+v, emulated, time_ns > 0, rel_error <= 1e-5", i+1, line, want[i])
		}
	}
}

// TestRunRefusesLinesItCannotHold: a line whose tensors would take more
// than --max-tensor-bytes (here w_kc, 1024×1024×1024 floats, 4 GiB) and
// lines with a field given twice are refused with an error naming the
// field, before anything is allocated, and the line after them is
// answered.
func TestRunRefusesLinesItCannotHold(t *testing.T) {
	const good = `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":2}}`
	lines := []struct{ line, err string }{
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1,"heads":1024,"kv_lora_rank":1024,"qk_nope_head_dim":1024}}`,
			"line 1: tensors.w_kc: shape [1024 1024 1024] takes 4294967296 bytes; the line's tensors take "},
		{good, ""},
		{`{"backend":"fa3","backend":"triton","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}`, "line 3: backend: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","tensors":{"random":1},"seq_lens":[4],"seq_lens":[5]}`, "line 4: seq_lens: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1},"tensors":{"random":2}}`, "line 5: tensors: given twice"},
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1,"heads":1,"heads":2}}`, "line 6: tensors.heads: given twice"},
		{good, ""},
	}
	var in strings.Builder
	for _, l := range lines {
		in.WriteString(l.line + "\n")
	}
	r := host(t, bins, in.String(), "run", "--plugin-dir", bins.PluginDir)
	if r.code != 1 {
		t.Errorf("exit status %d, want 1 (lines refused); stderr: %s", r.code, r.stderr)
	}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != len(lines) {
		t.Fatalf("got %d answers, want %d:\n%s\nstderr: %s", len(got), len(lines), r.stdout, r.stderr)
	}
	for i, line := range got {
		var a struct{ Kernel, Error string }
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		if want := lines[i].err; want == "" && (a.Error != "" || a.Kernel == "") {
			t.Errorf("answer %d: got %s, want a kernel's answer", i+1, line)
		} else if want != "" && !strings.HasPrefix(a.Error, want) {
			t.Errorf("answer %d: got %s, want an error starting %q", i+1, line, want)
		}
	}
	if !strings.Contains(got[0], "more than --max-tensor-bytes 1073741824") {
		t.Errorf("answer 1: %s does not name --max-tensor-bytes", got[0])
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

// TestRunPluginsKernels checks attnplug plugins --kernels lists every
// name's catalog.
func TestRunPluginsKernels(t *testing.T) {
	r := host(t, bins, "", "plugins", "--kernels", "--plugin-dir", bins.PluginDir)
	if r.code != 0 {
		t.Fatalf("exit status %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"flash_mla_sparse_fwd (sparse)", "DeepSeek sparse attention", "FlashAttention 4", "CUTLASS MLA",
		"TRT-LLM MLA", "TokenSpeed MLA", "torch_npu", "Intel XPU", "FlashMLA", "FlashInfer", "aiter", "extend_attention_fwd"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plugins --kernels: no %q in:\n%s", want, r.stdout)
		}
	}
	// The JSON spells methods and platforms by name, as the table does.
	r = host(t, bins, "", "plugins", "--kernels", "--json", "--plugin-dir", bins.PluginDir)
	var rows []struct {
		Plugin, Name string
		Kernels      []struct {
			Name, Method string
			Hardware     []struct{ Platforms []string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 0 {
		t.Fatalf("plugins --kernels --json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	methods, platforms := map[string]bool{}, map[string]bool{}
	for _, row := range rows {
		for _, k := range row.Kernels {
			if _, err := core.ParseMethod(k.Method); err != nil {
				t.Errorf("%s %s: method %q is not a method's name", row.Name, k.Name, k.Method)
			}
			methods[k.Method] = true
			for _, h := range k.Hardware {
				for _, p := range h.Platforms {
					if pl, err := core.ParsePlatform(p); err != nil || pl == core.PlatformUnset {
						t.Errorf("%s %s: platform %q is not a platform's name", row.Name, k.Name, p)
					}
					platforms[p] = true
				}
			}
		}
	}
	if len(methods) < 5 || !platforms["cuda"] || !platforms["hip"] || !platforms["npu"] {
		t.Errorf("plugins --kernels --json: methods %v, platforms %v", methods, platforms)
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
		t.Skip("256 MiB round trip: skipped with -short")
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
		Backend: "fa3", Method: core.MLA, Dims: backendkit.Dims(cfg),
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
	faultScript(t, tree, "fault", "kernel_crash")
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
	o := defaultRunOptions()
	ctx := testContext(t)
	for i := range 3 {
		req := core.NewRequest("fault", core.ModeDecode)
		req.Batch.SeqLens = []int64{9, 4}
		seed := uint64(i)
		var a *runAnswer
		// Until the restart backoff has passed, the host decides and runs
		// the kernel without asking the plugin (its cached answers are not
		// served while it is down); run again until the plugin is asked.
		asked := pollUntil(ctx, func() bool {
			var err error
			if a, err = runRequest(ctx, reg, o, &req, &tensorSpec{Random: &seed}); err != nil {
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

// TestRunContextDeadline keeps runRequest honest about cancellation.
func TestRunContextDeadline(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := core.NewRequest("fa3", core.ModeDecode)
	req.Batch.SeqLens = []int64{4}
	seed := uint64(1)
	if _, err := runRequest(ctx, reg, defaultRunOptions(), &req, &tensorSpec{Random: &seed}); err == nil {
		t.Error("runRequest with a cancelled context: got nil error")
	}
}

// TestParseTensorSpec: the "tensors" object is read without decoding its
// arrays; each is counted, and every mistake names the field and value.
func TestParseTensorSpec(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		counts   map[string]int
		err      string
	}{
		{"seed", `{"random":7,"heads":2,"top_k":0}`, nil, ""},
		{"counts", `{"q_nope":[1, 2.5e3 ,-3],"q_pe":[],"c_kv":[ 0 ],"positions":[[1,2],{"a":[3,4]},"x,y"]}`,
			map[string]int{"q_nope": 3, "q_pe": 0, "c_kv": 1, "positions": 3}, ""},
		{"null_is_absent", `{"q_nope":null,"random":null}`, map[string]int{}, ""},
		{"negative_top_k", `{"random":1,"top_k":-5}`, nil, "tensors.top_k: -5 is negative (0 runs DSA layers dense)"},
		{"unknown", `{"q_rope":[1]}`, nil, "tensors.q_rope: unknown field"},
		{"twice", `{"heads":1,"heads":2}`, nil, "tensors.heads: given twice"},
		{"heads_string", `{"heads":"2"}`, nil, `tensors.heads: want an integer, got "2"`},
		{"heads_float", `{"heads":1.5}`, nil, "tensors.heads: want an integer, got 1.5"},
		{"seed_negative", `{"random":-1}`, nil, "tensors.random: want a seed from 0 to 2^64-1, got -1"},
		{"array_not_array", `{"q_nope":"abc"}`, nil, "tensors.q_nope: want an array of numbers, got a string"},
		{"not_object", `[1,2]`, nil, "tensors: want an object, got an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, spec, err := splitTensors([]byte(`{"backend":"fa3","tensors":` + tc.in + `}`))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, n := range tc.counts {
				if got := spec.arrays[name].n; got != n {
					t.Errorf("%s: counted %d elements, want %d", name, got, n)
				}
			}
			if len(spec.arrays) != len(tc.counts) {
				t.Errorf("arrays %v, want %v", spec.arrays, tc.counts)
			}
		})
	}
}

// TestInputsDecodeAfterTheCheck: inline arrays of the wrong length are
// refused with the counts; of the right length, decoded as encoding/json
// would; elements that are not numbers of the tensor's type are refused
// naming the index.
func TestInputsDecodeAfterTheCheck(t *testing.T) {
	cfg := kernels.Config{Heads: 1, KVLoraRank: 2, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 8}
	b := kernels.BatchShape{SeqLens: []int{2}, PrefixLens: []int{1}}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	want := map[string][]float32{}
	obj := map[string]any{}
	for _, f := range l.Fields() {
		if f.Int32 || f.Name == "out" {
			continue
		}
		v := make([]float32, f.Len)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
		}
		want[f.Name], obj[f.Name] = v, v
	}
	good, _ := json.Marshal(obj)
	_, spec, err := splitTensors([]byte(`{"tensors":` + string(good) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inputs(cfg, b, spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string][]float32{"q_nope": got.QNope, "q_pe": got.QPe, "c_kv": got.CKV, "k_pe": got.KPe, "w_kc": got.WKC, "w_vc": got.WVC} {
		if !slices.Equal(g, want[name]) {
			t.Errorf("%s: got %v, want %v", name, g, want[name])
		}
	}
	if !slices.Equal(got.Positions, []int32{1}) {
		t.Errorf("positions: got %v, want [1]", got.Positions)
	}
	for _, tc := range []struct{ change, err string }{
		{`"q_nope":[1,2,3]`, fmt.Sprintf("tensors.q_nope: has 3 elements, want %d (shape %v)", l.QNope.Len, l.QNope.Shape)},
		{`"q_nope":[1,"2"]`, `tensors.q_nope[1]: want a number, got a string`},
		{`"q_nope":[1,1e39]`, `tensors.q_nope[1]: 1e39 does not fit the tensor's type`},
		{`"positions":[1.5]`, `tensors.positions[0]: 1.5 does not fit the tensor's type`},
		{`"positions":[4294967296]`, `tensors.positions[0]: 4294967296 does not fit the tensor's type`},
		{`"topk_indices":[1]`, "tensors.topk_indices: has 1 elements, want 0 (shape [1 0])"},
	} {
		key, _, _ := strings.Cut(strings.Trim(tc.change, `"`), `"`)
		line := string(mustReplaceMember(t, good, key, tc.change))
		_, spec, err := splitTensors([]byte(`{"tensors":` + line + `}`))
		if err == nil {
			_, err = inputs(cfg, b, spec)
		}
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: got %v, want %q", tc.change, err, tc.err)
		}
	}
}

// mustReplaceMember returns the JSON object obj with its member key
// replaced by the text member.
func mustReplaceMember(t *testing.T, obj []byte, key, member string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, key)
	rest, _ := json.Marshal(m)
	return append([]byte("{"+member+","), rest[1:]...)
}

// TestRunChecksShapesBeforeDecoding sends attnplug run a 50 MB line with
// 10M q_nope values where the shape wants 16: the line is refused naming
// both counts, and the host's peak memory grows by little more than
// attnplug dispatch's does to read the same line and refuse it (decoding
// the arrays first took 461 MB).
func TestRunChecksShapesBeforeDecoding(t *testing.T) {
	const elems = 10 << 20
	var big bytes.Buffer
	big.WriteString(`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"q_nope":[`)
	big.WriteString(strings.Repeat("0.25,", elems-1))
	big.WriteString("0.25]}}\n")
	small := `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4]}` + "\n"
	// growth sends small, then the big line and small again, and returns
	// the answer to the big line and how much the peak RSS grew for it.
	growth := func(args ...string) (string, int) {
		h := startHost(t, bins, nil, args...)
		pid := h.cmd.Process.Pid
		if _, err := io.WriteString(h.stdin, small); err != nil {
			t.Fatal(err)
		}
		if _, err := h.stdout.ReadString('\n'); err != nil {
			t.Fatalf("%s: first answer: %v; stderr:\n%s", args[0], err, h.stderr)
		}
		before := vmKB(t, pid, "VmHWM")
		go func() {
			h.stdin.Write(big.Bytes())
			io.WriteString(h.stdin, small)
		}()
		answer, err := h.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: answer: %v; stderr:\n%s", args[0], err, h.stderr)
		}
		if _, err := h.stdout.ReadString('\n'); err != nil {
			t.Errorf("%s: no answer to the line after: %v", args[0], err)
		}
		after := vmKB(t, pid, "VmHWM")
		h.stdin.Close()
		h.wait()
		return answer, (after - before) << 10
	}
	answer, run := growth("run", "--random-tensors")
	if want := fmt.Sprintf("line 2: tensors.q_nope: has %d elements, want 16 (shape [1 2 8])", elems); !strings.Contains(answer, want) {
		t.Errorf("answer %s, want %q", answer, want)
	}
	answer, read := growth("dispatch", "--max-line-bytes", fmt.Sprint(64<<20))
	if want := `"tensors\": unknown field`; !strings.Contains(answer, want) {
		t.Errorf("dispatch answer %s, want %q", answer, want)
	}
	t.Logf("a %d MiB line: peak RSS grew %d MiB in run, %d MiB in dispatch", big.Len()>>20, run>>20, read>>20)
	if run > read+read/4+16<<20 {
		t.Errorf("run's peak RSS grew %d MiB, dispatch's %d MiB: more than reading the line takes", run>>20, read>>20)
	}
}

// TestRunDenseDSAPastTopKSaysSo: dsa_use_mha forcing dense attention on a
// DSA layer whose sequence is longer than the top-k is compared with
// dense attention, the math that ran, and the answer says the request is
// outside what sglang would choose and by how much dense differs from the
// layer's sparse attention; within the top-k it says nothing.
func TestRunDenseDSAPastTopKSaysSo(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	o := defaultRunOptions()
	o.topK = 8
	seed := uint64(9)
	for _, tc := range []struct {
		seq     int64
		outside bool
	}{{40, true}, {8, false}} {
		req := core.NewRequest("dsa", core.ModeExtend)
		req.Batch.ExtendPrefixLens, req.Batch.SeqLens, req.Batch.MaxChunkCapacity = []int64{0}, []int64{tc.seq}, 1<<17
		req.Layer.UseDSA = true
		req.Runtime.DSAUseMHA, req.Runtime.DSAUseMHASet = true, true
		a, err := runRequest(testContext(t), reg, o, &req, &tensorSpec{Random: &seed})
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

// TestRunDeviceCUDA: run --device cuda runs MLA decode and the MHA methods
// with the plugins' device code when a GPU and NVRTC are there, answering
// the device, the plan and an error within the bf16 tolerance; without
// them every line is answered on the CPU with a note that says why.
func TestRunDeviceCUDA(t *testing.T) {
	in := strings.Join([]string{
		`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[300,4000,17]}`,
		`{"backend":"flashinfer","forward_mode":"DECODE","seq_lens":[1000]}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[0,0],"seq_lens":[160,240],"max_chunk_capacity":131072}`,
		`{"backend":"fa3","forward_mode":"EXTEND","extend_prefix_lens":[9000,100],"seq_lens":[9200,300],"max_chunk_capacity":4096}`,
		`{"backend":"triton","forward_mode":"DECODE","seq_lens":[64]}`,
	}, "\n") + "\n"
	r := host(t, bins, in, "run", "--device", "cuda", "--heads", "16", "--page-size", "1", "--random-tensors", "--plugin-dir", bins.PluginDir)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr: %s\n%s", r.code, r.stderr, r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d answers, want 5:\n%s", len(lines), r.stdout)
	}
	for i, line := range lines {
		var a struct {
			Method, Kernel, Device, Plan, Note string
			Emulated                           bool    `json:"emulated"`
			RelError                           float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %s", i+1, err, line)
		}
		switch {
		case a.Device != "":
			if a.Emulated || a.Plan == "" || a.RelError > 1e-2 || a.RelError <= 0 {
				t.Errorf("answer %d on %s: %s", i+1, a.Device, line)
			}
		case i == 4: // triton: in process, no device code
			if !a.Emulated || !strings.Contains(a.Note, "not on the GPU") {
				t.Errorf("answer 5: %s", line)
			}
		default:
			if !a.Emulated || !strings.Contains(a.Note, "not on the GPU: no CUDA device") {
				t.Errorf("answer %d: want the CPU kernels and why not the GPU, got %s", i+1, line)
			}
		}
	}
}
