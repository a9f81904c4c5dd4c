package core

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Quantity is one value of a request that dispatch rules may read: a
// number the rules compare with thresholds of their own, a value they tell
// apart (the forward mode, the platform, the KV cache dtype), or a flag. A
// rule declares the quantities it reads in Reads.Quantities; a host then
// keys its cache of the rule's answers by which side of each declared
// threshold a request falls, and by the values and flags declared.
//
// The set is fixed and documented (docs/writing-a-backend.md lists it); it
// only ever grows. The numbers are those of the plugin protocol's Quantity
// enum.
type Quantity uint8

// The quantities. Lengths of a list that is not known (the reference's
// None) count as an empty list: sum, maximum and minimum 0, count -1.
const (
	// QuantityBackend is the registry name asked (request.backend). A
	// host keeps one answer cache per name, so reading it costs no key.
	QuantityBackend Quantity = iota + 1
	// QuantityForwardMode is the forward mode (a value).
	QuantityForwardMode
	// QuantityPlatform is runtime.platform (a value).
	QuantityPlatform
	// QuantityKVCacheDType is runtime.kv_cache_dtype, "" and each of
	// KVCacheDTypes told apart (a value).
	QuantityKVCacheDType
	// QuantityComputeCapability is runtime.compute_capability,
	// major*10+minor (a number: 100 is 10.0).
	QuantityComputeCapability
	// QuantityPrefixSum is sum(extend_prefix_lens).
	QuantityPrefixSum
	// QuantityPrefixMax is max(extend_prefix_lens).
	QuantityPrefixMax
	// QuantityPrefixMin is min(extend_prefix_lens).
	QuantityPrefixMin
	// QuantityPrefixCount is len(extend_prefix_lens), -1 when not known.
	QuantityPrefixCount
	// QuantitySeqSum is sum(seq_lens).
	QuantitySeqSum
	// QuantitySeqMax is max(seq_lens), the longest sequence.
	QuantitySeqMax
	// QuantitySeqMin is min(seq_lens).
	QuantitySeqMin
	// QuantitySeqCount is len(seq_lens), the batch size; -1 when not
	// known.
	QuantitySeqCount
	// QuantityMaxChunkCapacity is max_chunk_capacity, the raw capacity.
	QuantityMaxChunkCapacity
	// QuantityChunkCapacityLeft is max_chunk_capacity - sum(seq_lens):
	// at least 0 when the sequences fit the chunk capacity.
	QuantityChunkCapacityLeft
	// QuantityChunkedPrefixCacheThreshold is
	// layer.chunked_prefix_cache_threshold.
	QuantityChunkedPrefixCacheThreshold
	// QuantityPrefixSumPastThreshold is sum(extend_prefix_lens) -
	// layer.chunked_prefix_cache_threshold: at least 0 when the prefix
	// sum reaches the layer's threshold.
	QuantityPrefixSumPastThreshold
	// QuantityPiecewiseCUDAGraph is runtime.piecewise_cuda_graph (a flag).
	QuantityPiecewiseCUDAGraph
	// QuantityBreakableCUDAGraph is runtime.breakable_cuda_graph (a flag).
	QuantityBreakableCUDAGraph
	// QuantityDeterministicInference is runtime.deterministic_inference
	// (a flag).
	QuantityDeterministicInference
	// QuantityDSAUseMHA is runtime.dsa_use_mha (a flag).
	QuantityDSAUseMHA
	// QuantityDSAUseMHASet is runtime.dsa_use_mha_set (a flag).
	QuantityDSAUseMHASet
	// QuantityDSAUseMHAGiven is Runtime.DSAUseMHAGiven: dsa_use_mha_set,
	// or dsa_use_mha true (a flag).
	QuantityDSAUseMHAGiven
	// QuantityTwoBatchOverlap is runtime.two_batch_overlap (a flag).
	QuantityTwoBatchOverlap
	// QuantityMLAPrefillCP is mla_prefill_cp (a flag).
	QuantityMLAPrefillCP
	// QuantityDisableChunkedPrefixCache is
	// layer.disable_chunked_prefix_cache (a flag).
	QuantityDisableChunkedPrefixCache
	// QuantityFlashinferMLADisableRagged is
	// layer.flashinfer_mla_disable_ragged (a flag).
	QuantityFlashinferMLADisableRagged
	// QuantityROCmFusedDecodeMLA is layer.rocm_fused_decode_mla (a flag).
	QuantityROCmFusedDecodeMLA
	// QuantityUseDSA is layer.use_dsa (a flag).
	QuantityUseDSA
	// QuantityFusedQKVAProjWithMQA is layer.fused_qkv_a_proj_with_mqa (a
	// flag).
	QuantityFusedQKVAProjWithMQA
	// QuantityIntelAMX is layer.intel_amx (a flag).
	QuantityIntelAMX

	quantityEnd
)

