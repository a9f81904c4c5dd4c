package rules_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/intel_xpu/rules"
)

func TestDecideIntelXPU(t *testing.T) {
	tests := []rt.Case{
		{Name: "piecewise_graph_mla", Req: rt.Req(core.ModeExtend, rt.Piecewise, rt.Fresh), Want: core.MLA},
		{Name: "piecewise_graph_over_amx", Req: rt.Req(core.ModeDecode, rt.Piecewise, rt.AMXFused), Want: core.MLA},
		{Name: "prefill_cp_subtype", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "fresh_prefill_never_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "nil_lens_capacity_0_never_one_shot", Req: rt.Req(core.ModeExtend, rt.Capacity(0)), Want: core.MHAChunkedKV},
		{Name: "ragged_switch_ignored", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "ragged_switch_ignored_at_threshold", Req: rt.Req(core.ModeExtend, rt.NoRagged, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MHAChunkedKV},
		{Name: "prefix_at_threshold_chunked", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{4096, 4096}, []int64{5000, 5000})), Want: core.MHAChunkedKV},
		{Name: "prefix_below_threshold_mla", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8191}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_below_threshold_amx_subtype", Req: rt.Req(core.ModeExtend, rt.AMXFused, rt.Lens([]int64{8191}, []int64{9000})), Want: core.MLAFusedRoPECPU},
		{Name: "prefix_above_threshold_chunked_disabled_mla", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_0_chunked_disabled_chunked", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "deterministic_ignored", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "mixed_chunked", Req: rt.Req(core.ModeMixed, rt.Fresh), Want: core.MHAChunkedKV},
		{Name: "target_verify_mla", Req: rt.Req(core.ModeTargetVerify, rt.Fresh), Want: core.MLA},
		{Name: "draft_extend_v2_mla", Req: rt.Req(core.ModeDraftExtendV2, rt.Fresh), Want: core.MLA},
		{Name: "decode_mla", Req: rt.Req(core.ModeDecode), Want: core.MLA},
		{Name: "decode_amx_subtype", Req: rt.Req(core.ModeDecode, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "decode_hip_fused_subtype", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "idle_mla", Req: rt.Req(core.ModeIdle), Want: core.MLA},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideIntelXPU, "intel_xpu")
}

func TestNewDescribes(t *testing.T) {
	d := rt.Describe(t, rt.Backend(t, rules.New), "intel_xpu", rules.Version, "intel_xpu", "intel_amx")
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
				r.Backend = "intel_amx"
				got, err := b.Dispatch(ctx, &r)
				if want := core.TritonDecide(&r); err != nil || got != want {
					t.Fatalf("%s flags %b: got %v, %v, want %v (triton)", mode, mask, got, err, want)
				}
			}
		}
	}
	d := rt.Describe(t, rt.Backend(t, rules.New), "intel_xpu", rules.Version, "intel_xpu", "intel_amx")
	h, _ := d.Handler("intel_amx")
	if tr := core.TritonRule(); h.Reads.Facts != tr.Reads.Facts || !slices.Equal(h.Methods, tr.Methods) {
		t.Errorf("intel_amx: got reads %v methods %v, want triton's %v %v", h.Reads.Facts, h.Methods, tr.Reads.Facts, tr.Methods)
	}
}
