package rules_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/hashicorp/go-hclog"
)

type opt func(*core.Request)

func mk(mode core.ForwardMode, opts ...opt) core.Request {
	r := core.NewRequest("", mode)
	r.Runtime.Platform = core.PlatformCUDA
	r.Batch.MaxChunkCapacity = 131072
	for _, o := range opts {
		o(&r)
	}
	return r
}

func lens(p, s []int64) opt {
	return func(r *core.Request) { r.Batch.ExtendPrefixLens, r.Batch.SeqLens = p, s }
}

func capacity(c int64) opt { return func(r *core.Request) { r.Batch.MaxChunkCapacity = c } }

var (
	hip           opt = func(r *core.Request) { r.Runtime.Platform = core.PlatformHIP }
	fusedDecode   opt = func(r *core.Request) { r.Layer.ROCmFusedDecodeMLA = true }
	amxFused      opt = func(r *core.Request) { r.Layer.IntelAMX, r.Layer.FusedQKVAProjWithMQA = true, true }
	piecewise     opt = func(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true }
	breakable     opt = func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true }
	deterministic opt = func(r *core.Request) { r.Runtime.DeterministicInference = true }
	prefillCP     opt = func(r *core.Request) { r.Batch.MLAPrefillCP = true }
	noRagged      opt = func(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true }
	noChunked     opt = func(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true }
	useDSA        opt = func(r *core.Request) { r.Layer.UseDSA = true }
	dsaUseMHA     opt = func(r *core.Request) { r.Runtime.DSAUseMHA = true }
	tbo           opt = func(r *core.Request) { r.Runtime.TwoBatchOverlap = true }
	fresh             = lens([]int64{0, 0}, []int64{1024, 2048})
)

func backend(t *testing.T) core.Backend {
	t.Helper()
	b, err := rules.New(hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type testCase struct {
	name string
	req  core.Request
	want core.Method
}

// check runs every case through decide and through the plugin's backend
// under each of names.
func check(t *testing.T, tests []testCase, decide func(*core.Request) core.Method, names ...string) {
	t.Helper()
	ctx := testContext(t)
	b := backend(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req
			if got := decide(&r); got != tt.want {
				t.Errorf("Decide: got %v, want %v", got, tt.want)
			}
			for _, name := range names {
				r.Backend = name
				if got, err := b.Dispatch(ctx, &r); err != nil || got != tt.want {
					t.Errorf("Dispatch(%s): got %v, %v, want %v, nil", name, got, err, tt.want)
				}
			}
		})
	}
}