// QuantityKind says how a rule may read a quantity.
type QuantityKind uint8

// The kinds of quantity.
const (
	// KindNumber is a number a rule compares with thresholds: it declares
	// them in Read.At.
	KindNumber QuantityKind = iota + 1
	// KindValue is one of a few values that a rule may tell apart; it
	// declares no thresholds.
	KindValue
	// KindFlag is a flag; it declares no thresholds.
	KindFlag
)

// String returns "number", "value" or "flag".
func (k QuantityKind) String() string {
	switch k {
	case KindNumber:
		return "number"
	case KindValue:
		return "value"
	case KindFlag:
		return "flag"
	}
	return fmt.Sprintf("QuantityKind(%d)", uint8(k))
}

var quantityNames = [...]string{
	QuantityBackend:                     "backend",
	QuantityForwardMode:                 "forward_mode",
	QuantityPlatform:                    "platform",
	QuantityKVCacheDType:                "kv_cache_dtype",
	QuantityComputeCapability:           "compute_capability",
	QuantityPrefixSum:                   "prefix_sum",
	QuantityPrefixMax:                   "prefix_max",
	QuantityPrefixMin:                   "prefix_min",
	QuantityPrefixCount:                 "prefix_count",
	QuantitySeqSum:                      "seq_sum",
	QuantitySeqMax:                      "seq_max",
	QuantitySeqMin:                      "seq_min",
	QuantitySeqCount:                    "seq_count",
	QuantityMaxChunkCapacity:            "max_chunk_capacity",
	QuantityChunkCapacityLeft:           "chunk_capacity_left",
	QuantityChunkedPrefixCacheThreshold: "chunked_prefix_cache_threshold",
	QuantityPrefixSumPastThreshold:      "prefix_sum_past_threshold",
	QuantityPiecewiseCUDAGraph:          "piecewise_cuda_graph",
	QuantityBreakableCUDAGraph:          "breakable_cuda_graph",
	QuantityDeterministicInference:      "deterministic_inference",
	QuantityDSAUseMHA:                   "dsa_use_mha",
	QuantityDSAUseMHASet:                "dsa_use_mha_set",
	QuantityDSAUseMHAGiven:              "dsa_use_mha_given",
	QuantityTwoBatchOverlap:             "two_batch_overlap",
	QuantityMLAPrefillCP:                "mla_prefill_cp",
	QuantityDisableChunkedPrefixCache:   "disable_chunked_prefix_cache",
	QuantityFlashinferMLADisableRagged:  "flashinfer_mla_disable_ragged",
	QuantityROCmFusedDecodeMLA:          "rocm_fused_decode_mla",
	QuantityUseDSA:                      "use_dsa",
	QuantityFusedQKVAProjWithMQA:        "fused_qkv_a_proj_with_mqa",
	QuantityIntelAMX:                    "intel_amx",
}

// Quantities returns every quantity this version of core knows, in
// order.
func Quantities() []Quantity {
	out := make([]Quantity, 0, quantityEnd-1)
	for q := QuantityBackend; q < quantityEnd; q++ {
		out = append(out, q)
	}
	return out
}

// Valid reports whether q is a quantity this version of core knows.
func (q Quantity) Valid() bool { return q >= QuantityBackend && q < quantityEnd }

