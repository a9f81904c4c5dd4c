package rules_test

import (
	"math/rand/v2"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/dsa/rules"
)

// eligible is an extend batch on which sglang's DSA backend chooses dense
// MHA: sm90, bf16 KV cache, every sequence at most 2048, the sum within the
// chunk capacity, no prefill context parallelism, outside CUDA graphs.
func eligible(opts ...func(*core.Request)) core.Request {
	r := core.NewRequest("dsa", core.ModeExtend)
	r.Batch.ExtendPrefixLens = []int64{0, 100}
	r.Batch.SeqLens = []int64{2048, 1000}
	r.Batch.MaxChunkCapacity = 3048
	r.Runtime.Platform = core.PlatformCUDA
	r.Runtime.ComputeCapability = 90
	r.Runtime.KVCacheDType = "bf16"
	for _, o := range opts {
		o(&r)
	}
	return r
}

// TestDSAPrefillChoice is the table of the DSA backend's own prefill
// choice (set_dsa_prefill_impl), when the request has no dsa_use_mha.
func TestDSAPrefillChoice(t *testing.T) {
	tests := []struct {
		name string
		req  core.Request
		want core.Method
	}{
		{"eligible_sm90_bf16", eligible(), core.MHAOneShot},
		{"sm100", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 100 }), core.MHAOneShot},
		{"sm103", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 103 }), core.MHAOneShot},
		{"sm109_edge", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 109 }), core.MHAOneShot},
		{"sm110_not_sm100_class", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 110 }), core.MLA},
		{"sm120", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 120 }), core.MLA},
		{"sm89", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 89 }), core.MLA},
		{"sm80", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 80 }), core.MLA},
		{"capability_unknown", eligible(func(r *core.Request) { r.Runtime.ComputeCapability = 0 }), core.MLA},
		{"fp8_e4m3", eligible(func(r *core.Request) { r.Runtime.KVCacheDType = "fp8_e4m3" }), core.MHAOneShot},
		{"auto_is_bf16", eligible(func(r *core.Request) { r.Runtime.KVCacheDType = "auto" }), core.MHAOneShot},
		{"dtype_absent_is_auto", eligible(func(r *core.Request) { r.Runtime.KVCacheDType = "" }), core.MHAOneShot},
		{"fp16_cache", eligible(func(r *core.Request) { r.Runtime.KVCacheDType = "fp16" }), core.MLA},
		{"fp8_e5m2_cache", eligible(func(r *core.Request) { r.Runtime.KVCacheDType = "fp8_e5m2" }), core.MLA},
		{"longest_2049", eligible(func(r *core.Request) { r.Batch.SeqLens = []int64{2049, 10}; r.Batch.ExtendPrefixLens = []int64{0, 0} }), core.MLA},
		{"max_not_sum", eligible(func(r *core.Request) {
			r.Batch.SeqLens, r.Batch.ExtendPrefixLens = []int64{2000, 2000, 2000}, []int64{0, 0, 0}
			r.Batch.MaxChunkCapacity = 6000
		}), core.MHAOneShot},
		{"sum_past_capacity", eligible(func(r *core.Request) { r.Batch.MaxChunkCapacity = 3047 }), core.MLA},
		{"prefill_cp", eligible(func(r *core.Request) { r.Batch.MLAPrefillCP = true }), core.MLA},
		{"piecewise_graph", eligible(func(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true }), core.MLA},
		{"breakable_graph", eligible(func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true }), core.MLA},
		{"decode", eligible(func(r *core.Request) { r.Batch.Mode = core.ModeDecode }), core.MLA},
		{"target_verify", eligible(func(r *core.Request) { r.Batch.Mode = core.ModeTargetVerify }), core.MLA},
		{"draft_extend_v2", eligible(func(r *core.Request) { r.Batch.Mode = core.ModeDraftExtendV2 }), core.MLA},
		{"mixed", eligible(func(r *core.Request) { r.Batch.Mode = core.ModeMixed }), core.MHAOneShot},
		{"given_false_wins", eligible(func(r *core.Request) { r.Runtime.DSAUseMHASet = true }), core.MLA},
		{"given_true_wins", eligible(func(r *core.Request) {
			r.Runtime.DSAUseMHA, r.Runtime.DSAUseMHASet = true, true
			r.Runtime.ComputeCapability = 80
		}), core.MHAOneShot},
		{"true_without_set_counts_as_given", eligible(func(r *core.Request) {
			r.Runtime.DSAUseMHA = true
			r.Batch.Mode = core.ModeDecode
		}), core.MHAOneShot},
	}
	b := rt.Backend(t, rules.New)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.req.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := rules.DecideDSA(&tt.req); got != tt.want {
				t.Errorf("DecideDSA: got %v, want %v", got, tt.want)
			}
			for _, name := range []string{"dsa", "nsa"} {
				r := tt.req
				r.Backend = name
				if got, err := b.Dispatch(t.Context(), &r); err != nil || got != tt.want {
					t.Errorf("Dispatch(%s): got %v, %v, want %v", name, got, err, tt.want)
				}
			}
		})
	}
}

