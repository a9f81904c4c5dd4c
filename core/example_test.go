package core_test

import (
	"context"
	"fmt"

	"github.com/attnplug/attnplug/core"
)

func ExampleTritonDecide() {
	fresh := core.NewRequest("triton", core.ModeExtend)
	fresh.Batch.ExtendPrefixLens = []int64{0, 0}
	fmt.Println(core.TritonDecide(&fresh))

	cached := fresh
	cached.Batch.ExtendPrefixLens = []int64{0, 512}
	fmt.Println(core.TritonDecide(&cached))

	decode := core.NewRequest("triton", core.ModeDecode)
	decode.Runtime.Platform = core.PlatformHIP
	decode.Layer.ROCmFusedDecodeMLA = true
	fmt.Println(core.TritonDecide(&decode))
	// Output:
	// MHA
	// MLA
	// MLA_FUSED_ROPE_ROCM
}

func ExampleChunkedPrefixRule_Decide() {
	fa3 := core.ChunkedPrefixRule{OneShot: true}
	r := core.NewRequest("fa3", core.ModeExtend)
	r.Batch.ExtendPrefixLens = []int64{0, 8192}
	r.Batch.SeqLens = []int64{1024, 9216}
	r.Batch.MaxChunkCapacity = 131072
	fmt.Println(fa3.Decide(&r))

	r.Batch.MaxChunkCapacity = 8192
	fmt.Println(fa3.Decide(&r))

	r.Batch.ExtendPrefixLens = []int64{0, 8191}
	fmt.Println(fa3.Decide(&r))
	// Output:
	// MHA_ONE_SHOT
	// MHA_CHUNKED_KV
	// MLA
}

func ExampleMLASubtype() {
	r := core.NewRequest("cutlass_mla", core.ModeDecode)
	r.Layer.FusedQKVAProjWithMQA = true
	r.Layer.IntelAMX = true
	fmt.Println(core.MLASubtype(&r))
	// Output: MLA_FUSED_ROPE_CPU
}

func ExampleParseForwardMode() {
	m, err := core.ParseForwardMode("TARGET_VERIFY")
	fmt.Println(m, m.IsExtend(), m.IsExtendWithoutSpeculative(), err)

	_, err = core.ParseForwardMode("PREFILL")
	fmt.Println(err)
	// Output:
	// TARGET_VERIFY true false <nil>
	// unknown mode "PREFILL" (want one of EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2, PREBUILT, SPLIT_PREFILL, DLLM_EXTEND)
}

func ExampleParseMethod() {
	m, err := core.ParseMethod("MHA_ONE_SHOT")
	fmt.Println(m, int(m), err)
	// Output: MHA_ONE_SHOT 4 <nil>
}

func ExampleRequest_Validate() {
	r := core.NewRequest("fa3", core.ModeExtend)
	r.Batch.ExtendPrefixLens = []int64{0, 600}
	r.Batch.SeqLens = []int64{100, 500}
	fmt.Println(r.Validate())
	// Output: extend_prefix_lens[1]: prefix 600 is longer than seq_lens[1] = 500
}

func ExampleReads_Key() {
	reads := core.TritonRule().Reads
	a := core.NewRequest("triton", core.ModeExtend)
	a.Batch.ExtendPrefixLens = []int64{512}
	b := a
	b.Batch.ExtendPrefixLens = []int64{4096} // another non-zero prefix sum
	c := a
	c.Runtime.TwoBatchOverlap = true // a fact triton does not read
	fmt.Println(reads.Key(&a) == reads.Key(&b), reads.Key(&a) == reads.Key(&c), reads.Cacheable())
	// Output: true true true
}

func ExampleFact_String() {
	fmt.Println(core.FactMode | core.FactPrefixSumZero)
	f, ok := core.FactByName("use_dsa")
	fmt.Println(f == core.FactUseDSA, ok)
	// Output:
	// mode|prefix_sum_zero
	// true true
}

func ExampleNewRuleBackend() {
	b, err := core.NewRuleBackend("example", "1.0.0", nil, core.TritonRule())
	if err != nil {
		fmt.Println(err)
		return
	}
	r := core.NewRequest("triton", core.ModeDecode)
	m, err := b.Dispatch(context.Background(), &r)
	fmt.Println(m, err)

	r.Backend = "other"
	_, err = b.Dispatch(context.Background(), &r)
	fmt.Println(err)
	// Output:
	// MLA <nil>
	// example: unknown backend "other"
}

// A rule that reads the longest sequence against 2048 and the compute
// capability against 10.0 declares both with their thresholds; a key plan
// then puts requests on the same sides of both in one class.
func ExampleReads_Plan() {
	reads := core.Reads{Quantities: []core.Read{
		{Quantity: core.QuantitySeqMax, At: []int64{2049}},           // max(seq_lens) > 2048
		{Quantity: core.QuantityComputeCapability, At: []int64{100}}, // >= 10.0
	}}
	plan, err := reads.Plan()
	if err != nil {
		panic(err)
	}
	key := func(seqLens []int64, cc int) core.Key {
		r := core.NewRequest("acme", core.ModeDecode)
		r.Batch.SeqLens, r.Runtime.ComputeCapability = seqLens, cc
		return plan.Key(&r)
	}
	fmt.Println(plan, plan.Bits(), "bits")
	fmt.Println(key([]int64{100, 2048}, 90) == key([]int64{7}, 80))         // both short, both older
	fmt.Println(key([]int64{100, 2049}, 90) == key([]int64{100, 2048}, 90)) // 2049 is past 2048
	fmt.Println(key([]int64{4096}, 100) == key([]int64{3000}, 120))
	// Output:
	// compute_capability>=[100], seq_max>=[2049] 2 bits
	// true
	// false
	// true
}

func ExampleFact_Reads() {
	fmt.Println(core.FactPrefixSumAtThreshold.Reads())
	fmt.Println(core.FactDenseDSADevice.Reads())
	// Output:
	// [prefix_sum_past_threshold>=[0]]
	// [compute_capability>=[90 91 100 110]]
}
