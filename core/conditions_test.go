package core_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestFactHolds checks Holds against the predicate each fact names, on
// random requests, for every fact that holds or not.
func TestFactHolds(t *testing.T) {
	preds := map[core.Fact]func(*core.Request) bool{
		core.FactPiecewiseCUDAGraph:         func(r *core.Request) bool { return r.Runtime.PiecewiseCUDAGraph },
		core.FactBreakableCUDAGraph:         func(r *core.Request) bool { return r.Runtime.BreakableCUDAGraph },
		core.FactDeterministicInference:     func(r *core.Request) bool { return r.Runtime.DeterministicInference },
		core.FactDSAUseMHA:                  func(r *core.Request) bool { return r.Runtime.DSAUseMHA },
		core.FactTwoBatchOverlap:            func(r *core.Request) bool { return r.Runtime.TwoBatchOverlap },
		core.FactMLAPrefillCP:               func(r *core.Request) bool { return r.Batch.MLAPrefillCP },
		core.FactDisableChunkedPrefixCache:  func(r *core.Request) bool { return r.Layer.DisableChunkedPrefixCache },
		core.FactFlashinferMLADisableRagged: func(r *core.Request) bool { return r.Layer.FlashinferMLADisableRagged },
		core.FactROCmFusedDecodeMLA:         func(r *core.Request) bool { return r.Layer.ROCmFusedDecodeMLA },
		core.FactUseDSA:                     func(r *core.Request) bool { return r.Layer.UseDSA },
		core.FactFusedQKVAProjWithMQA:       func(r *core.Request) bool { return r.Layer.FusedQKVAProjWithMQA },
		core.FactIntelAMX:                   func(r *core.Request) bool { return r.Layer.IntelAMX },
		core.FactPrefixSumZero:              func(r *core.Request) bool { return r.Batch.PrefixSum() == 0 },
		core.FactPrefixSumAtThreshold:       func(r *core.Request) bool { return r.Batch.PrefixSum() >= r.Layer.ChunkedPrefixCacheThreshold },
		core.FactSeqSumWithinCapacity:       func(r *core.Request) bool { return r.Batch.SeqSum() <= r.Batch.MaxChunkCapacity },
		core.FactDSAUseMHASet:               func(r *core.Request) bool { return r.Runtime.DSAUseMHAGiven() },
		core.FactDenseDSADevice:             func(r *core.Request) bool { return r.Runtime.DenseDSADevice() },
		core.FactKVCacheDenseDType:          func(r *core.Request) bool { return r.Runtime.KVCacheDenseDType() },
	}
	if len(preds) != len(core.AllFacts.Names())-2 {
		t.Fatalf("%d predicates for %d facts besides mode and platform", len(preds), len(core.AllFacts.Names())-2)
	}
	reqs := randomRequests(2000, 3)
	for f, pred := range preds {
		seen := map[bool]bool{}
		for i := range reqs {
			want := pred(&reqs[i])
			seen[want] = true
			if got := f.Holds(&reqs[i]); got != want {
				t.Fatalf("%s.Holds = %v, want %v", f, got, want)
			}
		}
		if len(seen) != 2 {
			t.Errorf("%s: the requests do not cover both sides", f)
		}
	}
	r := reqs[0]
	r.Runtime.PiecewiseCUDAGraph, r.Runtime.TwoBatchOverlap = true, false
	for _, tc := range []struct {
		f    core.Fact
		want bool
	}{
		{core.FactMode, false}, {core.FactPlatform, false}, {0, false}, {core.Fact(1) << 30, false},
		{core.FactPiecewiseCUDAGraph | core.FactTwoBatchOverlap, false},
		{core.FactPiecewiseCUDAGraph, true},
	} {
		if got := tc.f.Holds(&r); got != tc.want {
			t.Errorf("%s.Holds = %v, want %v", tc.f, got, tc.want)
		}
	}
}

// dsaReads are reads shaped like the dsa plugin's: a prefill choice of
// sums, maximum and device, unless the request gives dsa_use_mha.
func dsaReads() core.Reads {
	return core.Reads{
		Facts: core.FactDSAUseMHA | core.FactDSAUseMHASet | core.FactMode | core.FactPiecewiseCUDAGraph |
			core.FactDenseDSADevice | core.FactKVCacheDenseDType | core.FactSeqSumWithinCapacity,
		MaxSeqLenAtMost: []int64{2048},
		Conditions:      []core.ReadsCondition{{When: core.FactDSAUseMHASet, Reads: core.Reads{Facts: core.FactDSAUseMHA}}},
	}
}

