package core_test

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

var factNames = []struct {
	fact core.Fact
	name string
}{
	{core.FactMode, "mode"},
	{core.FactPlatform, "platform"},
	{core.FactPiecewiseCUDAGraph, "piecewise_cuda_graph"},
	{core.FactBreakableCUDAGraph, "breakable_cuda_graph"},
	{core.FactDeterministicInference, "deterministic_inference"},
	{core.FactDSAUseMHA, "dsa_use_mha"},
	{core.FactTwoBatchOverlap, "two_batch_overlap"},
	{core.FactMLAPrefillCP, "mla_prefill_cp"},
	{core.FactDisableChunkedPrefixCache, "disable_chunked_prefix_cache"},
	{core.FactFlashinferMLADisableRagged, "flashinfer_mla_disable_ragged"},
	{core.FactROCmFusedDecodeMLA, "rocm_fused_decode_mla"},
	{core.FactUseDSA, "use_dsa"},
	{core.FactFusedQKVAProjWithMQA, "fused_qkv_a_proj_with_mqa"},
	{core.FactIntelAMX, "intel_amx"},
	{core.FactPrefixSumZero, "prefix_sum_zero"},
	{core.FactPrefixSumAtThreshold, "prefix_sum_at_threshold"},
	{core.FactSeqSumWithinCapacity, "seq_sum_within_capacity"},
	{core.FactDSAUseMHASet, "dsa_use_mha_set"},
	{core.FactDenseDSADevice, "dense_dsa_device"},
	{core.FactKVCacheDenseDType, "kv_cache_dense_dtype"},
}