func TestDSAPrefillThreshold(t *testing.T) {
	r := eligible()
	if got := rules.Decider(1000)(&r); got != core.MLA {
		t.Errorf("threshold 1000, longest 2048: got %v, want MLA", got)
	}
	if got := rules.Decider(4096)(&r); got != core.MHAOneShot {
		t.Errorf("threshold 4096: got %v, want MHA_ONE_SHOT", got)
	}
	env := func(v string) func(string) string { return func(string) string { return v } }
	if n, err := rules.ThresholdFromEnv(env("")); err != nil || n != rules.DefaultDenseKVLenThreshold {
		t.Errorf("unset: got %d, %v", n, err)
	}
	if n, err := rules.ThresholdFromEnv(env("4096")); err != nil || n != 4096 {
		t.Errorf("4096: got %d, %v", n, err)
	}
	for _, bad := range []string{"x", "-1", "1e3"} {
		if _, err := rules.ThresholdFromEnv(env(bad)); err == nil {
			t.Errorf("%q: got nil error", bad)
		}
	}
	reads := rules.ReadsAt(1000)
	if len(reads.MaxSeqLenAtMost) != 1 || reads.MaxSeqLenAtMost[0] != 1000 || !reads.Cacheable() {
		t.Errorf("ReadsAt(1000) = %+v", reads)
	}
}

// TestReadsCondition checks the condition of ReadsAt against the rule: on
// requests drawn over every mode, flag, device, dtype and length, a
// request that gives dsa_use_mha (dsa_use_mha_set, or dsa_use_mha true) is
// answered by dsa_use_mha alone, and the key plan gives all such requests
// one key per value of dsa_use_mha; requests that do not give it are keyed
// by the whole reads, and one key never holds two answers.
func TestReadsCondition(t *testing.T) {
	const threshold = 1000
	reads := rules.ReadsAt(threshold)
	plan, err := reads.Plan()
	if err != nil {
		t.Fatal(err)
	}
	decide := rules.Decider(threshold)
	reqs := rt.Random(rand.New(rand.NewPCG(5, 6)), rt.Domain{
		Names:       []string{"dsa"},
		Platforms:   []core.Platform{core.PlatformCUDA},
		ComputeCaps: []int{0, 80, 89, 90, 100, 103, 110, 120},
		KVDTypes:    append([]string{""}, core.KVCacheDTypes()...),
		Counts:      []int{0, 1, 2, 3, 4},
		Extends:     []int64{1, threshold / 2, threshold, 3 * threshold / 2, 2 * threshold},
	}, 20000)
	byKey := map[core.Key]core.Method{}
	givenKeys := map[bool]core.Key{}
	given, notGiven := 0, 0
	for _, r := range reqs {
		got, k := decide(&r), plan.Key(&r)
		if m, ok := byKey[k]; ok && m != got {
			t.Fatalf("key %#x holds %v and %v (%+v)", k, m, got, r.Runtime)
		}
		byKey[k] = got
		if !r.Runtime.DSAUseMHAGiven() {
			notGiven++
			continue
		}
		given++
		want := core.MLA
		if r.Runtime.DSAUseMHA {
			want = core.MHAOneShot
		}
		if got != want {
			t.Fatalf("dsa_use_mha %v given: got %v, want %v (%+v, %+v)", r.Runtime.DSAUseMHA, got, want, r.Batch, r.Runtime)
		}
		if k0, ok := givenKeys[r.Runtime.DSAUseMHA]; ok && k0 != k {
			t.Fatalf("dsa_use_mha %v given: keys %#x and %#x; the condition keys by dsa_use_mha alone", r.Runtime.DSAUseMHA, k0, k)
		}
		givenKeys[r.Runtime.DSAUseMHA] = k
	}
	if given < 1000 || notGiven < 1000 || len(givenKeys) != 2 {
		t.Errorf("%d requests give dsa_use_mha, %d do not, %d keys for them: the draw misses a side", given, notGiven, len(givenKeys))
	}
	if len(byKey) < 8 {
		t.Errorf("%d keys in all: the requests that do not give dsa_use_mha are keyed by the whole reads", len(byKey))
	}
}