// TestConditionKeys: where a condition holds, requests are keyed by its
// reads alone (and by which condition), so requests that agree on them
// share a key; elsewhere by the whole reads, as without conditions; no key
// is both; Select's plan gives Key's key by parts.
func TestConditionKeys(t *testing.T) {
	r := dsaReads()
	plan, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	whole := r
	whole.Conditions = nil
	wholePlan, err := whole.Plan()
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := (&core.Reads{Facts: core.FactDSAUseMHA}).Plan()
	if err != nil {
		t.Fatal(err)
	}
	byNarrow := map[core.Key]core.Key{} // narrow key -> key
	condKeys, otherKeys := map[core.Key]bool{}, map[core.Key]bool{}
	reqs := randomRequests(4000, 9)
	for i := range reqs {
		q := &reqs[i]
		k := plan.Key(q)
		sel := plan.Select(q)
		ps, ss := q.Batch.PrefixSum(), q.Batch.SeqSum()
		if parts := sel.BatchKey(q, ps, ss) | sel.LayerKey(&q.Layer, ps); parts != k {
			t.Fatalf("Select's BatchKey|LayerKey = %#x, Key = %#x", parts, k)
		}
		if k>>plan.Bits() != 0 {
			t.Fatalf("key %#x past the plan's %d bits", k, plan.Bits())
		}
		if !q.Runtime.DSAUseMHAGiven() {
			if sel != plan || k != wholePlan.Key(q) {
				t.Fatalf("condition false: key %#x, want the whole reads' %#x", k, wholePlan.Key(q))
			}
			otherKeys[k] = true
			continue
		}
		if sel == plan {
			t.Fatal("condition true: Select returned the whole plan")
		}
		nk := narrow.Key(q)
		if k0, ok := byNarrow[nk]; ok && k0 != k {
			t.Fatalf("condition true, same dsa_use_mha: keys %#x and %#x", k0, k)
		}
		byNarrow[nk] = k
		condKeys[k] = true
	}
	if len(condKeys) != 2 || len(otherKeys) < 8 {
		t.Fatalf("%d keys under the condition (want 2), %d without", len(condKeys), len(otherKeys))
	}
	for k := range condKeys {
		if otherKeys[k] {
			t.Errorf("key %#x is both a condition's and the whole reads'", k)
		}
	}
	if got, want := plan.String(), "; when dsa_use_mha_set: dsa_use_mha"; !strings.HasSuffix(got, want) {
		t.Errorf("String() = %q, want it to end in %q", got, want)
	}
	if got, want := r.Conditions[0].String(), "when dsa_use_mha_set: dsa_use_mha"; got != want {
		t.Errorf("ReadsCondition.String() = %q, want %q", got, want)
	}
}

// TestConditionOrder: the first condition that holds keys a request, and
// two conditions never share keys.
func TestConditionOrder(t *testing.T) {
	r := core.Reads{
		Facts: core.FactPiecewiseCUDAGraph | core.FactTwoBatchOverlap | core.FactMode,
		Conditions: []core.ReadsCondition{
			{When: core.FactPiecewiseCUDAGraph},
			{When: core.FactTwoBatchOverlap},
		},
	}
	plan, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	both := req(core.ModeDecode, piecewise, tbo)
	first := req(core.ModeExtend, piecewise)
	second := req(core.ModeExtend, tbo)
	neither := req(core.ModeExtend)
	if plan.Key(&both) != plan.Key(&first) {
		t.Errorf("both conditions hold: keyed %#x, want the first condition's %#x", plan.Key(&both), plan.Key(&first))
	}
	keys := map[core.Key]string{}
	for name, q := range map[string]*core.Request{"first": &first, "second": &second, "neither": &neither} {
		k := plan.Key(q)
		if o, ok := keys[k]; ok {
			t.Errorf("%s and %s share key %#x", name, o, k)
		}
		keys[k] = name
	}
}

