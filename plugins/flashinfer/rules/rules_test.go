package rules_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/flashinfer/rules"
)

func TestFlashinferAndFlashMLA(t *testing.T) {
	decide := func(r *core.Request) core.Method {
		return core.ChunkedPrefixRule{OneShot: true, RaggedSwitch: true}.Decide(r)
	}
	tests := []rt.Case{
		{Name: "piecewise_graph_mla", Req: rt.Req(core.ModeExtend, rt.Piecewise, rt.Fresh), Want: core.MLA},
		{Name: "piecewise_graph_over_fused_decode", Req: rt.Req(core.ModeDecode, rt.Piecewise, rt.HIP, rt.FusedDecode), Want: core.MLA},
		{Name: "prefill_cp_subtype", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "ragged_switch_off_fresh_prefill_subtype", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Fresh), Want: core.MLA},
		{Name: "ragged_switch_off_fresh_prefill_amx", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "ragged_switch_off_at_threshold", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MLA},
		{Name: "fresh_prefill_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHAOneShot},
		{Name: "fresh_prefill_seq_sum_equals_capacity_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.Capacity(3072)), Want: core.MHAOneShot},
		{Name: "fresh_prefill_over_capacity_chunked", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.Capacity(3071)), Want: core.MHAChunkedKV},
		{Name: "nil_lens_capacity_0_one_shot", Req: rt.Req(core.ModeExtend, rt.Capacity(0)), Want: core.MHAOneShot},
		{Name: "prefix_at_threshold_one_shot", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MHAOneShot},
		{Name: "prefix_below_threshold_mla", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8191}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_above_threshold_chunked_disabled_mla", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_0_chunked_disabled_one_shot", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Fresh), Want: core.MHAOneShot},
		{Name: "deterministic_ignored", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Fresh), Want: core.MHAOneShot},
		{Name: "target_verify_mla", Req: rt.Req(core.ModeTargetVerify, rt.Fresh), Want: core.MLA},
		{Name: "decode_hip_fused_subtype", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "split_prefill_one_shot", Req: rt.Req(core.ModeSplitPrefill, rt.Fresh), Want: core.MHAOneShot},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, decide, "flashinfer", "flashmla")
}

func TestCutlassMLA(t *testing.T) {
	decide := func(r *core.Request) core.Method { return core.ChunkedPrefixRule{}.Decide(r) }
	tests := []rt.Case{
		{Name: "piecewise_graph_mla", Req: rt.Req(core.ModeExtend, rt.Piecewise, rt.Fresh), Want: core.MLA},
		{Name: "prefill_cp_subtype", Req: rt.Req(core.ModeDecode, rt.PrefillCP, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "fresh_prefill_never_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "nil_lens_capacity_0_never_one_shot", Req: rt.Req(core.ModeExtend, rt.Capacity(0)), Want: core.MHAChunkedKV},
		{Name: "ragged_switch_ignored", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "prefix_at_threshold_chunked", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MHAChunkedKV},
		{Name: "prefix_below_threshold_mla", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8191}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_above_threshold_chunked_disabled_subtype", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.AMXFused, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MLAFusedRoPECPU},
		{Name: "decode_mla", Req: rt.Req(core.ModeDecode), Want: core.MLA},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, decide, "cutlass_mla")
}

func TestTRTLLMMLAAndTokenspeedMLA(t *testing.T) {
	tests := []rt.Case{
		{Name: "piecewise_graph_mla", Req: rt.Req(core.ModeExtend, rt.Piecewise, rt.Fresh), Want: core.MLA},
		{Name: "piecewise_graph_over_fused_decode", Req: rt.Req(core.ModeDecode, rt.Piecewise, rt.HIP, rt.FusedDecode), Want: core.MLA},
		{Name: "fresh_prefill_chunked", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "fresh_prefill_never_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.Capacity(1<<40)), Want: core.MHAChunkedKV},
		{Name: "prefix_below_threshold_still_chunked", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{1}, []int64{10})), Want: core.MHAChunkedKV},
		{Name: "chunked_disabled_prefix_positive_subtype", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Lens([]int64{1}, []int64{10})), Want: core.MLA},
		{Name: "chunked_disabled_prefix_positive_amx_subtype", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.AMXFused, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MLAFusedRoPECPU},
		{Name: "chunked_disabled_prefix_0_still_chunked", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "chunked_disabled_nil_lens_still_chunked", Req: rt.Req(core.ModeExtend, rt.NoChunked), Want: core.MHAChunkedKV},
		{Name: "prefill_cp_not_checked", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "prefill_cp_not_checked_prefix_positive", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.AMXFused, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MHAChunkedKV},
		{Name: "ragged_switch_ignored", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "deterministic_ignored", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "mixed_chunked", Req: rt.Req(core.ModeMixed, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "dllm_extend_chunked", Req: rt.Req(core.ModeDLLMExtend, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "target_verify_subtype", Req: rt.Req(core.ModeTargetVerify, rt.Fresh), Want: core.MLA},
		{Name: "draft_extend_v2_subtype", Req: rt.Req(core.ModeDraftExtendV2, rt.Fresh), Want: core.MLA},
		{Name: "decode_mla", Req: rt.Req(core.ModeDecode), Want: core.MLA},
		{Name: "decode_hip_fused_subtype", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "idle_amx_subtype", Req: rt.Req(core.ModeIdle, rt.AMXFused), Want: core.MLAFusedRoPECPU},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideTRTLLMMLA, "trtllm_mla", "tokenspeed_mla")
}

// TestTokenspeedIsTRTLLM checks both names answer alike across every mode
// and flag.
func TestTokenspeedIsTRTLLM(t *testing.T) {
	ctx := rt.Context(t)
	b := rt.Backend(t, rules.New)
	flags := []rt.Opt{rt.HIP, rt.FusedDecode, rt.AMXFused, rt.Piecewise, rt.Breakable, rt.Deterministic, rt.PrefillCP, rt.NoRagged, rt.NoChunked}
	for _, mode := range core.ForwardModes() {
		for mask := 0; mask < 1<<len(flags); mask++ {
			for _, l := range []rt.Opt{rt.Fresh, rt.Lens(nil, nil), rt.Lens([]int64{5}, []int64{10})} {
				r := rt.Req(mode, l)
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
	d := rt.Describe(t, rt.Backend(t, rules.New), "flashinfer", rules.Version, "flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "tokenspeed_mla")
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
