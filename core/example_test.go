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