// String returns the quantity's name, such as "prefix_sum".
func (q Quantity) String() string {
	if q.Valid() {
		return quantityNames[q]
	}
	return fmt.Sprintf("Quantity(%d)", uint8(q))
}

// ParseQuantity returns the quantity called name.
func ParseQuantity(name string) (Quantity, error) {
	for q := QuantityBackend; q < quantityEnd; q++ {
		if quantityNames[q] == name {
			return q, nil
		}
	}
	return 0, invalidValue(fmt.Sprintf("unknown quantity %q (want one of %s)", name, strings.Join(quantityNames[1:], ", ")))
}

// Kind returns how rules read q; 0 for an unknown quantity.
func (q Quantity) Kind() QuantityKind {
	switch {
	case !q.Valid():
		return 0
	case q == QuantityBackend || q == QuantityForwardMode || q == QuantityPlatform || q == QuantityKVCacheDType:
		return KindValue
	case q >= QuantityPiecewiseCUDAGraph:
		return KindFlag
	}
	return KindNumber
}

// layer reports a quantity that depends on the layer: the part of a key
// that changes from one layer of a forward pass to the next.
func (q Quantity) layer() bool {
	switch q {
	case QuantityChunkedPrefixCacheThreshold, QuantityPrefixSumPastThreshold,
		QuantityDisableChunkedPrefixCache, QuantityFlashinferMLADisableRagged, QuantityROCmFusedDecodeMLA,
		QuantityUseDSA, QuantityFusedQKVAProjWithMQA, QuantityIntelAMX:
		return true
	}
	return false
}

// valueWidth is the key bits of a value or flag quantity.
func (q Quantity) valueWidth() uint {
	switch q {
	case QuantityBackend:
		return 0
	case QuantityForwardMode:
		return uint(bits.Len(uint(len(modeNames) - 1)))
	case QuantityPlatform:
		return uint(bits.Len(uint(len(platformNames) - 1)))
	case QuantityKVCacheDType:
		return uint(bits.Len(uint(len(KVCacheDTypes()))))
	}
	return 1
}

// Value returns q's value for req: the number for a number, 1 or 0 for a
// flag, and for a value the mode's or platform's number, or the KV cache
// dtype's position (0 for "", i+1 for KVCacheDTypes()[i]); 0 for the
// backend name and for an unknown quantity.
func (q Quantity) Value(req *Request) int64 {
	var s listStats
	switch q {
	case QuantityPrefixSum, QuantityPrefixMax, QuantityPrefixMin, QuantityPrefixCount, QuantityPrefixSumPastThreshold:
		s.prefix(&req.Batch)
	case QuantitySeqSum, QuantitySeqMax, QuantitySeqMin, QuantitySeqCount, QuantityChunkCapacityLeft:
		s.seq(&req.Batch)
	}
	return q.value(req, &s)
}

// listStats are the aggregates of a batch's length lists.
type listStats struct {
	prefixSum, prefixMax, prefixMin, prefixCount int64
	seqSum, seqMax, seqMin, seqCount             int64
}

func (s *listStats) prefix(b *Batch) {
	s.prefixSum, s.prefixMax, s.prefixMin, s.prefixCount = stats(b.ExtendPrefixLens)
}

func (s *listStats) seq(b *Batch) {
	s.seqSum, s.seqMax, s.seqMin, s.seqCount = stats(b.SeqLens)
}

// stats returns the sum, maximum, minimum and count of v; a nil v has
// count -1.
func stats(v []int64) (sum, hi, lo, n int64) {
	if v == nil {
		return 0, 0, 0, -1
	}
	for i, x := range v {
		sum += x
		if i == 0 || x > hi {
			hi = x
		}
		if i == 0 || x < lo {
			lo = x
		}
	}
	return sum, hi, lo, int64(len(v))
}

