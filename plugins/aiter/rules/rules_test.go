package rules_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/aiter/rules"
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

func TestDecideAiter(t *testing.T) {
	huge := lens([]int64{1 << 40}, []int64{1 << 40})
	tests := []testCase{
		{"piecewise_graph_mha_on_decode", mk(core.ModeDecode, piecewise), core.MHA},
		{"piecewise_graph_mha_on_extend", mk(core.ModeExtend, piecewise, huge), core.MHA},
		{"breakable_graph_mha_on_decode", mk(core.ModeDecode, breakable), core.MHA},
		{"breakable_graph_mha_on_target_verify", mk(core.ModeTargetVerify, breakable), core.MHA},
		{"breakable_graph_mha_on_idle", mk(core.ModeIdle, breakable, hip, fusedDecode), core.MHA},
		{"both_graphs_mha", mk(core.ModeDecode, piecewise, breakable), core.MHA},
		{"extend_fresh_mha", mk(core.ModeExtend, fresh), core.MHA},
		{"extend_huge_prefix_still_mha", mk(core.ModeExtend, huge), core.MHA},
		{"extend_huge_prefix_chunked_disabled_still_mha", mk(core.ModeExtend, huge, noChunked), core.MHA},
		{"extend_nil_lens_mha", mk(core.ModeExtend), core.MHA},
		{"extend_prefill_cp_ignored", mk(core.ModeExtend, prefillCP, huge), core.MHA},
		{"extend_deterministic_ignored", mk(core.ModeExtend, deterministic, huge), core.MHA},
		{"mixed_mha", mk(core.ModeMixed, huge), core.MHA},
		{"split_prefill_mha", mk(core.ModeSplitPrefill, huge), core.MHA},
		{"dllm_extend_mha", mk(core.ModeDLLMExtend, huge), core.MHA},
		{"target_verify_mla", mk(core.ModeTargetVerify, fresh), core.MLA},
		{"draft_extend_v2_mla", mk(core.ModeDraftExtendV2, fresh), core.MLA},
		{"decode_mla", mk(core.ModeDecode), core.MLA},
		{"decode_hip_fused_never_fused_subtype", mk(core.ModeDecode, hip, fusedDecode), core.MLA},
		{"decode_amx_never_fused_subtype", mk(core.ModeDecode, amxFused), core.MLA},
		{"idle_mla", mk(core.ModeIdle), core.MLA},
		{"prebuilt_mla", mk(core.ModePrebuilt), core.MLA},
	}
	check(t, tests, rules.DecideAiter, "aiter")
}

func TestNewDescribes(t *testing.T) {
	d := describe(t, "aiter", "aiter")
	h, _ := d.Handler("aiter")
	if want := []core.Method{core.MHA, core.MLA}; !slices.Equal(h.Methods, want) {
		t.Errorf("methods: got %v, want %v", h.Methods, want)
	}
	if want := core.FactMode | core.FactPiecewiseCUDAGraph | core.FactBreakableCUDAGraph; h.Reads.Facts != want {
		t.Errorf("reads: got %v, want %v", h.Reads.Facts, want)
	}
}
