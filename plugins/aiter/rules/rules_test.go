package rules_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/aiter/rules"
)

func TestDecideAiter(t *testing.T) {
	huge := rt.Lens([]int64{1 << 40}, []int64{1 << 40})
	tests := []rt.Case{
		{Name: "piecewise_graph_mha_on_decode", Req: rt.Req(core.ModeDecode, rt.Piecewise), Want: core.MHA},
		{Name: "piecewise_graph_mha_on_extend", Req: rt.Req(core.ModeExtend, rt.Piecewise, huge), Want: core.MHA},
		{Name: "breakable_graph_mha_on_decode", Req: rt.Req(core.ModeDecode, rt.Breakable), Want: core.MHA},
		{Name: "breakable_graph_mha_on_target_verify", Req: rt.Req(core.ModeTargetVerify, rt.Breakable), Want: core.MHA},
		{Name: "breakable_graph_mha_on_idle", Req: rt.Req(core.ModeIdle, rt.Breakable, rt.HIP, rt.FusedDecode), Want: core.MHA},
		{Name: "both_graphs_mha", Req: rt.Req(core.ModeDecode, rt.Piecewise, rt.Breakable), Want: core.MHA},
		{Name: "extend_fresh_mha", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHA},
		{Name: "extend_huge_prefix_still_mha", Req: rt.Req(core.ModeExtend, huge), Want: core.MHA},
		{Name: "extend_huge_prefix_chunked_disabled_still_mha", Req: rt.Req(core.ModeExtend, huge, rt.NoChunked), Want: core.MHA},
		{Name: "extend_nil_lens_mha", Req: rt.Req(core.ModeExtend), Want: core.MHA},
		{Name: "extend_prefill_cp_ignored", Req: rt.Req(core.ModeExtend, rt.PrefillCP, huge), Want: core.MHA},
		{Name: "extend_deterministic_ignored", Req: rt.Req(core.ModeExtend, rt.Deterministic, huge), Want: core.MHA},
		{Name: "mixed_mha", Req: rt.Req(core.ModeMixed, huge), Want: core.MHA},
		{Name: "split_prefill_mha", Req: rt.Req(core.ModeSplitPrefill, huge), Want: core.MHA},
		{Name: "dllm_extend_mha", Req: rt.Req(core.ModeDLLMExtend, huge), Want: core.MHA},
		{Name: "target_verify_mla", Req: rt.Req(core.ModeTargetVerify, rt.Fresh), Want: core.MLA},
		{Name: "draft_extend_v2_mla", Req: rt.Req(core.ModeDraftExtendV2, rt.Fresh), Want: core.MLA},
		{Name: "decode_mla", Req: rt.Req(core.ModeDecode), Want: core.MLA},
		{Name: "decode_hip_fused_never_fused_subtype", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLA},
		{Name: "decode_amx_never_fused_subtype", Req: rt.Req(core.ModeDecode, rt.AMXFused), Want: core.MLA},
		{Name: "idle_mla", Req: rt.Req(core.ModeIdle), Want: core.MLA},
		{Name: "prebuilt_mla", Req: rt.Req(core.ModePrebuilt), Want: core.MLA},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideAiter, "aiter")
}

func TestNewDescribes(t *testing.T) {
	d := rt.Describe(t, rt.Backend(t, rules.New), "aiter", rules.Version, "aiter")
	h, _ := d.Handler("aiter")
	if want := []core.Method{core.MHA, core.MLA}; !slices.Equal(h.Methods, want) {
		t.Errorf("methods: got %v, want %v", h.Methods, want)
	}
	if want := core.FactMode | core.FactPiecewiseCUDAGraph | core.FactBreakableCUDAGraph; h.Reads.Facts != want {
		t.Errorf("reads: got %v, want %v", h.Reads.Facts, want)
	}
}