// value is Value with the list aggregates q needs in s.
func (q Quantity) value(req *Request, s *listStats) int64 {
	switch q {
	case QuantityForwardMode:
		return int64(req.Batch.Mode)
	case QuantityPlatform:
		return int64(req.Runtime.Platform)
	case QuantityKVCacheDType:
		return int64(kvDTypeIndex(req.Runtime.KVCacheDType))
	case QuantityComputeCapability:
		return int64(req.Runtime.ComputeCapability)
	case QuantityPrefixSum:
		return s.prefixSum
	case QuantityPrefixMax:
		return s.prefixMax
	case QuantityPrefixMin:
		return s.prefixMin
	case QuantityPrefixCount:
		return s.prefixCount
	case QuantitySeqSum:
		return s.seqSum
	case QuantitySeqMax:
		return s.seqMax
	case QuantitySeqMin:
		return s.seqMin
	case QuantitySeqCount:
		return s.seqCount
	case QuantityMaxChunkCapacity:
		return req.Batch.MaxChunkCapacity
	case QuantityChunkCapacityLeft:
		return subSat(req.Batch.MaxChunkCapacity, s.seqSum)
	}
	if q.layer() {
		return q.layerValue(&req.Layer, s.prefixSum)
	}
	return q.flagValue(req)
}

// layerValue is the value of a layer quantity, 0 for any other.
func (q Quantity) layerValue(l *Layer, prefixSum int64) int64 {
	switch q {
	case QuantityChunkedPrefixCacheThreshold:
		return l.ChunkedPrefixCacheThreshold
	case QuantityPrefixSumPastThreshold:
		return subSat(prefixSum, l.ChunkedPrefixCacheThreshold)
	case QuantityDisableChunkedPrefixCache:
		return b2i(l.DisableChunkedPrefixCache)
	case QuantityFlashinferMLADisableRagged:
		return b2i(l.FlashinferMLADisableRagged)
	case QuantityROCmFusedDecodeMLA:
		return b2i(l.ROCmFusedDecodeMLA)
	case QuantityUseDSA:
		return b2i(l.UseDSA)
	case QuantityFusedQKVAProjWithMQA:
		return b2i(l.FusedQKVAProjWithMQA)
	case QuantityIntelAMX:
		return b2i(l.IntelAMX)
	}
	return 0
}

