package rules_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/fa3/rules"
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
	deterministic opt = func(r *core.Request) { r.Runtime.DeterministicInference = true }
	prefillCP     opt = func(r *core.Request) { r.Batch.MLAPrefillCP = true }
	noRagged      opt = func(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true }
	noChunked     opt = func(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true }
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

func TestDecideFA3(t *testing.T) {
	fresh := lens([]int64{0, 0}, []int64{1024, 2048})
	tests := []struct {
		name string
		req  core.Request
		want core.Method
	}{
		// Deterministic inference comes before everything, piecewise graph included.
		{"deterministic_fresh_prefill_mla", mk(core.ModeExtend, deterministic, fresh), core.MLA},
		{"deterministic_fresh_prefill_amx_subtype", mk(core.ModeExtend, deterministic, fresh, amxFused), core.MLAFusedRoPECPU},
		{"deterministic_inside_piecewise_graph_subtype", mk(core.ModeDecode, deterministic, piecewise, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"deterministic_inside_piecewise_graph_amx_subtype", mk(core.ModeExtend, deterministic, piecewise, fresh, amxFused), core.MLAFusedRoPECPU},
		{"deterministic_at_threshold_mla", mk(core.ModeExtend, deterministic, lens([]int64{8192}, []int64{9000})), core.MLA},
		// Then the shared chunked-prefix rule with one-shot MHA.
		{"piecewise_graph_mla", mk(core.ModeDecode, piecewise, hip, fusedDecode), core.MLA},
		{"piecewise_graph_fresh_prefill_mla", mk(core.ModeExtend, piecewise, fresh), core.MLA},
		{"prefill_cp_subtype", mk(core.ModeExtend, prefillCP, fresh, amxFused), core.MLAFusedRoPECPU},
		{"prefill_cp_mla", mk(core.ModeExtend, prefillCP, fresh), core.MLA},
		{"fresh_prefill_one_shot", mk(core.ModeExtend, fresh), core.MHAOneShot},
		{"fresh_prefill_nil_lens_one_shot", mk(core.ModeExtend), core.MHAOneShot},
		{"fresh_prefill_seq_sum_equals_capacity_one_shot", mk(core.ModeExtend, fresh, capacity(3072)), core.MHAOneShot},
		{"fresh_prefill_over_capacity_chunked", mk(core.ModeExtend, fresh, capacity(3071)), core.MHAChunkedKV},
		{"disable_ragged_ignored", mk(core.ModeExtend, fresh, noRagged), core.MHAOneShot},
		{"prefix_at_threshold_one_shot", mk(core.ModeExtend, lens([]int64{8192}, []int64{9000})), core.MHAOneShot},
		{"prefix_below_threshold_mla", mk(core.ModeExtend, lens([]int64{8191}, []int64{9000})), core.MLA},
		{"prefix_above_threshold_chunked_disabled_mla", mk(core.ModeExtend, noChunked, lens([]int64{9000}, []int64{9000})), core.MLA},
		{"prefix_0_chunked_disabled_one_shot", mk(core.ModeExtend, noChunked, fresh), core.MHAOneShot},
		{"mixed_fresh_one_shot", mk(core.ModeMixed, fresh), core.MHAOneShot},
		{"target_verify_mla", mk(core.ModeTargetVerify, fresh), core.MLA},
		{"draft_extend_v2_mla", mk(core.ModeDraftExtendV2, fresh), core.MLA},
		{"decode_mla", mk(core.ModeDecode), core.MLA},
		{"decode_hip_fused_subtype", mk(core.ModeDecode, hip, fusedDecode), core.MLAFusedRoPEROCm},
		{"idle_amx_subtype", mk(core.ModeIdle, amxFused), core.MLAFusedRoPECPU},
	}
	ctx := testContext(t)
	b := backend(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req
			if got := rules.DecideFA3(&r); got != tt.want {
				t.Errorf("DecideFA3: got %v, want %v", got, tt.want)
			}
			r.Backend = "fa3"
			if got, err := b.Dispatch(ctx, &r); err != nil || got != tt.want {
				t.Errorf("Dispatch(fa3): got %v, %v, want %v, nil", got, err, tt.want)
			}
		})
	}
}

// TestDecideFA4 checks MHA_CHUNKED_KV for every mode and every flag.
func TestDecideFA4(t *testing.T) {
	flags := []opt{hip, fusedDecode, amxFused, piecewise, deterministic, prefillCP, noRagged, noChunked,
		func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true },
		func(r *core.Request) { r.Runtime.DSAUseMHA = true },
		func(r *core.Request) { r.Layer.UseDSA = true },
		func(r *core.Request) { r.Runtime.Platform = core.PlatformNPU },
		lens([]int64{0}, []int64{10}), lens([]int64{9000}, []int64{9000}), capacity(0)}
	ctx := testContext(t)
	b := backend(t)
	for _, mode := range core.ForwardModes() {
		t.Run(mode.String(), func(t *testing.T) {
			for i := -1; i < len(flags); i++ {
				r := mk(mode)
				if i >= 0 {
					flags[i](&r)
				}
				if got := rules.DecideFA4(&r); got != core.MHAChunkedKV {
					t.Errorf("DecideFA4 with flag %d: got %v, want MHA_CHUNKED_KV", i, got)
				}
			}
			all := mk(mode, flags...)
			all.Backend = "fa4"
			if got, err := b.Dispatch(ctx, &all); err != nil || got != core.MHAChunkedKV {
				t.Errorf("Dispatch(fa4) with every flag: got %v, %v, want MHA_CHUNKED_KV, nil", got, err)
			}
		})
	}
}

func TestNewDescribes(t *testing.T) {
	d, err := backend(t).Describe(testContext(t))
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
