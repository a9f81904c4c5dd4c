package core

import "strings"

// Fact is one request fact that dispatch rules may read. A rule declares
// the facts it reads in its Reads; a host may then cache the rule's answers
// keyed by those facts alone.
//
// Adding a fact (or a field of Request it reads) touches, beside this
// file: request.go, jsonl/decode.go, wire/convert.go with
// wire/pluginv1/plugin.proto, engine/internal/convert/convert.go with
// api/dispatchv1/dispatch.proto, python/attnplug (client.py, sglang.py)
// and conformance/probe.go; docs/architecture.md ("Adding a request
// fact") names the tests that fail when one is missed.
type Fact uint32

// The facts. The comparisons are those the reference rules make.
const (
	// FactMode is the forward mode.
	FactMode Fact = 1 << iota
	// FactPlatform is the runtime platform.
	FactPlatform
	// FactPiecewiseCUDAGraph is runtime.piecewise_cuda_graph.
	FactPiecewiseCUDAGraph
	// FactBreakableCUDAGraph is runtime.breakable_cuda_graph.
	FactBreakableCUDAGraph
	// FactDeterministicInference is runtime.deterministic_inference.
	FactDeterministicInference
	// FactDSAUseMHA is runtime.dsa_use_mha.
	FactDSAUseMHA
	// FactTwoBatchOverlap is runtime.two_batch_overlap.
	FactTwoBatchOverlap
	// FactMLAPrefillCP is mla_prefill_cp.
	FactMLAPrefillCP
	// FactDisableChunkedPrefixCache is layer.disable_chunked_prefix_cache.
	FactDisableChunkedPrefixCache
	// FactFlashinferMLADisableRagged is layer.flashinfer_mla_disable_ragged.
	FactFlashinferMLADisableRagged
	// FactROCmFusedDecodeMLA is layer.rocm_fused_decode_mla.
	FactROCmFusedDecodeMLA
	// FactUseDSA is layer.use_dsa.
	FactUseDSA
	// FactFusedQKVAProjWithMQA is layer.fused_qkv_a_proj_with_mqa.
	FactFusedQKVAProjWithMQA
	// FactIntelAMX is layer.intel_amx.
	FactIntelAMX
	// FactPrefixSumZero is sum(extend_prefix_lens) == 0.
	FactPrefixSumZero
	// FactPrefixSumAtThreshold is sum(extend_prefix_lens) >=
	// layer.chunked_prefix_cache_threshold.
	FactPrefixSumAtThreshold
	// FactSeqSumWithinCapacity is sum(seq_lens) <= max_chunk_capacity.
	FactSeqSumWithinCapacity
	// FactDSAUseMHASet is whether runtime.dsa_use_mha was given at all
	// (Runtime.DSAUseMHAGiven).
	FactDSAUseMHASet
	// FactDenseDSADevice is runtime.compute_capability == 90 or in
	// [100, 110): the SM90 and SM100-class devices on which sglang's DSA
	// backend may run its prefill as dense MHA.
	FactDenseDSADevice
	// FactKVCacheDenseDType is runtime.kv_cache_dtype being bf16 or
	// fp8_e4m3 (Runtime.KVCacheDenseDType).
	FactKVCacheDenseDType

	factEnd
)

// AllFacts is every fact this version of core knows.
const AllFacts = factEnd - 1

var factNames = [...]string{
	"mode", "platform", "piecewise_cuda_graph", "breakable_cuda_graph",
	"deterministic_inference", "dsa_use_mha", "two_batch_overlap",
	"mla_prefill_cp", "disable_chunked_prefix_cache",
	"flashinfer_mla_disable_ragged", "rocm_fused_decode_mla", "use_dsa",
	"fused_qkv_a_proj_with_mqa", "intel_amx", "prefix_sum_zero",
	"prefix_sum_at_threshold", "seq_sum_within_capacity", "dsa_use_mha_set",
	"dense_dsa_device", "kv_cache_dense_dtype",
}