// TestConditionValidate: each wrong condition is refused, naming it.
func TestConditionValidate(t *testing.T) {
	base := func(cs ...core.ReadsCondition) core.Reads {
		return core.Reads{Facts: core.FactMode | core.FactDSAUseMHA | core.FactUseDSA | core.FactSeqSumWithinCapacity | core.FactTwoBatchOverlap,
			PrefixSumAtLeast: []int64{1, 100}, Conditions: cs}
	}
	many := make([]core.ReadsCondition, core.MaxReadsConditions+1)
	for i := range many {
		many[i] = core.ReadsCondition{When: core.FactDSAUseMHA}
	}
	// 9 numbers of 40 thresholds and 2 flags: 56 bits, and the tag of a
	// condition one more.
	wide := core.Reads{Facts: core.FactDSAUseMHA | core.FactTwoBatchOverlap}
	for q := core.QuantityPrefixSum; q <= core.QuantityMaxChunkCapacity; q++ {
		at := make([]int64, 40)
		for i := range at {
			at[i] = int64(i)
		}
		wide.Quantities = append(wide.Quantities, core.Read{Quantity: q, At: at})
	}
	if err := wide.Validate(); err != nil {
		t.Fatalf("56 bits without a condition: %v", err)
	}
	wideNarrow := core.Reads{Quantities: wide.Quantities[:1]}
	wide.Conditions = []core.ReadsCondition{{When: core.FactDSAUseMHA, Reads: wideNarrow}}
	for _, tc := range []struct {
		name string
		r    core.Reads
		says string
	}{
		{"two_facts", base(core.ReadsCondition{When: core.FactDSAUseMHA | core.FactTwoBatchOverlap}), "read condition 0: when dsa_use_mha|two_batch_overlap: name exactly one fact"},
		{"no_fact", base(core.ReadsCondition{}), "read condition 0: when : name exactly one fact"},
		{"mode", base(core.ReadsCondition{When: core.FactMode}), "when mode: a condition is a fact of the batch or runtime"},
		{"layer_fact", base(core.ReadsCondition{When: core.FactUseDSA}), "when use_dsa: a condition is a fact of the batch or runtime"},
		{"unknown_fact", base(core.ReadsCondition{When: core.Fact(1) << 30}), "a condition is a fact of the batch or runtime"},
		{"nested", base(core.ReadsCondition{When: core.FactDSAUseMHA, Reads: core.Reads{Conditions: []core.ReadsCondition{{When: core.FactDSAUseMHA}}}}), "read condition 0 (when dsa_use_mha) holds conditions of its own"},
		{"when_not_declared", base(core.ReadsCondition{When: core.FactPiecewiseCUDAGraph}), "read condition 0 (when piecewise_cuda_graph): the reads it narrows must declare its fact, and do not declare piecewise_cuda_graph"},
		{"when_threshold_not_declared", base(core.ReadsCondition{When: core.FactDenseDSADevice}), "the reads it narrows must declare its fact, and do not declare compute_capability"},
		{"reads_more", base(core.ReadsCondition{When: core.FactDSAUseMHA, Reads: core.Reads{Facts: core.FactPlatform}}), "read condition 0 (when dsa_use_mha) reads platform, which the reads it narrows do not declare"},
		{"other_threshold", base(core.ReadsCondition{When: core.FactDSAUseMHA, Reads: core.Reads{PrefixSumAtLeast: []int64{50}}}), "reads prefix_sum at 50 (declared thresholds: [1 100]), which the reads it narrows do not declare"},
		{"invalid_reads", base(core.ReadsCondition{When: core.FactDSAUseMHA, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantitySeqSum}}}}), "read condition 0 (when dsa_use_mha): protocol violation: reads the number seq_sum without a threshold"},
		{"too_many", base(many...), "9 read conditions, more than 8"},
		{"key_too_long", wide, "the declared reads need a key of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if err == nil || !errors.Is(err, core.ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Validate() = %v, want ErrProtocol saying %q", err, tc.says)
			}
			if tc.r.Cacheable() {
				t.Error("Cacheable() with an invalid condition")
			}
		})
	}
	ok := base(
		core.ReadsCondition{When: core.FactDSAUseMHA},
		core.ReadsCondition{When: core.FactPrefixSumZero, Reads: core.Reads{Facts: core.FactUseDSA, PrefixSumAtLeast: []int64{100}}},
		core.ReadsCondition{When: core.FactSeqSumWithinCapacity, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantityPrefixSum, At: []int64{1}}}}},
	)
	if err := ok.Validate(); err != nil {
		t.Errorf("valid conditions refused: %v", err)
	}
}

// TestShorthandConditions: conditions said with facts and constants stay;
// one whose reads have no such form is left out, the rest kept.
func TestShorthandConditions(t *testing.T) {
	r := core.Reads{
		Quantities: []core.Read{
			{Quantity: core.QuantityDSAUseMHA}, {Quantity: core.QuantityDSAUseMHAGiven},
			{Quantity: core.QuantitySeqMax, At: []int64{2049}}, {Quantity: core.QuantityPiecewiseCUDAGraph},
		},
		Conditions: []core.ReadsCondition{
			{When: core.FactPiecewiseCUDAGraph, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantitySeqMax, At: []int64{2049}}}}},
			{When: core.FactDSAUseMHASet, Reads: core.Reads{Quantities: []core.Read{{Quantity: core.QuantityDSAUseMHA}}}},
		},
	}
	short, exact := r.Shorthand()
	if !exact {
		t.Fatalf("Shorthand: not exact: %v", short.Validate())
	}
	want := []core.ReadsCondition{
		{When: core.FactPiecewiseCUDAGraph, Reads: core.Reads{MaxSeqLenAtMost: []int64{2048}}},
		{When: core.FactDSAUseMHASet, Reads: core.Reads{Facts: core.FactDSAUseMHA}},
	}
	if !reflect.DeepEqual(short.Conditions, want) {
		t.Errorf("Shorthand conditions: got %+v, want %+v", short.Conditions, want)
	}
	r.Quantities = append(r.Quantities, core.Read{Quantity: core.QuantityComputeCapability, At: []int64{math.MaxInt64}})
	r.Conditions[0].Reads.Quantities = append(r.Conditions[0].Reads.Quantities, core.Read{Quantity: core.QuantityComputeCapability, At: []int64{math.MaxInt64}})
	if _, exact := r.Shorthand(); exact {
		t.Error("Shorthand of a compute capability read: exact")
	}
	r.Quantities = r.Quantities[:4]
	short, exact = r.Shorthand()
	if !exact || !reflect.DeepEqual(short.Conditions, want[1:]) {
		t.Errorf("a condition without a shorthand: exact %v, conditions %+v, want %+v", exact, short.Conditions, want[1:])
	}
}
