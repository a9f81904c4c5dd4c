package core_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestMLASubtype(t *testing.T) {
	tests := []struct {
		name string
		req  core.Request
		want core.Method
	}{
		{"hip_fused_decode_mla_decode", req(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"hip_fused_decode_mla_without_decode_extend", req(core.ModeExtend, hip, fusedDecode), core.MLA},
		{"hip_fused_decode_mla_without_decode_target_verify", req(core.ModeTargetVerify, hip, fusedDecode), core.MLA},
		{"hip_fused_decode_mla_without_decode_idle", req(core.ModeIdle, hip, fusedDecode), core.MLA},
		{"hip_decode_without_fused_decode_mla", req(core.ModeDecode, hip), core.MLA},
		{"hip_ignores_amx", req(core.ModeDecode, hip, amx, fusedQKV), core.MLA},
		{"hip_ignores_amx_extend", req(core.ModeExtend, hip, amx, fusedQKV), core.MLA},
		{"non_hip_amx_and_fused_qkv", req(core.ModeExtend, amx, fusedQKV), core.MLAFusedRoPECPU},
		{"non_hip_amx_and_fused_qkv_decode", req(core.ModeDecode, platform(core.PlatformCPU), amx, fusedQKV), core.MLAFusedRoPECPU},
		{"non_hip_amx_without_fused_qkv", req(core.ModeExtend, amx), core.MLA},
		{"non_hip_fused_qkv_without_amx", req(core.ModeExtend, fusedQKV), core.MLA},
		{"non_hip_ignores_rocm_fused_decode", req(core.ModeDecode, fusedDecode), core.MLA},
		{"unset_platform_is_not_hip", req(core.ModeDecode, platform(core.PlatformUnset), fusedDecode), core.MLA},
		{"unset_platform_amx_and_fused_qkv", req(core.ModeDecode, platform(core.PlatformUnset), amx, fusedQKV), core.MLAFusedRoPECPU},
		{"npu_plain", req(core.ModeDecode, platform(core.PlatformNPU)), core.MLA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.MLASubtype(&tt.req); got != tt.want {
				t.Errorf("MLASubtype: got %v, want %v", got, tt.want)
			}
		})
	}
	if got, want := core.MLASubtypeMethods(), []core.Method{core.MLA, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU}; !slices.Equal(got, want) {
		t.Errorf("MLASubtypeMethods(): got %v, want %v", got, want)
	}
}

// cprWant is the answer of each of the four ChunkedPrefixRule variants, in
// the order of cprVariants.
type cprWant [4]core.Method

var cprVariants = []struct {
	name string
	rule core.ChunkedPrefixRule
}{
	{"plain", core.ChunkedPrefixRule{}},
	{"one_shot", core.ChunkedPrefixRule{OneShot: true}},
	{"ragged_switch", core.ChunkedPrefixRule{RaggedSwitch: true}},
	{"one_shot_ragged_switch", core.ChunkedPrefixRule{OneShot: true, RaggedSwitch: true}},
}

func all(m core.Method) cprWant { return cprWant{m, m, m, m} }

// mhaPath is the MHA branch: MHA_CHUNKED_KV, or MHA_ONE_SHOT for the one-shot
// variants.
func mhaPath() cprWant {
	return cprWant{core.MHAChunkedKV, core.MHAOneShot, core.MHAChunkedKV, core.MHAOneShot}
}

func emptyLens(r *core.Request) {
	r.Batch.ExtendPrefixLens = []int64{}
	r.Batch.SeqLens = []int64{}
}