// describe returns the plugin's description and checks its name, version,
// handler names and that every handler's Reads are cacheable.
func describe(t *testing.T, wantName string, wantHandlers ...string) *core.Description {
	t.Helper()
	d, err := backend(t).Describe(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != wantName || d.Version != rules.Version {
		t.Errorf("Describe: got %q %q, want %s %s", d.Name, d.Version, wantName, rules.Version)
	}
	var names []string
	for _, h := range d.Handlers {
		names = append(names, h.Name)
		if !h.Reads.Cacheable() {
			t.Errorf("%s: Reads not Cacheable", h.Name)
		}
		if len(h.Methods) == 0 {
			t.Errorf("%s: no methods declared", h.Name)
		}
	}
	if !slices.Equal(names, wantHandlers) {
		t.Errorf("handler names: got %v, want %v", names, wantHandlers)
	}
	return d
}

func TestDecideIntelXPU(t *testing.T) {
	tests := []testCase{
		{"piecewise_graph_mla", mk(core.ModeExtend, piecewise, fresh), core.MLA},
		{"piecewise_graph_over_amx", mk(core.ModeDecode, piecewise, amxFused), core.MLA},
		{"prefill_cp_subtype", mk(core.ModeExtend, prefillCP, fresh, amxFused), core.MLAFusedRoPECPU},
		{"fresh_prefill_never_one_shot", mk(core.ModeExtend, fresh), core.MHAChunkedKV},
		{"nil_lens_capacity_0_never_one_shot", mk(core.ModeExtend, capacity(0)), core.MHAChunkedKV},
		{"ragged_switch_ignored", mk(core.ModeExtend, noRagged, fresh), core.MHAChunkedKV},
		{"ragged_switch_ignored_at_threshold", mk(core.ModeExtend, noRagged, lens([]int64{8192}, []int64{9000})), core.MHAChunkedKV},
		{"prefix_at_threshold_chunked", mk(core.ModeExtend, lens([]int64{4096, 4096}, []int64{5000, 5000})), core.MHAChunkedKV},
		{"prefix_below_threshold_mla", mk(core.ModeExtend, lens([]int64{8191}, []int64{9000})), core.MLA},
		{"prefix_below_threshold_amx_subtype", mk(core.ModeExtend, amxFused, lens([]int64{8191}, []int64{9000})), core.MLAFusedRoPECPU},
		{"prefix_above_threshold_chunked_disabled_mla", mk(core.ModeExtend, noChunked, lens([]int64{9000}, []int64{9000})), core.MLA},
		{"prefix_0_chunked_disabled_chunked", mk(core.ModeExtend, noChunked, fresh), core.MHAChunkedKV},
		{"deterministic_ignored", mk(core.ModeExtend, deterministic, fresh), core.MHAChunkedKV},
		{"mixed_chunked", mk(core.ModeMixed, fresh), core.MHAChunkedKV},
		{"target_verify_mla", mk(core.ModeTargetVerify, fresh), core.MLA},
		{"draft_extend_v2_mla", mk(core.ModeDraftExtendV2, fresh), core.MLA},
		{"decode_mla", mk(core.ModeDecode), core.MLA},
		{"decode_amx_subtype", mk(core.ModeDecode, amxFused), core.MLAFusedRoPECPU},
		{"decode_hip_fused_subtype", mk(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"idle_mla", mk(core.ModeIdle), core.MLA},
	}
	check(t, tests, rules.DecideIntelXPU, "intel_xpu")
}

func TestNewDescribes(t *testing.T) {
	d := describe(t, "intel_xpu", "intel_xpu", "intel_amx")
	h, _ := d.Handler("intel_xpu")
	if slices.Contains(h.Methods, core.MHAOneShot) {
		t.Errorf("methods: got %v, want no MHA_ONE_SHOT", h.Methods)
	}
	if h.Reads.Facts&(core.FactFlashinferMLADisableRagged|core.FactSeqSumWithinCapacity) != 0 {
		t.Errorf("reads: got %v, want neither the ragged switch nor the capacity", h.Reads.Facts)
	}
}

// TestIntelAMXIsTriton checks the intel_amx name answers as the triton
// rules, for every mode and flag.
func TestIntelAMXIsTriton(t *testing.T) {
	ctx := testContext(t)
	b := backend(t)
	flags := []opt{hip, fusedDecode, amxFused, piecewise, breakable, deterministic, prefillCP, noRagged, noChunked}
	for _, mode := range core.ForwardModes() {
		for mask := 0; mask < 1<<len(flags); mask++ {
			for _, l := range []opt{fresh, lens(nil, nil), lens([]int64{5}, []int64{10})} {
				r := mk(mode, l)
				for i, f := range flags {
					if mask&(1<<i) != 0 {
						f(&r)
					}
				}
				r.Backend = "intel_amx"
				got, err := b.Dispatch(ctx, &r)
				if want := core.TritonDecide(&r); err != nil || got != want {
					t.Fatalf("%s flags %b: got %v, %v, want %v (triton)", mode, mask, got, err, want)
				}
			}
		}
	}
	d := describe(t, "intel_xpu", "intel_xpu", "intel_amx")
	h, _ := d.Handler("intel_amx")
	if tr := core.TritonRule(); h.Reads.Facts != tr.Reads.Facts || !slices.Equal(h.Methods, tr.Methods) {
		t.Errorf("intel_amx: got reads %v methods %v, want triton's %v %v", h.Reads.Facts, h.Methods, tr.Reads.Facts, tr.Methods)
	}
}
