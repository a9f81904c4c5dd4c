package rules_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/ascend/rules"
)

func TestDecideAscend(t *testing.T) {
	// Every flag the rules do not read, set at once.
	unread := []rt.Opt{rt.Piecewise, rt.Breakable, rt.Deterministic, rt.PrefillCP, rt.NoRagged, rt.NoChunked, rt.HIP, rt.FusedDecode, rt.AMXFused, rt.DSAUseMHA, rt.TBO,
		rt.Lens([]int64{9000}, []int64{9000})}
	tests := []rt.Case{
		{Name: "extend_mha_npu", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHANPU},
		{Name: "mixed_mha_npu", Req: rt.Req(core.ModeMixed), Want: core.MHANPU},
		{Name: "split_prefill_mha_npu", Req: rt.Req(core.ModeSplitPrefill), Want: core.MHANPU},
		{Name: "dllm_extend_mha_npu", Req: rt.Req(core.ModeDLLMExtend), Want: core.MHANPU},
		{Name: "extend_use_dsa_dsa_npu", Req: rt.Req(core.ModeExtend, rt.UseDSA), Want: core.DSANPU},
		{Name: "mixed_use_dsa_dsa_npu", Req: rt.Req(core.ModeMixed, rt.UseDSA), Want: core.DSANPU},
		{Name: "target_verify_mla_npu", Req: rt.Req(core.ModeTargetVerify), Want: core.MLANPU},
		{Name: "target_verify_use_dsa_dsa_npu", Req: rt.Req(core.ModeTargetVerify, rt.UseDSA), Want: core.DSANPU},
		{Name: "draft_extend_v2_mla_npu", Req: rt.Req(core.ModeDraftExtendV2), Want: core.MLANPU},
		{Name: "draft_extend_v2_use_dsa_dsa_npu", Req: rt.Req(core.ModeDraftExtendV2, rt.UseDSA), Want: core.DSANPU},
		{Name: "decode_mla_npu", Req: rt.Req(core.ModeDecode), Want: core.MLANPU},
		{Name: "decode_use_dsa_dsa_npu", Req: rt.Req(core.ModeDecode, rt.UseDSA), Want: core.DSANPU},
		{Name: "idle_mla_npu", Req: rt.Req(core.ModeIdle), Want: core.MLANPU},
		{Name: "prebuilt_mla_npu", Req: rt.Req(core.ModePrebuilt), Want: core.MLANPU},
		{Name: "prebuilt_use_dsa_dsa_npu", Req: rt.Req(core.ModePrebuilt, rt.UseDSA), Want: core.DSANPU},
		{Name: "extend_unread_flags_mha_npu", Req: rt.Req(core.ModeExtend, unread...), Want: core.MHANPU},
		{Name: "decode_unread_flags_mla_npu", Req: rt.Req(core.ModeDecode, unread...), Want: core.MLANPU},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideAscend, "ascend")
}

// TestDecideAscendEveryMode checks use_dsa gives DSA_NPU in both branches,
// for every mode.
func TestDecideAscendEveryMode(t *testing.T) {
	for _, mode := range core.ForwardModes() {
		r := rt.Req(mode, rt.UseDSA)
		if got := rules.DecideAscend(&r); got != core.DSANPU {
			t.Errorf("%s with use_dsa: got %v, want DSA_NPU", mode, got)
		}
		r = rt.Req(mode)
		want := core.MLANPU
		if mode.IsExtend() && mode != core.ModeTargetVerify {
			want = core.MHANPU
		}
		if got := rules.DecideAscend(&r); got != want {
			t.Errorf("%s: got %v, want %v", mode, got, want)
		}
	}
}

func TestNewDescribes(t *testing.T) {
	d := rt.Describe(t, rt.Backend(t, rules.New), "ascend", rules.Version, "ascend")
	h, _ := d.Handler("ascend")
	if want := []core.Method{core.MHANPU, core.MLANPU, core.DSANPU}; !slices.Equal(h.Methods, want) {
		t.Errorf("methods: got %v, want %v", h.Methods, want)
	}
	if want := core.FactMode | core.FactUseDSA; h.Reads.Facts != want {
		t.Errorf("reads: got %v, want %v", h.Reads.Facts, want)
	}
}