// flagValue is the value of a batch or runtime flag, 0 for any other
// quantity.
func (q Quantity) flagValue(req *Request) int64 {
	rt := &req.Runtime
	switch q {
	case QuantityPiecewiseCUDAGraph:
		return b2i(rt.PiecewiseCUDAGraph)
	case QuantityBreakableCUDAGraph:
		return b2i(rt.BreakableCUDAGraph)
	case QuantityDeterministicInference:
		return b2i(rt.DeterministicInference)
	case QuantityDSAUseMHA:
		return b2i(rt.DSAUseMHA)
	case QuantityDSAUseMHASet:
		return b2i(rt.DSAUseMHASet)
	case QuantityDSAUseMHAGiven:
		return b2i(rt.DSAUseMHAGiven())
	case QuantityTwoBatchOverlap:
		return b2i(rt.TwoBatchOverlap)
	case QuantityMLAPrefillCP:
		return b2i(req.Batch.MLAPrefillCP)
	}
	return 0
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// subSat is a-b, saturated to the int64 range.
func subSat(a, b int64) int64 {
	d := a - b
	if (a >= 0) != (b >= 0) && (d >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return d
}

// kvDTypeIndex is 0 for "", i+1 for KVCacheDTypes()[i], and 0 for a dtype
// Validate refuses.
func kvDTypeIndex(dt string) int {
	switch dt {
	case "auto":
		return 1
	case "bf16":
		return 2
	case "bfloat16":
		return 3
	case "fp16":
		return 4
	case "float16":
		return 5
	case "fp8_e4m3":
		return 6
	case "fp8_e5m2":
		return 7
	case "fp4_e2m1":
		return 8
	}
	return 0
}

// Read declares one quantity a rule reads.
type Read struct {
	// Quantity is what is read.
	Quantity Quantity
	// At holds, for a number, every threshold t for which the rule reads
	// whether the quantity is >= t: a rule testing x > c declares c+1,
	// x <= c declares c+1, x == c declares c and c+1. Values and flags
	// take none. The order does not matter.
	At []int64
}

// String returns "prefix_sum>=[1 1000]" for a number and the name alone
// for a value or flag.
func (r Read) String() string {
	if len(r.At) == 0 {
		return r.Quantity.String()
	}
	return fmt.Sprintf("%s>=%v", r.Quantity, r.At)
}

// KeyBits is how many bits a Key may use: a host keeps a method beside the
// key in one 64-bit word.
const KeyBits = 56

// MaxReadThresholds is the most thresholds one Read may hold.
const MaxReadThresholds = 64

// Reads returns the declarations f stands for: every fact is a shorthand
// for reading one quantity, with thresholds for a number. The result is in
// Fact bit order; an unknown bit gives nothing.
func (f Fact) Reads() []Read {
	var out []Read
	for i := range factNames {
		bit := Fact(1) << i
		if f&bit == 0 {
			continue
		}
		switch bit {
		case FactMode:
			out = append(out, Read{Quantity: QuantityForwardMode})
		case FactPlatform:
			out = append(out, Read{Quantity: QuantityPlatform})
		case FactPrefixSumZero:
			out = append(out, Read{Quantity: QuantityPrefixSum, At: []int64{1}})
		case FactPrefixSumAtThreshold:
			out = append(out, Read{Quantity: QuantityPrefixSumPastThreshold, At: []int64{0}})
		case FactSeqSumWithinCapacity:
			out = append(out, Read{Quantity: QuantityChunkCapacityLeft, At: []int64{0}})
		case FactDSAUseMHASet:
			out = append(out, Read{Quantity: QuantityDSAUseMHAGiven})
		case FactDenseDSADevice:
			out = append(out, Read{Quantity: QuantityComputeCapability, At: []int64{90, 91, 100, 110}})
		case FactKVCacheDenseDType:
			out = append(out, Read{Quantity: QuantityKVCacheDType})
		default:
			out = append(out, Read{Quantity: factFlags()[i]})
		}
	}
	return out
}

// factFlags maps the Fact bit of each flag fact to its quantity.
func factFlags() [len(factNames)]Quantity {
	return [len(factNames)]Quantity{
		2: QuantityPiecewiseCUDAGraph, 3: QuantityBreakableCUDAGraph, 4: QuantityDeterministicInference,
		5: QuantityDSAUseMHA, 6: QuantityTwoBatchOverlap, 7: QuantityMLAPrefillCP,
		8: QuantityDisableChunkedPrefixCache, 9: QuantityFlashinferMLADisableRagged,
		10: QuantityROCmFusedDecodeMLA, 11: QuantityUseDSA, 12: QuantityFusedQKVAProjWithMQA, 13: QuantityIntelAMX,
	}
}

// Declarations returns everything r declares as Reads, one per quantity,
// sorted by quantity, with the thresholds of a number sorted and without
// repeats: the facts (Fact.Reads), the constants of PrefixSumAtLeast,
// SeqSumAtMost (c becomes c+1) and MaxSeqLenAtMost (likewise, on
// seq_max), and Quantities. Unknown facts and quantities are left out;
// Validate reports them.
func (r *Reads) Declarations() []Read {
	all := r.Facts.Reads()
	if len(r.PrefixSumAtLeast) > 0 {
		all = append(all, Read{Quantity: QuantityPrefixSum, At: r.PrefixSumAtLeast})
	}
	if len(r.SeqSumAtMost) > 0 {
		all = append(all, Read{Quantity: QuantitySeqSum, At: atMost(r.SeqSumAtMost)})
	}
	if len(r.MaxSeqLenAtMost) > 0 {
		all = append(all, Read{Quantity: QuantitySeqMax, At: atMost(r.MaxSeqLenAtMost)})
	}
	all = append(all, r.Quantities...)
	byQ := map[Quantity]int{} // index in out
	var out []Read
	for _, d := range all {
		if !d.Quantity.Valid() {
			continue
		}
		if i, ok := byQ[d.Quantity]; ok {
			out[i].At = append(out[i].At, d.At...)
			continue
		}
		byQ[d.Quantity] = len(out)
		out = append(out, Read{Quantity: d.Quantity, At: slices.Clone(d.At)})
	}
	for i := range out {
		slices.Sort(out[i].At)
		out[i].At = slices.Compact(out[i].At)
		if out[i].Quantity.Kind() != KindNumber {
			out[i].At = nil
		}
	}
	slices.SortFunc(out, func(a, b Read) int { return int(a.Quantity) - int(b.Quantity) })
	return out
}

// atMost turns constants c of "x <= c" into thresholds c+1 of "x >= t";
// x <= MaxInt64 always holds and needs none.
func atMost(cs []int64) []int64 {
	out := make([]int64, 0, len(cs))
	for _, c := range cs {
		if c < math.MaxInt64 {
			out = append(out, c+1)
		}
	}
	return out
}

// Validate reports whether a host can key answers by r, and why not: every
// fact and quantity is known, numbers have 1 to MaxReadThresholds
// thresholds and values and flags none, the constants of the older fields
// number at most MaxConstantComparisons, the conditions are valid
// (ReadsCondition, at most MaxReadsConditions), and the key, with its
// conditions' keys, fits in KeyBits.
func (r *Reads) Validate() error {
	if unknown := r.Facts &^ AllFacts; unknown != 0 {
		return fmt.Errorf("%w: reads unknown facts %#x", ErrProtocol, uint32(unknown))
	}
	if n := len(r.PrefixSumAtLeast) + len(r.SeqSumAtMost) + len(r.MaxSeqLenAtMost); n > MaxConstantComparisons {
		return fmt.Errorf("%w: %d constants in prefix_sum_at_least, seq_sum_at_most and max_seq_len_at_most, more than %d", ErrProtocol, n, MaxConstantComparisons)
	}
	for _, d := range r.Quantities {
		switch k := d.Quantity.Kind(); {
		case k == 0:
			return fmt.Errorf("%w: reads %s, a quantity this host does not know", ErrProtocol, d.Quantity)
		case k == KindNumber && len(d.At) == 0:
			return fmt.Errorf("%w: reads the number %s without a threshold: declare every threshold it is compared to", ErrProtocol, d.Quantity)
		case k != KindNumber && len(d.At) > 0:
			return fmt.Errorf("%w: %s is a %s and takes no thresholds (got %v)", ErrProtocol, d.Quantity, k, d.At)
		case len(d.At) > MaxReadThresholds:
			return fmt.Errorf("%w: %d thresholds on %s, more than %d", ErrProtocol, len(d.At), d.Quantity, MaxReadThresholds)
		}
	}
	if err := r.validateConditions(); err != nil {
		return err
	}
	p := r.plan()
	if p.bits > KeyBits {
		return fmt.Errorf("%w: the declared reads need a key of %d bits, more than %d (%s)", ErrProtocol, p.bits, KeyBits, p)
	}
	return nil
}

// KeyPlan is Reads made ready to key requests: one field of the key per
// declared quantity (Declarations), and one plan per condition
// (Reads.Conditions), whose keys carry the condition's number in bits of
// their own. A host builds one per handler with Plan and keys every
// request with it, without allocating. It is immutable and safe for
// concurrent use.
type KeyPlan struct {
	fields []keyField // every field, in key order
	batch  []keyField // the fields that do not depend on the layer
	layer  []keyField // the numbers that do
	// layerFlags maps the layer's six flags (layerFlagBits) to their key
	// bits: a forward pass keys every layer with one lookup.
	layerFlags  [1 << 6]Key
	bits        uint
	prefixStats bool // a field reads a prefix-list aggregate
	seqStats    bool // a field reads a seq-list aggregate besides the sum
	// cases are the plans of the reads' conditions, in order (Select);
	// tag is the condition's number in a condition's plan, in the bits
	// above every field, ORed into each of its keys.
	cases []keyCase
	tag   Key
}

// keyField is the place of one quantity in a key.
type keyField struct {
	q     Quantity
	at    []int64 // a number's thresholds, sorted
	shift uint
	width uint
	layer bool
}

// Plan returns r's key plan, or the error of Validate.
func (r *Reads) Plan() (*KeyPlan, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.plan(), nil
}

// plan builds the plan of r's valid declarations, whatever its size.
func (r *Reads) plan() *KeyPlan {
	p := &KeyPlan{}
	for _, d := range r.Declarations() {
		f := keyField{q: d.Quantity, at: d.At, shift: p.bits, layer: d.Quantity.layer()}
		if d.Quantity.Kind() == KindNumber {
			f.width = uint(bits.Len(uint(len(d.At))))
		} else {
			f.width = d.Quantity.valueWidth()
		}
		switch d.Quantity {
		case QuantityPrefixMax, QuantityPrefixMin, QuantityPrefixCount:
			p.prefixStats = true
		case QuantitySeqMax, QuantitySeqMin, QuantitySeqCount:
			p.seqStats = true
		}
		p.bits += f.width
		p.fields = append(p.fields, f)
		if f.width == 0 {
			continue // the backend name: a host keeps a cache per name
		}
		switch bit, flag := layerFlagBit(f.q); {
		case flag:
			for m := range p.layerFlags {
				if m&bit != 0 {
					p.layerFlags[m] |= 1 << f.shift
				}
			}
		case f.layer:
			p.layer = append(p.layer, f)
		default:
			p.batch = append(p.batch, f)
		}
	}
	p.conditionPlans(r)
	return p
}

// layerFlagBit is the bit of a layer flag in layerFlagBits, and whether q
// is one.
func layerFlagBit(q Quantity) (int, bool) {
	switch q {
	case QuantityDisableChunkedPrefixCache:
		return 1 << 0, true
	case QuantityFlashinferMLADisableRagged:
		return 1 << 1, true
	case QuantityROCmFusedDecodeMLA:
		return 1 << 2, true
	case QuantityUseDSA:
		return 1 << 3, true
	case QuantityFusedQKVAProjWithMQA:
		return 1 << 4, true
	case QuantityIntelAMX:
		return 1 << 5, true
	}
	return 0, false
}

// layerFlagBits packs the layer's six flags in the order of layerFlagBit.
func layerFlagBits(l *Layer) int {
	m := 0
	for i, b := range [...]bool{l.DisableChunkedPrefixCache, l.FlashinferMLADisableRagged, l.ROCmFusedDecodeMLA,
		l.UseDSA, l.FusedQKVAProjWithMQA, l.IntelAMX} {
		if b {
			m |= 1 << i
		}
	}
	return m
}

// Bits returns how many bits the plan's keys use, its conditions' keys
// included.
func (p *KeyPlan) Bits() int { return int(p.bits) }

// String lists the fields: "forward_mode, prefix_sum>=[1 16384]".
func (p *KeyPlan) String() string {
	parts := make([]string, len(p.fields))
	for i, f := range p.fields {
		parts[i] = Read{Quantity: f.q, At: f.at}.String()
	}
	s := "nothing"
	if len(parts) > 0 {
		s = strings.Join(parts, ", ")
	}
	for _, c := range p.cases {
		s += fmt.Sprintf("; when %s: %s", c.when, c.plan)
	}
	return s
}

// Key returns req's key: two requests with the same key fall on the same
// side of every declared threshold and have the same declared values and
// flags, of the plan that Select chooses for them. It does not allocate.
func (p *KeyPlan) Key(req *Request) Key {
	ps, ss := req.Batch.PrefixSum(), req.Batch.SeqSum()
	q := p.Select(req)
	return q.BatchKey(req, ps, ss) | q.LayerKey(&req.Layer, ps)
}

// BatchKey is the part of the key by p's own declarations that does not
// depend on req.Layer, the same for every layer of a forward pass;
// prefixSum and seqSum are the batch's sums, computed once. It ignores
// p's conditions: call it on the plan Select returns for the batch, and
// LayerKey on the same plan. (A key by the whole reads is correct for any
// request, but it is not the key Key gives a request where a condition
// holds.)
func (p *KeyPlan) BatchKey(req *Request, prefixSum, seqSum int64) Key {
	s := listStats{prefixSum: prefixSum, seqSum: seqSum}
	if p.prefixStats {
		s.prefix(&req.Batch)
	}
	if p.seqStats {
		s.seq(&req.Batch)
	}
	k := p.tag
	for i := range p.batch {
		f := &p.batch[i]
		k |= f.put(f.q.value(req, &s))
	}
	return k
}

// LayerKey is the part of the key by p's own declarations that depends
// on the layer; prefixSum is the batch's sum of prefix lengths.
func (p *KeyPlan) LayerKey(l *Layer, prefixSum int64) Key {
	k := p.layerFlags[layerFlagBits(l)]
	for i := range p.layer {
		f := &p.layer[i]
		k |= f.put(f.q.layerValue(l, prefixSum))
	}
	return k
}

// put places v in the field: for a number, how many thresholds v reaches.
func (f *keyField) put(v int64) Key {
	var x uint64
	if f.at != nil {
		for _, t := range f.at {
			if v < t {
				break
			}
			x++
		}
	} else {
		x = uint64(v)
	}
	return Key(x&(1<<f.width-1)) << f.shift
}

// Shorthand returns r said with facts and constants alone (Facts,
// PrefixSumAtLeast, SeqSumAtMost, MaxSeqLenAtMost), for a reader that
// knows no quantities, and whether they say exactly what r declares:
// false when a declared quantity has no such form (a maximum or count but
// the longest sequence, the raw capacity, the compute capability, the
// dtype, a threshold of a difference other than 0), in which case such a
// reader must not cache by r. Reading the backend name needs no form: a
// cache is kept per name. A condition whose reads have no such form is
// left out: such a reader keys those requests by the whole reads, which is
// correct for them too.
func (r *Reads) Shorthand() (Reads, bool) {
	out := Reads{
		Facts:            r.Facts,
		PrefixSumAtLeast: slices.Clone(r.PrefixSumAtLeast),
		SeqSumAtMost:     slices.Clone(r.SeqSumAtMost),
		MaxSeqLenAtMost:  slices.Clone(r.MaxSeqLenAtMost),
	}
	flags := factFlags()
	for _, d := range r.Quantities {
		zero := len(d.At) == 1 && d.At[0] == 0
		switch q := d.Quantity; {
		case q == QuantityBackend:
		case q == QuantityForwardMode:
			out.Facts |= FactMode
		case q == QuantityPlatform:
			out.Facts |= FactPlatform
		case q == QuantityDSAUseMHAGiven:
			out.Facts |= FactDSAUseMHASet
		case q == QuantityPrefixSumPastThreshold && zero:
			out.Facts |= FactPrefixSumAtThreshold
		case q == QuantityChunkCapacityLeft && zero:
			out.Facts |= FactSeqSumWithinCapacity
		case q == QuantityPrefixSum:
			out.PrefixSumAtLeast = append(out.PrefixSumAtLeast, d.At...)
		case q == QuantitySeqSum || q == QuantitySeqMax:
			for _, t := range d.At {
				if t == math.MinInt64 {
					return Reads{}, false
				}
				if q == QuantitySeqSum {
					out.SeqSumAtMost = append(out.SeqSumAtMost, t-1)
				} else {
					out.MaxSeqLenAtMost = append(out.MaxSeqLenAtMost, t-1)
				}
			}
		default:
			i := slices.Index(flags[:], q)
			if q.Kind() != KindFlag || i < 0 {
				return Reads{}, false
			}
			out.Facts |= Fact(1) << i
		}
	}
	for _, c := range r.Conditions {
		if short, ok := c.Reads.Shorthand(); ok {
			out.Conditions = append(out.Conditions, ReadsCondition{When: c.When, Reads: short})
		}
	}
	return out, out.Validate() == nil
}
