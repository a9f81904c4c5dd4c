package rules_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/ascend/rules"
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

func TestDecideAscend(t *testing.T) {
	// Every flag the rules do not read, set at once.
	unread := []opt{piecewise, breakable, deterministic, prefillCP, noRagged, noChunked, hip, fusedDecode, amxFused, dsaUseMHA, tbo,
		lens([]int64{9000}, []int64{9000})}
	tests := []testCase{
		{"extend_mha_npu", mk(core.ModeExtend, fresh), core.MHANPU},
		{"mixed_mha_npu", mk(core.ModeMixed), core.MHANPU},
		{"split_prefill_mha_npu", mk(core.ModeSplitPrefill), core.MHANPU},
		{"dllm_extend_mha_npu", mk(core.ModeDLLMExtend), core.MHANPU},
		{"extend_use_dsa_dsa_npu", mk(core.ModeExtend, useDSA), core.DSANPU},
		{"mixed_use_dsa_dsa_npu", mk(core.ModeMixed, useDSA), core.DSANPU},
		{"target_verify_mla_npu", mk(core.ModeTargetVerify), core.MLANPU},
		{"target_verify_use_dsa_dsa_npu", mk(core.ModeTargetVerify, useDSA), core.DSANPU},
		{"draft_extend_v2_mla_npu", mk(core.ModeDraftExtendV2), core.MLANPU},
		{"draft_extend_v2_use_dsa_dsa_npu", mk(core.ModeDraftExtendV2, useDSA), core.DSANPU},
		{"decode_mla_npu", mk(core.ModeDecode), core.MLANPU},
		{"decode_use_dsa_dsa_npu", mk(core.ModeDecode, useDSA), core.DSANPU},
		{"idle_mla_npu", mk(core.ModeIdle), core.MLANPU},
		{"prebuilt_mla_npu", mk(core.ModePrebuilt), core.MLANPU},
		{"prebuilt_use_dsa_dsa_npu", mk(core.ModePrebuilt, useDSA), core.DSANPU},
		{"extend_unread_flags_mha_npu", mk(core.ModeExtend, unread...), core.MHANPU},
		{"decode_unread_flags_mla_npu", mk(core.ModeDecode, unread...), core.MLANPU},
	}
	check(t, tests, rules.DecideAscend, "ascend")
}

// TestDecideAscendEveryMode checks use_dsa gives DSA_NPU in both branches,
// for every mode.
func TestDecideAscendEveryMode(t *testing.T) {
	for _, mode := range core.ForwardModes() {
		r := mk(mode, useDSA)
		if got := rules.DecideAscend(&r); got != core.DSANPU {
			t.Errorf("%s with use_dsa: got %v, want DSA_NPU", mode, got)
		}
		r = mk(mode)
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
	d := describe(t, "ascend", "ascend")
	h, _ := d.Handler("ascend")
	if want := []core.Method{core.MHANPU, core.MLANPU, core.DSANPU}; !slices.Equal(h.Methods, want) {
		t.Errorf("methods: got %v, want %v", h.Methods, want)
	}
	if want := core.FactMode | core.FactUseDSA; h.Reads.Facts != want {
		t.Errorf("reads: got %v, want %v", h.Reads.Facts, want)
	}
}
