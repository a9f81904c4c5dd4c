package rules_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/flashinfer/rules"
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

func TestFlashinferAndFlashMLA(t *testing.T) {
	decide := func(r *core.Request) core.Method {
		return core.ChunkedPrefixRule{OneShot: true, RaggedSwitch: true}.Decide(r)
	}
	tests := []testCase{
		{"piecewise_graph_mla", mk(core.ModeExtend, piecewise, fresh), core.MLA},
		{"piecewise_graph_over_fused_decode", mk(core.ModeDecode, piecewise, hip, fusedDecode), core.MLA},
		{"prefill_cp_subtype", mk(core.ModeExtend, prefillCP, fresh, amxFused), core.MLAFusedRoPECPU},
		{"ragged_switch_off_fresh_prefill_subtype", mk(core.ModeExtend, noRagged, fresh), core.MLA},
		{"ragged_switch_off_fresh_prefill_amx", mk(core.ModeExtend, noRagged, fresh, amxFused), core.MLAFusedRoPECPU},
		{"ragged_switch_off_at_threshold", mk(core.ModeExtend, noRagged, lens([]int64{8192}, []int64{9000})), core.MLA},
		{"fresh_prefill_one_shot", mk(core.ModeExtend, fresh), core.MHAOneShot},
		{"fresh_prefill_seq_sum_equals_capacity_one_shot", mk(core.ModeExtend, fresh, capacity(3072)), core.MHAOneShot},
		{"fresh_prefill_over_capacity_chunked", mk(core.ModeExtend, fresh, capacity(3071)), core.MHAChunkedKV},
		{"nil_lens_capacity_0_one_shot", mk(core.ModeExtend, capacity(0)), core.MHAOneShot},
		{"prefix_at_threshold_one_shot", mk(core.ModeExtend, lens([]int64{8192}, []int64{9000})), core.MHAOneShot},
		{"prefix_below_threshold_mla", mk(core.ModeExtend, lens([]int64{8191}, []int64{9000})), core.MLA},
		{"prefix_above_threshold_chunked_disabled_mla", mk(core.ModeExtend, noChunked, lens([]int64{9000}, []int64{9000})), core.MLA},
		{"prefix_0_chunked_disabled_one_shot", mk(core.ModeExtend, noChunked, fresh), core.MHAOneShot},
		{"deterministic_ignored", mk(core.ModeExtend, deterministic, fresh), core.MHAOneShot},
		{"target_verify_mla", mk(core.ModeTargetVerify, fresh), core.MLA},
		{"decode_hip_fused_subtype", mk(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"split_prefill_one_shot", mk(core.ModeSplitPrefill, fresh), core.MHAOneShot},
	}
	check(t, tests, decide, "flashinfer", "flashmla")
}

func TestCutlassMLA(t *testing.T) {
	decide := func(r *core.Request) core.Method { return core.ChunkedPrefixRule{}.Decide(r) }
	tests := []testCase{
		{"piecewise_graph_mla", mk(core.ModeExtend, piecewise, fresh), core.MLA},
		{"prefill_cp_subtype", mk(core.ModeDecode, prefillCP, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"fresh_prefill_never_one_shot", mk(core.ModeExtend, fresh), core.MHAChunkedKV},
		{"nil_lens_capacity_0_never_one_shot", mk(core.ModeExtend, capacity(0)), core.MHAChunkedKV},
		{"ragged_switch_ignored", mk(core.ModeExtend, noRagged, fresh), core.MHAChunkedKV},
		{"prefix_at_threshold_chunked", mk(core.ModeExtend, lens([]int64{8192}, []int64{9000})), core.MHAChunkedKV},
		{"prefix_below_threshold_mla", mk(core.ModeExtend, lens([]int64{8191}, []int64{9000})), core.MLA},
		{"prefix_above_threshold_chunked_disabled_subtype", mk(core.ModeExtend, noChunked, amxFused, lens([]int64{9000}, []int64{9000})), core.MLAFusedRoPECPU},
		{"decode_mla", mk(core.ModeDecode), core.MLA},
	}
	check(t, tests, decide, "cutlass_mla")
}

func TestTRTLLMMLAAndTokenspeedMLA(t *testing.T) {
	tests := []testCase{
		{"piecewise_graph_mla", mk(core.ModeExtend, piecewise, fresh), core.MLA},
		{"piecewise_graph_over_fused_decode", mk(core.ModeDecode, piecewise, hip, fusedDecode), core.MLA},
		{"fresh_prefill_chunked", mk(core.ModeExtend, fresh), core.MHAChunkedKV},
		{"fresh_prefill_never_one_shot", mk(core.ModeExtend, fresh, capacity(1<<40)), core.MHAChunkedKV},
		{"prefix_below_threshold_still_chunked", mk(core.ModeExtend, lens([]int64{1}, []int64{10})), core.MHAChunkedKV},
		{"chunked_disabled_prefix_positive_subtype", mk(core.ModeExtend, noChunked, lens([]int64{1}, []int64{10})), core.MLA},
		{"chunked_disabled_prefix_positive_amx_subtype", mk(core.ModeExtend, noChunked, amxFused, lens([]int64{9000}, []int64{9000})), core.MLAFusedRoPECPU},
		{"chunked_disabled_prefix_0_still_chunked", mk(core.ModeExtend, noChunked, fresh), core.MHAChunkedKV},
		{"chunked_disabled_nil_lens_still_chunked", mk(core.ModeExtend, noChunked), core.MHAChunkedKV},
		{"prefill_cp_not_checked", mk(core.ModeExtend, prefillCP, fresh), core.MHAChunkedKV},
		{"prefill_cp_not_checked_prefix_positive", mk(core.ModeExtend, prefillCP, amxFused, lens([]int64{9000}, []int64{9000})), core.MHAChunkedKV},
		{"ragged_switch_ignored", mk(core.ModeExtend, noRagged, fresh), core.MHAChunkedKV},
		{"deterministic_ignored", mk(core.ModeExtend, deterministic, fresh), core.MHAChunkedKV},
		{"mixed_chunked", mk(core.ModeMixed, fresh), core.MHAChunkedKV},
		{"dllm_extend_chunked", mk(core.ModeDLLMExtend, fresh), core.MHAChunkedKV},
		{"target_verify_subtype", mk(core.ModeTargetVerify, fresh), core.MLA},
		{"draft_extend_v2_subtype", mk(core.ModeDraftExtendV2, fresh), core.MLA},
		{"decode_mla", mk(core.ModeDecode), core.MLA},
		{"decode_hip_fused_subtype", mk(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"idle_amx_subtype", mk(core.ModeIdle, amxFused), core.MLAFusedRoPECPU},
	}
	check(t, tests, rules.DecideTRTLLMMLA, "trtllm_mla", "tokenspeed_mla")
}

// TestTokenspeedIsTRTLLM checks both names answer alike across every mode
// and flag.
func TestTokenspeedIsTRTLLM(t *testing.T) {
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
				r.Backend = "trtllm_mla"
				a, err1 := b.Dispatch(ctx, &r)
				r.Backend = "tokenspeed_mla"
				c, err2 := b.Dispatch(ctx, &r)
				if err1 != nil || err2 != nil || a != c {
					t.Fatalf("%s flags %b: trtllm_mla %v, %v; tokenspeed_mla %v, %v; want equal", mode, mask, a, err1, c, err2)
				}
			}
		}
	}
}

func TestNewDescribes(t *testing.T) {
	d := describe(t, "flashinfer", "flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "tokenspeed_mla")
	tests := []struct {
		name       string
		aliasOf    string
		oneShot    bool
		readRagged bool
	}{
		{"flashinfer", "", true, true},
		{"flashmla", "", true, true},
		{"cutlass_mla", "", false, false},
		{"trtllm_mla", "", false, false},
		{"tokenspeed_mla", "trtllm_mla", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := d.Handler(tt.name)
			if !ok {
				t.Fatalf("no handler %s", tt.name)
			}
			if h.AliasOf != tt.aliasOf || h.Deprecated != "" {
				t.Errorf("got alias %q deprecated %q, want alias %q and not deprecated", h.AliasOf, h.Deprecated, tt.aliasOf)
			}
			if got := slices.Contains(h.Methods, core.MHAOneShot); got != tt.oneShot {
				t.Errorf("MHA_ONE_SHOT declared: got %v, want %v", got, tt.oneShot)
			}
			if got := h.Reads.Facts&core.FactFlashinferMLADisableRagged != 0; got != tt.readRagged {
				t.Errorf("reads flashinfer_mla_disable_ragged: got %v, want %v", got, tt.readRagged)
			}
		})
	}
}
