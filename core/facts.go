package core

import "strings"

// Fact is one request fact that dispatch rules may read. A rule declares
// the facts it reads in its Reads; a host may then cache the rule's answers
// keyed by those facts alone.
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

// Reads declares what a rule reads: a set of facts, and comparisons of the
// batch's sums against constants of the rule's own (a vendor threshold).
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
}

// Cacheable reports whether a host can key answers by r: every fact is
// known to this core and the constants fit in a Key.
func (r Reads) Cacheable() bool {
	return r.Facts&^AllFacts == 0 && len(r.PrefixSumAtLeast)+len(r.SeqSumAtMost)+len(r.MaxSeqLenAtMost) <= MaxConstantComparisons
}

// Key identifies a class of requests that a rule cannot tell apart: two
// requests with the same Key under the same Reads get the same answer.
type Key uint64

// Key layout: bits 0-3 the mode, 4-6 the platform, 7-27 the boolean facts
// (one per Fact bit from FactPiecewiseCUDAGraph on), 28-59 the constant
// comparisons.
const (
	keyPlatformShift = 4
	keyFactShift     = 7
	keyConstShift    = 28
)

// Key returns req's key under r. It reads only what r declares, does not
// allocate, and costs one pass over a length array when a sum is read.
func (r *Reads) Key(req *Request) Key {
	var ps, ss int64
	if r.Facts&(FactPrefixSumZero|FactPrefixSumAtThreshold) != 0 || len(r.PrefixSumAtLeast) > 0 {
		ps = req.Batch.PrefixSum()
	}
	if r.Facts&FactSeqSumWithinCapacity != 0 || len(r.SeqSumAtMost) > 0 {
		ss = req.Batch.SeqSum()
	}
	return r.KeyWithSums(req, ps, ss)
}

// KeyWithSums is Key with the batch's sums given: prefixSum must be
// req.Batch.PrefixSum() and seqSum req.Batch.SeqSum(), computed once for
// all the layers of a forward pass.
func (r *Reads) KeyWithSums(req *Request, prefixSum, seqSum int64) Key {
	return r.BatchKey(req, prefixSum, seqSum) | r.LayerKey(&req.Layer, prefixSum)
}

// BatchKey is the part of KeyWithSums that does not depend on req.Layer:
// the same for every layer of a forward pass.
func (r *Reads) BatchKey(req *Request, prefixSum, seqSum int64) Key {
	f := r.Facts
	var k Key
	if f&FactMode != 0 {
		k |= Key(req.Batch.Mode & 0xf)
	}
	if f&FactPlatform != 0 {
		k |= Key(req.Runtime.Platform&0x7) << keyPlatformShift
	}
	var b Fact
	if req.Runtime.PiecewiseCUDAGraph {
		b |= FactPiecewiseCUDAGraph
	}
	if req.Runtime.BreakableCUDAGraph {
		b |= FactBreakableCUDAGraph
	}
	if req.Runtime.DeterministicInference {
		b |= FactDeterministicInference
	}
	if req.Runtime.DSAUseMHA {
		b |= FactDSAUseMHA
	}
	if req.Runtime.TwoBatchOverlap {
		b |= FactTwoBatchOverlap
	}
	if req.Batch.MLAPrefillCP {
		b |= FactMLAPrefillCP
	}
	if prefixSum == 0 {
		b |= FactPrefixSumZero
	}
	if seqSum <= req.Batch.MaxChunkCapacity {
		b |= FactSeqSumWithinCapacity
	}
	rt := &req.Runtime
	if rt.DSAUseMHAGiven() {
		b |= FactDSAUseMHASet
	}
	if rt.DenseDSADevice() {
		b |= FactDenseDSADevice
	}
	if rt.KVCacheDenseDType() {
		b |= FactKVCacheDenseDType
	}
	k |= factBits(b & f)
	bit := uint(keyConstShift)
	for _, c := range r.PrefixSumAtLeast {
		if prefixSum >= c {
			k |= 1 << bit
		}
		bit++
	}
	for _, c := range r.SeqSumAtMost {
		if seqSum <= c {
			k |= 1 << bit
		}
		bit++
	}
	if len(r.MaxSeqLenAtMost) > 0 {
		m := req.Batch.MaxSeqLen()
		for _, c := range r.MaxSeqLenAtMost {
			if m <= c {
				k |= 1 << bit
			}
			bit++
		}
	}
	return k
}

// LayerKey is the part of KeyWithSums that depends on the layer; prefixSum
// is the batch's sum of prefix lengths.
func (r *Reads) LayerKey(l *Layer, prefixSum int64) Key {
	var b Fact
	if l.DisableChunkedPrefixCache {
		b |= FactDisableChunkedPrefixCache
	}
	if l.FlashinferMLADisableRagged {
		b |= FactFlashinferMLADisableRagged
	}
	if l.ROCmFusedDecodeMLA {
		b |= FactROCmFusedDecodeMLA
	}
	if l.UseDSA {
		b |= FactUseDSA
	}
	if l.FusedQKVAProjWithMQA {
		b |= FactFusedQKVAProjWithMQA
	}
	if l.IntelAMX {
		b |= FactIntelAMX
	}
	if prefixSum >= l.ChunkedPrefixCacheThreshold {
		b |= FactPrefixSumAtThreshold
	}
	return factBits(b & r.Facts)
}

// factBits places the boolean facts of b in their Key bits.
func factBits(b Fact) Key {
	return Key(b>>2) << keyFactShift // FactPiecewiseCUDAGraph is Fact bit 2
}