func TestFactString(t *testing.T) {
	var every []string
	var allFacts core.Fact
	for i, f := range factNames {
		if f.fact != 1<<i {
			t.Errorf("%s: got bit %#x, want %#x", f.name, uint32(f.fact), 1<<i)
		}
		if got := f.fact.String(); got != f.name {
			t.Errorf("Fact(%#x).String(): got %q, want %q", uint32(f.fact), got, f.name)
		}
		every = append(every, f.name)
		allFacts |= f.fact
	}
	if allFacts != core.AllFacts {
		t.Errorf("AllFacts: got %v, want %v", core.AllFacts, allFacts)
	}
	tests := []struct {
		name string
		fact core.Fact
		want string
	}{
		{"none", 0, ""},
		{"two_joined", core.FactMode | core.FactPlatform, "mode|platform"},
		{"order_by_bit", core.FactSeqSumWithinCapacity | core.FactMode, "mode|seq_sum_within_capacity"},
		{"unknown_bit", 1 << 31, "unknown"},
		{"known_and_unknown", core.FactUseDSA | 1<<20 | 1<<31, "use_dsa|unknown"},
		{"all", core.AllFacts, strings.Join(every, "|")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.fact.String(); got != tt.want {
				t.Errorf("String(): got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFactByName(t *testing.T) {
	for _, f := range factNames {
		got, ok := core.FactByName(f.name)
		if !ok || got != f.fact {
			t.Errorf("FactByName(%q): got %v, %v, want %v, true", f.name, got, ok, f.fact)
		}
	}
	for _, name := range []string{"", "unknown", "Mode", "mode|platform", "prefix_sum"} {
		if got, ok := core.FactByName(name); ok || got != 0 {
			t.Errorf("FactByName(%q): got %v, %v, want 0, false", name, got, ok)
		}
	}
}

func TestReadsCacheable(t *testing.T) {
	consts := func(n int) []int64 { return make([]int64, n) }
	tests := []struct {
		name  string
		reads core.Reads
		want  bool
	}{
		{"nothing", core.Reads{}, true},
		{"all_facts", core.Reads{Facts: core.AllFacts}, true},
		{"unknown_fact", core.Reads{Facts: core.FactMode | 1<<31}, false},
		{"first_bit_past_known", core.Reads{Facts: core.AllFacts + 1}, false},
		{"max_constants_prefix", core.Reads{PrefixSumAtLeast: consts(core.MaxConstantComparisons)}, true},
		{"max_constants_split", core.Reads{PrefixSumAtLeast: consts(16), SeqSumAtMost: consts(16)}, true},
		{"one_constant_too_many", core.Reads{PrefixSumAtLeast: consts(16), SeqSumAtMost: consts(17)}, false},
		{"too_many_seq_constants", core.Reads{SeqSumAtMost: consts(33)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.reads.Cacheable(); got != tt.want {
				t.Errorf("Cacheable(): got %v, want %v", got, tt.want)
			}
		})
	}
}

// factPairs gives, for every fact, two requests that differ in that fact
// alone.
func factPairs() []struct {
	fact core.Fact
	a, b core.Request
} {
	base := func(opts ...func(*core.Request)) core.Request {
		o := append([]func(*core.Request){prefix(100, 0), seq(200, 50), capacity(1000)}, opts...)
		return req(core.ModeExtend, o...)
	}
	return []struct {
		fact core.Fact
		a, b core.Request
	}{
		{core.FactMode, base(), base(func(r *core.Request) { r.Batch.Mode = core.ModeDecode })},
		{core.FactPlatform, base(), base(hip)},
		{core.FactPiecewiseCUDAGraph, base(), base(piecewise)},
		{core.FactBreakableCUDAGraph, base(), base(breakable)},
		{core.FactDeterministicInference, base(), base(deterministic)},
		// dsa_use_mha given in both, false against true.
		{core.FactDSAUseMHA, base(dsaSet), base(dsaSet, dsaUseMHA)},
		{core.FactTwoBatchOverlap, base(), base(tbo)},
		{core.FactMLAPrefillCP, base(), base(prefillCP)},
		{core.FactDisableChunkedPrefixCache, base(), base(noChunked)},
		{core.FactFlashinferMLADisableRagged, base(), base(noRagged)},
		{core.FactROCmFusedDecodeMLA, base(), base(fusedDecode)},
		{core.FactUseDSA, base(), base(useDSA)},
		{core.FactFusedQKVAProjWithMQA, base(), base(fusedQKV)},
		{core.FactIntelAMX, base(), base(amx)},
		// prefix sum 0 against 1: both below the threshold.
		{core.FactPrefixSumZero, base(prefix(0, 0)), base(prefix(0, 1))},
		// 8191 against 8192 at the default threshold of 8192 (equality).
		{core.FactPrefixSumAtThreshold, base(prefix(8191, 0), seq(9000, 0)), base(prefix(8191, 1), seq(9000, 1))},
		// 1000 against 1001 at a capacity of 1000 (equality).
		{core.FactSeqSumWithinCapacity, base(seq(900, 100)), base(seq(900, 101))},
		{core.FactDSAUseMHASet, base(), base(dsaSet)},
		// sm80 against sm90.
		{core.FactDenseDSADevice, base(cc(80)), base(cc(90))},
		// auto (bf16) against fp16.
		{core.FactKVCacheDenseDType, base(), base(kvDType("fp16"))},
	}
}

func TestReadsKeyPerFact(t *testing.T) {
	for _, p := range factPairs() {
		t.Run(p.fact.String(), func(t *testing.T) {
			if err := p.a.Validate(); err != nil {
				t.Fatalf("request a: %v", err)
			}
			if err := p.b.Validate(); err != nil {
				t.Fatalf("request b: %v", err)
			}
			reads := core.Reads{Facts: p.fact}
			if ka, kb := reads.Key(&p.a), reads.Key(&p.b); ka == kb {
				t.Errorf("reading only %v: got equal keys %#x, want different", p.fact, ka)
			}
			reads = core.Reads{Facts: core.AllFacts}
			if ka, kb := reads.Key(&p.a), reads.Key(&p.b); ka == kb {
				t.Errorf("reading all facts: got equal keys %#x, want different", ka)
			}
			reads = core.Reads{Facts: core.AllFacts &^ p.fact}
			if ka, kb := reads.Key(&p.a), reads.Key(&p.b); ka != kb {
				t.Errorf("reading all but %v: got keys %#x and %#x, want equal", p.fact, ka, kb)
			}
		})
	}
}

// TestReadsKeyDistinct checks that no two facts share a key bit: toggling
// each fact alone gives a different key under AllFacts.
func TestReadsKeyDistinct(t *testing.T) {
	reads := core.Reads{Facts: core.AllFacts}
	seen := map[core.Key]core.Fact{}
	for _, p := range factPairs() {
		d := reads.Key(&p.a) ^ reads.Key(&p.b)
		for other, f := range seen {
			if other&d != 0 {
				t.Errorf("%v and %v change the same key bits %#x", p.fact, f, other&d)
			}
		}
		seen[d] = p.fact
	}
}

func TestReadsKeyUnreadFacts(t *testing.T) {
	a := req(core.ModeExtend, prefix(0), seq(10), capacity(100))
	b := req(core.ModeDecode, hip, piecewise, breakable, deterministic, dsaUseMHA, tbo, prefillCP, noChunked,
		noRagged, fusedDecode, useDSA, fusedQKV, amx, prefix(9000), seq(9001), capacity(1), threshold(1))
	var none core.Reads
	if ka, kb := none.Key(&a), none.Key(&b); ka != 0 || kb != 0 {
		t.Errorf("Key with empty Reads: got %#x and %#x, want 0", ka, kb)
	}
	// A threshold change is read only through the prefix-at-threshold fact.
	c, d := req(core.ModeExtend, prefix(100), threshold(50)), req(core.ModeExtend, prefix(100), threshold(60))
	r := core.Reads{Facts: core.AllFacts}
	if kc, kd := r.Key(&c), r.Key(&d); kc != kd {
		t.Errorf("thresholds 50 and 60 below a prefix of 100: got keys %#x and %#x, want equal", kc, kd)
	}
	e := req(core.ModeExtend, prefix(100), threshold(101))
	if kc, ke := r.Key(&c), r.Key(&e); kc == ke {
		t.Errorf("thresholds 50 and 101 around a prefix of 100: got equal keys %#x, want different", kc)
	}
	// Lengths themselves are read only through sums and their comparisons.
	f, g := req(core.ModeExtend, prefix(1, 2), seq(5, 5), capacity(10)), req(core.ModeExtend, prefix(3), seq(10), capacity(10))
	if kf, kg := r.Key(&f), r.Key(&g); kf != kg {
		t.Errorf("equal sums, other lengths: got keys %#x and %#x, want equal", kf, kg)
	}
}

func TestReadsKeyConstants(t *testing.T) {
	tests := []struct {
		name      string
		reads     core.Reads
		a, b      core.Request
		wantEqual bool
	}{
		{"prefix_at_least_equality_vs_one_below", core.Reads{PrefixSumAtLeast: []int64{100}},
			req(core.ModeExtend, prefix(60, 40)), req(core.ModeExtend, prefix(60, 39)), false},
		{"prefix_at_least_equality_vs_above", core.Reads{PrefixSumAtLeast: []int64{100}},
			req(core.ModeExtend, prefix(100)), req(core.ModeExtend, prefix(5000)), true},
		{"prefix_at_least_nil_is_0", core.Reads{PrefixSumAtLeast: []int64{0}},
			req(core.ModeExtend), req(core.ModeExtend, prefix(0)), true},
		{"prefix_at_least_second_constant", core.Reads{PrefixSumAtLeast: []int64{10, 100}},
			req(core.ModeExtend, prefix(50)), req(core.ModeExtend, prefix(100)), false},
		{"prefix_at_least_between_same_side", core.Reads{PrefixSumAtLeast: []int64{10, 100}},
			req(core.ModeExtend, prefix(10)), req(core.ModeExtend, prefix(99)), true},
		{"seq_at_most_equality_vs_one_above", core.Reads{SeqSumAtMost: []int64{100}},
			req(core.ModeExtend, seq(50, 50)), req(core.ModeExtend, seq(50, 51)), false},
		{"seq_at_most_equality_vs_below", core.Reads{SeqSumAtMost: []int64{100}},
			req(core.ModeExtend, seq(100)), req(core.ModeExtend, seq(1)), true},
		{"seq_at_most_nil_is_0", core.Reads{SeqSumAtMost: []int64{0}},
			req(core.ModeExtend), req(core.ModeExtend, seq(1)), false},
		{"both_kinds_do_not_collide", core.Reads{PrefixSumAtLeast: []int64{100}, SeqSumAtMost: []int64{100}},
			req(core.ModeExtend, prefix(100), seq(200)), req(core.ModeExtend, prefix(0), seq(100)), false},
		{"constants_ignore_unread_facts", core.Reads{PrefixSumAtLeast: []int64{100}},
			req(core.ModeExtend, prefix(100)), req(core.ModeDecode, prefix(100), hip, amx), true},
		{"thirty_second_constant_counts", core.Reads{SeqSumAtMost: append(make([]int64, 31), 100)},
			req(core.ModeExtend, seq(100)), req(core.ModeExtend, seq(101)), false},
		{"max_seq_at_most_equality_vs_one_above", core.Reads{MaxSeqLenAtMost: []int64{2048}},
			req(core.ModeExtend, seq(2048, 10)), req(core.ModeExtend, seq(10, 2049)), false},
		{"max_seq_at_most_reads_max_not_sum", core.Reads{MaxSeqLenAtMost: []int64{2048}},
			req(core.ModeExtend, seq(2048, 2048)), req(core.ModeExtend, seq(1)), true},
		{"max_seq_after_other_constants", core.Reads{SeqSumAtMost: []int64{100}, MaxSeqLenAtMost: []int64{100}},
			req(core.ModeExtend, seq(100, 100)), req(core.ModeExtend, seq(101, 1)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := tt.reads.Key(&tt.a), tt.reads.Key(&tt.b)
			if (ka == kb) != tt.wantEqual {
				t.Errorf("keys %#x and %#x: got equal %v, want %v", ka, kb, ka == kb, tt.wantEqual)
			}
		})
	}
}

func TestKeyPlanDoesNotAllocate(t *testing.T) {
	r := core.Reads{Facts: core.AllFacts, PrefixSumAtLeast: []int64{1, 2}, SeqSumAtMost: []int64{3},
		Quantities: []core.Read{{Quantity: core.QuantitySeqMax, At: []int64{2048}}, {Quantity: core.QuantityPrefixCount, At: []int64{0, 2}}}}
	p, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	q := req(core.ModeExtend, prefix(1, 2, 3), seq(4, 5, 6), capacity(100))
	if n := testing.AllocsPerRun(100, func() { _ = p.Key(&q) }); n != 0 {
		t.Errorf("Key: got %v allocations, want 0", n)
	}
}
