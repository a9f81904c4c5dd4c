package rules_test

import (
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/fa3/rules"
)

func TestDecideFA3(t *testing.T) {
	tests := []rt.Case{
		// Deterministic inference comes before everything, piecewise graph included.
		{Name: "deterministic_fresh_prefill_mla", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Fresh), Want: core.MLA},
		{Name: "deterministic_fresh_prefill_amx_subtype", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "deterministic_inside_piecewise_graph_subtype", Req: rt.Req(core.ModeDecode, rt.Deterministic, rt.Piecewise, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "deterministic_inside_piecewise_graph_amx_subtype", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Piecewise, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "deterministic_at_threshold_mla", Req: rt.Req(core.ModeExtend, rt.Deterministic, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MLA},
		// Then the shared chunked-prefix rule with one-shot MHA.
		{Name: "piecewise_graph_mla", Req: rt.Req(core.ModeDecode, rt.Piecewise, rt.HIP, rt.FusedDecode), Want: core.MLA},
		{Name: "piecewise_graph_fresh_prefill_mla", Req: rt.Req(core.ModeExtend, rt.Piecewise, rt.Fresh), Want: core.MLA},
		{Name: "prefill_cp_subtype", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.Fresh, rt.AMXFused), Want: core.MLAFusedRoPECPU},
		{Name: "prefill_cp_mla", Req: rt.Req(core.ModeExtend, rt.PrefillCP, rt.Fresh), Want: core.MLA},
		{Name: "fresh_prefill_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MHAOneShot},
		{Name: "fresh_prefill_nil_lens_one_shot", Req: rt.Req(core.ModeExtend), Want: core.MHAOneShot},
		{Name: "fresh_prefill_seq_sum_equals_capacity_one_shot", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.Capacity(3072)), Want: core.MHAOneShot},
		{Name: "fresh_prefill_over_capacity_chunked", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.Capacity(3071)), Want: core.MHAChunkedKV},
		{Name: "disable_ragged_ignored", Req: rt.Req(core.ModeExtend, rt.Fresh, rt.NoRagged), Want: core.MHAOneShot},
		{Name: "prefix_at_threshold_one_shot", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8192}, []int64{9000})), Want: core.MHAOneShot},
		{Name: "prefix_below_threshold_mla", Req: rt.Req(core.ModeExtend, rt.Lens([]int64{8191}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_above_threshold_chunked_disabled_mla", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Lens([]int64{9000}, []int64{9000})), Want: core.MLA},
		{Name: "prefix_0_chunked_disabled_one_shot", Req: rt.Req(core.ModeExtend, rt.NoChunked, rt.Fresh), Want: core.MHAOneShot},
		{Name: "mixed_fresh_one_shot", Req: rt.Req(core.ModeMixed, rt.Fresh), Want: core.MHAOneShot},
		{Name: "target_verify_mla", Req: rt.Req(core.ModeTargetVerify, rt.Fresh), Want: core.MLA},
		{Name: "draft_extend_v2_mla", Req: rt.Req(core.ModeDraftExtendV2, rt.Fresh), Want: core.MLA},
		{Name: "decode_mla", Req: rt.Req(core.ModeDecode), Want: core.MLA},
		{Name: "decode_hip_fused_subtype", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLAFusedRoPEROCm},
		{Name: "idle_amx_subtype", Req: rt.Req(core.ModeIdle, rt.AMXFused), Want: core.MLAFusedRoPECPU},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideFA3, "fa3")
}

// TestDecideFA4 checks MHA_CHUNKED_KV for every mode and every flag.
func TestDecideFA4(t *testing.T) {
	flags := []rt.Opt{rt.HIP, rt.FusedDecode, rt.AMXFused, rt.Piecewise, rt.Deterministic, rt.PrefillCP, rt.NoRagged, rt.NoChunked,
		rt.Breakable, rt.DSAUseMHA, rt.UseDSA,
		func(r *core.Request) { r.Runtime.Platform = core.PlatformNPU },
		rt.Lens([]int64{0}, []int64{10}), rt.Lens([]int64{9000}, []int64{9000}), rt.Capacity(0)}
	ctx := rt.Context(t)
	b := rt.Backend(t, rules.New)
	for _, mode := range core.ForwardModes() {
		t.Run(mode.String(), func(t *testing.T) {
			for i := -1; i < len(flags); i++ {
				r := rt.Req(mode)
				if i >= 0 {
					flags[i](&r)
				}
				if got := rules.DecideFA4(&r); got != core.MHAChunkedKV {
					t.Errorf("DecideFA4 with flag %d: got %v, want MHA_CHUNKED_KV", i, got)
				}
			}
			all := rt.Req(mode, flags...)
			all.Backend = "fa4"
			if got, err := b.Dispatch(ctx, &all); err != nil || got != core.MHAChunkedKV {
				t.Errorf("Dispatch(fa4) with every flag: got %v, %v, want MHA_CHUNKED_KV, nil", got, err)
			}
		})
	}
}

func TestNewDescribes(t *testing.T) {
	d, err := rt.Backend(t, rules.New).Describe(rt.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "fa3" || d.Version != rules.Version {
		t.Errorf("Describe: got %q %q, want fa3 %s", d.Name, d.Version, rules.Version)
	}
	var names []string
	for _, h := range d.Handlers {
		names = append(names, h.Name)
		if h.AliasOf != "" || h.Deprecated != "" {
			t.Errorf("%s: got alias %q deprecated %q, want neither", h.Name, h.AliasOf, h.Deprecated)
		}
		if !h.Reads.Cacheable() {
			t.Errorf("%s: Reads not Cacheable", h.Name)
		}
	}
	if want := []string{"fa3", "fa4"}; !slices.Equal(names, want) {
		t.Errorf("handler names: got %v, want %v", names, want)
	}
	fa3, _ := d.Handler("fa3")
	if fa3.Reads.Facts&core.FactDeterministicInference == 0 || fa3.Reads.Facts&core.FactFlashinferMLADisableRagged != 0 {
		t.Errorf("fa3 reads: got %v, want deterministic_inference and no flashinfer_mla_disable_ragged", fa3.Reads.Facts)
	}
	if !slices.Contains(fa3.Methods, core.MHAOneShot) {
		t.Errorf("fa3 methods: got %v, want MHA_ONE_SHOT among them", fa3.Methods)
	}
	fa4, _ := d.Handler("fa4")
	if fa4.Reads.Facts != 0 || !slices.Equal(fa4.Methods, []core.Method{core.MHAChunkedKV}) {
		t.Errorf("fa4: got reads %v methods %v, want none and [MHA_CHUNKED_KV]", fa4.Reads.Facts, fa4.Methods)
	}
}