// String lists the facts of f by name, joined by "|".
func (f Fact) String() string {
	parts := f.Names()
	if rest := f &^ AllFacts; rest != 0 {
		parts = append(parts, "unknown")
	}
	return strings.Join(parts, "|")
}

// Names lists the names of the facts of f that this version of core
// knows, in bit order.
func (f Fact) Names() []string {
	var names []string
	for i, name := range factNames {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return names
}

// FactByName returns the fact called name, and whether there is one.
func FactByName(name string) (Fact, bool) {
	for i, n := range factNames {
		if n == name {
			return 1 << i, true
		}
	}
	return 0, false
}

// MaxConstantComparisons is the most constant thresholds Reads may hold in
// PrefixSumAtLeast, SeqSumAtMost and MaxSeqLenAtMost together.
const MaxConstantComparisons = 32

// Reads declares what a rule reads. Each fact of Facts, and each constant of
// the three older constant fields, is a shorthand for a declaration of
// Quantities (Fact.Reads, Declarations): a host keys answers by the
// declarations alone, so a rule must never read more than they say.
type Reads struct {
	// Facts is the set of facts read.
	Facts Fact
	// PrefixSumAtLeast holds constants c for which the rule reads
	// sum(extend_prefix_lens) >= c.
	PrefixSumAtLeast []int64
	// SeqSumAtMost holds constants c for which the rule reads
	// sum(seq_lens) <= c.
	SeqSumAtMost []int64
	// MaxSeqLenAtMost holds constants c for which the rule reads
	// max(seq_lens) <= c (0 when the lengths are not known).
	MaxSeqLenAtMost []int64
	// Quantities declares the quantities read beyond the facts: each
	// number with the thresholds it is compared to, each value and flag.
	// A plugin older than this field declares none.
	Quantities []Read
	// Conditions narrow the reads in the requests where a fact holds: in
	// a request where the When of a condition holds, the rule reads that
	// condition's Reads alone (ReadsCondition). A host keys such a request
	// by the first condition that holds and its reads (KeyPlan.Select).
	// The fields above still declare everything the rule may read in any
	// request, so a host that ignores Conditions stays correct. A plugin
	// older than this field declares none.
	Conditions []ReadsCondition
}

// Cacheable reports whether a host can key answers by r: Validate finds
// nothing wrong.
func (r Reads) Cacheable() bool { return r.Validate() == nil }

// Key identifies a class of requests that a rule cannot tell apart: two
// requests with the same Key under the same Reads get the same answer. A
// key uses at most KeyBits bits.
type Key uint64

// Key returns req's key under r. It builds r's KeyPlan at every call; a
// host that keys many requests builds the plan once (Plan) and keys with
// it, without allocating.
func (r *Reads) Key(req *Request) Key { return r.plan().Key(req) }

// KeyWithSums is Key with the batch's sums given: prefixSum must be
// req.Batch.PrefixSum() and seqSum req.Batch.SeqSum().
//
// Deprecated: use KeyPlan.BatchKey and KeyPlan.LayerKey.
func (r *Reads) KeyWithSums(req *Request, prefixSum, seqSum int64) Key {
	p := r.plan().Select(req)
	return p.BatchKey(req, prefixSum, seqSum) | p.LayerKey(&req.Layer, prefixSum)
}

// BatchKey is the part of KeyWithSums that does not depend on req.Layer,
// by the whole reads (KeyPlan.BatchKey).
//
// Deprecated: use KeyPlan.BatchKey.
func (r *Reads) BatchKey(req *Request, prefixSum, seqSum int64) Key {
	return r.plan().BatchKey(req, prefixSum, seqSum)
}

// LayerKey is the part of KeyWithSums that depends on the layer.
//
// Deprecated: use KeyPlan.LayerKey.
func (r *Reads) LayerKey(l *Layer, prefixSum int64) Key { return r.plan().LayerKey(l, prefixSum) }