func TestChunkedPrefixRule(t *testing.T) {
	const big = 1 << 17
	tests := []struct {
		name string
		req  core.Request
		want cprWant
	}{
		// 1. piecewise CUDA graph comes first.
		{"piecewise_graph_first_over_prefill_cp", req(core.ModeExtend, piecewise, prefillCP, amx, fusedQKV, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"piecewise_graph_first_over_fresh_prefill", req(core.ModeExtend, piecewise, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"piecewise_graph_first_over_fused_decode", req(core.ModeDecode, piecewise, hip, fusedDecode), all(core.MLA)},
		{"piecewise_graph_first_over_disable_ragged", req(core.ModeExtend, piecewise, noRagged, amx, fusedQKV), all(core.MLA)},
		// 2. MLA prefill context parallelism: the subtype, whatever the prefix.
		{"prefill_cp_subtype_extend_prefix_0", req(core.ModeExtend, prefillCP, prefix(0), seq(100), capacity(big)), all(core.MLA)},
		{"prefill_cp_subtype_extend_nil_lens", req(core.ModeExtend, prefillCP), all(core.MLA)},
		{"prefill_cp_subtype_amx_fused", req(core.ModeExtend, prefillCP, amx, fusedQKV, prefix(0), seq(100), capacity(big)), all(core.MLAFusedRoPECPU)},
		{"prefill_cp_subtype_hip_fused_decode", req(core.ModeDecode, prefillCP, hip, fusedDecode), all(core.MLAFusedRoPEROCm)},
		{"prefill_cp_subtype_at_threshold", req(core.ModeExtend, prefillCP, prefix(8192), seq(9000), capacity(big)), all(core.MLA)},
		// 3. disable_ragged, honoured with RaggedSwitch only.
		{"disable_ragged_prefix_0", req(core.ModeExtend, noRagged, prefix(0), seq(100), capacity(big)),
			cprWant{core.MHAChunkedKV, core.MHAOneShot, core.MLA, core.MLA}},
		{"disable_ragged_at_threshold", req(core.ModeExtend, noRagged, prefix(8192), seq(9000), capacity(big)),
			cprWant{core.MHAChunkedKV, core.MHAOneShot, core.MLA, core.MLA}},
		{"disable_ragged_subtype_amx", req(core.ModeExtend, noRagged, amx, fusedQKV, prefix(0), seq(100), capacity(big)),
			cprWant{core.MHAChunkedKV, core.MHAOneShot, core.MLAFusedRoPECPU, core.MLAFusedRoPECPU}},
		{"disable_ragged_over_capacity", req(core.ModeExtend, noRagged, prefix(0), seq(101), capacity(100)),
			cprWant{core.MHAChunkedKV, core.MHAChunkedKV, core.MLA, core.MLA}},
		{"disable_ragged_decode", req(core.ModeDecode, noRagged), all(core.MLA)},
		// 4. extend without speculation: the prefix sum.
		{"extend_prefix_0", req(core.ModeExtend, prefix(0, 0), seq(100, 200), capacity(big)), mhaPath()},
		{"extend_prefix_exactly_at_threshold", req(core.ModeExtend, prefix(4096, 4096), seq(5000, 5000), capacity(big)), mhaPath()},
		{"extend_prefix_one_below_threshold", req(core.ModeExtend, prefix(4096, 4095), seq(5000, 5000), capacity(big)), all(core.MLA)},
		{"extend_prefix_one_below_threshold_amx", req(core.ModeExtend, amx, fusedQKV, prefix(8191), seq(9000), capacity(big)), all(core.MLAFusedRoPECPU)},
		{"extend_prefix_1", req(core.ModeExtend, prefix(1), seq(2), capacity(big)), all(core.MLA)},
		{"extend_prefix_above_threshold", req(core.ModeExtend, prefix(10000), seq(10001), capacity(big)), mhaPath()},
		{"extend_prefix_above_threshold_chunked_disabled", req(core.ModeExtend, noChunked, prefix(10000), seq(10001), capacity(big)), all(core.MLA)},
		{"extend_prefix_at_threshold_chunked_disabled", req(core.ModeExtend, noChunked, prefix(8192), seq(9000), capacity(big)), all(core.MLA)},
		{"extend_prefix_0_chunked_disabled", req(core.ModeExtend, noChunked, prefix(0), seq(10), capacity(big)), mhaPath()},
		{"extend_custom_threshold_equality", req(core.ModeExtend, threshold(100), prefix(60, 40), seq(100, 100), capacity(big)), mhaPath()},
		{"extend_custom_threshold_one_below", req(core.ModeExtend, threshold(101), prefix(60, 40), seq(100, 100), capacity(big)), all(core.MLA)},
		{"extend_threshold_0_any_prefix", req(core.ModeExtend, threshold(0), prefix(5), seq(10), capacity(big)), mhaPath()},
		// 5. one-shot: seq sum against the chunk capacity.
		{"one_shot_seq_sum_equals_capacity", req(core.ModeExtend, prefix(0, 0), seq(60, 40), capacity(100)), mhaPath()},
		{"one_shot_seq_sum_capacity_plus_1", req(core.ModeExtend, prefix(0, 0), seq(60, 41), capacity(100)), all(core.MHAChunkedKV)},
		{"one_shot_at_threshold_over_capacity", req(core.ModeExtend, prefix(8192), seq(8193), capacity(8192)), all(core.MHAChunkedKV)},
		{"one_shot_capacity_0_seq_0", req(core.ModeExtend, prefix(0), seq(0), capacity(0)), mhaPath()},
		// 6. absent lengths count as 0.
		{"nil_prefix_lens_count_as_0", req(core.ModeExtend, seq(10), capacity(100)), mhaPath()},
		{"nil_seq_lens_count_as_0", req(core.ModeExtend, prefix(0), capacity(0)), mhaPath()},
		{"nil_lens_both", req(core.ModeExtend), mhaPath()},
		{"empty_lens_count_as_0", req(core.ModeExtend, emptyLens), mhaPath()},
		{"nil_seq_lens_with_prefix_at_threshold", req(core.ModeExtend, prefix(8192)), mhaPath()},
		// 7. modes that take the else branch.
		{"target_verify_else", req(core.ModeTargetVerify, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"target_verify_else_hip_fused_not_decode", req(core.ModeTargetVerify, hip, fusedDecode, prefix(0)), all(core.MLA)},
		{"decode_else", req(core.ModeDecode, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"decode_else_hip_fused", req(core.ModeDecode, hip, fusedDecode, prefix(0)), all(core.MLAFusedRoPEROCm)},
		{"decode_else_amx", req(core.ModeDecode, amx, fusedQKV), all(core.MLAFusedRoPECPU)},
		{"idle_else", req(core.ModeIdle), all(core.MLA)},
		{"idle_else_amx", req(core.ModeIdle, amx, fusedQKV), all(core.MLAFusedRoPECPU)},
		{"prebuilt_else", req(core.ModePrebuilt, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"draft_extend_v2_else", req(core.ModeDraftExtendV2, prefix(0), seq(10), capacity(big)), all(core.MLA)},
		{"draft_extend_v2_else_at_threshold", req(core.ModeDraftExtendV2, prefix(8192), seq(9000), capacity(big)), all(core.MLA)},
		// 8. the other extend modes.
		{"mixed_is_extend", req(core.ModeMixed, prefix(0), seq(10), capacity(big)), mhaPath()},
		{"split_prefill_is_extend", req(core.ModeSplitPrefill, prefix(0), seq(10), capacity(big)), mhaPath()},
		{"dllm_extend_is_extend", req(core.ModeDLLMExtend, prefix(0), seq(10), capacity(big)), mhaPath()},
		{"mixed_below_threshold", req(core.ModeMixed, prefix(10), seq(20), capacity(big)), all(core.MLA)},
		// 9. facts no variant reads.
		{"ignores_breakable_graph_deterministic_dsa_tbo", req(core.ModeExtend, breakable, deterministic, dsaUseMHA, useDSA, tbo, prefix(0), seq(10), capacity(big)), mhaPath()},
	}
	for _, tt := range tests {
		for i, v := range cprVariants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				r := tt.req
				if got := v.rule.Decide(&r); got != tt.want[i] {
					t.Errorf("%+v.Decide: got %v, want %v", v.rule, got, tt.want[i])
				}
			})
		}
	}
}

func TestChunkedPrefixRuleDeclarations(t *testing.T) {
	base := core.MLASubtypeReads | core.FactPiecewiseCUDAGraph | core.FactMLAPrefillCP |
		core.FactDisableChunkedPrefixCache | core.FactPrefixSumZero | core.FactPrefixSumAtThreshold
	tests := []struct {
		name        string
		rule        core.ChunkedPrefixRule
		wantFacts   core.Fact
		wantMethods []core.Method
	}{
		{"plain", core.ChunkedPrefixRule{}, base,
			[]core.Method{core.MLA, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHAChunkedKV}},
		{"one_shot_reads_capacity", core.ChunkedPrefixRule{OneShot: true}, base | core.FactSeqSumWithinCapacity,
			[]core.Method{core.MLA, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHAChunkedKV, core.MHAOneShot}},
		{"ragged_switch_reads_disable_ragged", core.ChunkedPrefixRule{RaggedSwitch: true}, base | core.FactFlashinferMLADisableRagged,
			[]core.Method{core.MLA, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHAChunkedKV}},
		{"both", core.ChunkedPrefixRule{OneShot: true, RaggedSwitch: true}, base | core.FactSeqSumWithinCapacity | core.FactFlashinferMLADisableRagged,
			[]core.Method{core.MLA, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHAChunkedKV, core.MHAOneShot}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rule.Reads()
			if r.Facts != tt.wantFacts {
				t.Errorf("Reads().Facts: got %v, want %v", r.Facts, tt.wantFacts)
			}
			if len(r.PrefixSumAtLeast)+len(r.SeqSumAtMost) != 0 {
				t.Errorf("Reads(): got constants %v %v, want none", r.PrefixSumAtLeast, r.SeqSumAtMost)
			}
			if got := tt.rule.Methods(); !slices.Equal(got, tt.wantMethods) {
				t.Errorf("Methods(): got %v, want %v", got, tt.wantMethods)
			}
		})
	}
}

func TestTritonDecide(t *testing.T) {
	tests := []struct {
		name string
		req  core.Request
		want core.Method
	}{
		{"piecewise_graph_mla", req(core.ModeExtend, piecewise, prefix(0)), core.MLA},
		{"piecewise_graph_over_deterministic_fused_decode", req(core.ModeDecode, piecewise, deterministic, hip, fusedDecode), core.MLA},
		{"piecewise_graph_over_amx", req(core.ModeDecode, piecewise, amx, fusedQKV), core.MLA},
		{"deterministic_subtype_fresh_prefill", req(core.ModeExtend, deterministic, prefix(0), seq(10)), core.MLA},
		{"deterministic_subtype_hip_fused_decode", req(core.ModeDecode, deterministic, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"deterministic_subtype_amx_prefill", req(core.ModeExtend, deterministic, amx, fusedQKV, prefix(0)), core.MLAFusedRoPECPU},
		{"extend_prefix_0_mha", req(core.ModeExtend, prefix(0, 0), seq(10, 20)), core.MHA},
		{"extend_nil_lens_mha", req(core.ModeExtend), core.MHA},
		{"extend_empty_lens_mha", req(core.ModeExtend, emptyLens), core.MHA},
		{"extend_prefix_0_amx_still_mha", req(core.ModeExtend, amx, fusedQKV, prefix(0)), core.MHA},
		{"mixed_prefix_0_mha", req(core.ModeMixed, prefix(0)), core.MHA},
		{"split_prefill_prefix_0_mha", req(core.ModeSplitPrefill, prefix(0)), core.MHA},
		{"dllm_extend_prefix_0_mha", req(core.ModeDLLMExtend, prefix(0)), core.MHA},
		{"extend_prefix_positive_subtype", req(core.ModeExtend, prefix(0, 1), seq(10, 10)), core.MLA},
		{"extend_prefix_positive_subtype_amx", req(core.ModeExtend, amx, fusedQKV, prefix(5), seq(10)), core.MLAFusedRoPECPU},
		{"extend_prefix_at_threshold_ignored", req(core.ModeExtend, prefix(8192), seq(9000), capacity(1<<17)), core.MLA},
		{"target_verify_prefix_0_subtype", req(core.ModeTargetVerify, prefix(0)), core.MLA},
		{"decode_subtype", req(core.ModeDecode, prefix(0)), core.MLA},
		{"decode_hip_fused_subtype", req(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"idle_subtype", req(core.ModeIdle), core.MLA},
		{"prebuilt_subtype", req(core.ModePrebuilt), core.MLA},
		{"draft_extend_v2_subtype", req(core.ModeDraftExtendV2, prefix(0)), core.MLA},
		{"ignores_breakable_prefill_cp_ragged", req(core.ModeExtend, breakable, prefillCP, noRagged, noChunked, prefix(0)), core.MHA},
	}
	rule := core.TritonRule()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.TritonDecide(&tt.req); got != tt.want {
				t.Errorf("TritonDecide: got %v, want %v", got, tt.want)
			}
			if got := rule.Decide(&tt.req); got != tt.want {
				t.Errorf("TritonRule().Decide: got %v, want %v", got, tt.want)
			}
		})
	}
	if rule.Name != "triton" {
		t.Errorf("TritonRule().Name: got %q, want %q", rule.Name, "triton")
	}
}
