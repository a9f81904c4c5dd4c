package core

import (
	"fmt"
	"math/bits"
	"slices"
)

// ReadsCondition narrows what a rule reads in the requests where one fact
// holds: in such a request, the rule reads Reads alone. The dsa rules, for
// one, read only runtime.dsa_use_mha when the request gives it
// (FactDSAUseMHASet), and the facts of their own prefill choice (sums,
// maximum, device, dtype) only when it does not.
//
// A host keys a request in which When holds by the condition and Reads
// alone (KeyPlan.Select), so that requests that differ only in what the
// rule then ignores share one answer; a host that knows no conditions keys
// it by the whole Reads, which stays correct, since the whole Reads
// declares everything the rule may read in any request.
type ReadsCondition struct {
	// When is the fact that must hold: one fact of ConditionFacts, which
	// the Reads the condition belongs to declare (the rule reads it to
	// know that it reads less), so that those Reads alone tell requests
	// where it holds from requests where it does not.
	When Fact
	// Reads is everything the rule reads in a request where When holds:
	// a subset of the declarations of the Reads the condition belongs to
	// (the same quantities, with some of their thresholds), with no
	// conditions of its own. It may be empty: the answer is then the same
	// for every such request.
	Reads Reads
}

// ConditionFacts are the facts a ReadsCondition may name: the facts that
// hold or not in a request (a mode or a platform is a value), and that
// do not depend on the layer, so that a host chooses the reads once for
// every layer of a forward pass.
const ConditionFacts = FactPiecewiseCUDAGraph | FactBreakableCUDAGraph | FactDeterministicInference |
	FactDSAUseMHA | FactTwoBatchOverlap | FactMLAPrefillCP | FactPrefixSumZero | FactSeqSumWithinCapacity |
	FactDSAUseMHASet | FactDenseDSADevice | FactKVCacheDenseDType

// MaxReadsConditions is the most conditions one Reads may hold.
const MaxReadsConditions = 8

// Holds reports whether every fact of f holds in req: a flag is true, a
// comparison is (FactPrefixSumZero: the prefix lengths sum to 0, and so
// on, as each fact's comment says). A mode, a platform and an unknown fact
// never hold.
func (f Fact) Holds(req *Request) bool {
	if f == 0 || f&^AllFacts != 0 || f&(FactMode|FactPlatform) != 0 {
		return false
	}
	for rest := f; rest != 0; rest &= rest - 1 {
		if !oneHolds(rest&-rest, req) {
			return false
		}
	}
	return true
}

// oneHolds is Holds of the one fact f.
func oneHolds(f Fact, req *Request) bool {
	rt, b, l := &req.Runtime, &req.Batch, &req.Layer
	switch f {
	case FactPiecewiseCUDAGraph:
		return rt.PiecewiseCUDAGraph
	case FactBreakableCUDAGraph:
		return rt.BreakableCUDAGraph
	case FactDeterministicInference:
		return rt.DeterministicInference
	case FactDSAUseMHA:
		return rt.DSAUseMHA
	case FactTwoBatchOverlap:
		return rt.TwoBatchOverlap
	case FactMLAPrefillCP:
		return b.MLAPrefillCP
	case FactDisableChunkedPrefixCache:
		return l.DisableChunkedPrefixCache
	case FactFlashinferMLADisableRagged:
		return l.FlashinferMLADisableRagged
	case FactROCmFusedDecodeMLA:
		return l.ROCmFusedDecodeMLA
	case FactUseDSA:
		return l.UseDSA
	case FactFusedQKVAProjWithMQA:
		return l.FusedQKVAProjWithMQA
	case FactIntelAMX:
		return l.IntelAMX
	case FactPrefixSumZero:
		return b.PrefixSum() == 0
	case FactPrefixSumAtThreshold:
		return b.PrefixSum() >= l.ChunkedPrefixCacheThreshold
	case FactSeqSumWithinCapacity:
		return b.SeqSum() <= b.MaxChunkCapacity
	case FactDSAUseMHASet:
		return rt.DSAUseMHAGiven()
	case FactDenseDSADevice:
		return rt.DenseDSADevice()
	case FactKVCacheDenseDType:
		return rt.KVCacheDenseDType()
	}
	return false
}

// String returns "when dsa_use_mha_set: dsa_use_mha", the narrower reads
// listed as KeyPlan.String lists them.
func (c ReadsCondition) String() string {
	return fmt.Sprintf("when %s: %s", c.When, c.Reads.plan())
}

// validateConditions reports what is wrong with r's conditions: too many,
// a When that is not one fact of ConditionFacts or that r does not
// declare, narrower reads that are invalid, hold conditions of their own,
// or declare what r does not.
func (r *Reads) validateConditions() error {
	if n := len(r.Conditions); n > MaxReadsConditions {
		return fmt.Errorf("%w: %d read conditions, more than %d", ErrProtocol, n, MaxReadsConditions)
	}
	if len(r.Conditions) == 0 {
		return nil
	}
	all := r.Declarations()
	for i, c := range r.Conditions {
		switch {
		case c.When == 0 || c.When&(c.When-1) != 0:
			return fmt.Errorf("%w: read condition %d: when %s: name exactly one fact", ErrProtocol, i, c.When)
		case c.When&^ConditionFacts != 0:
			return fmt.Errorf("%w: read condition %d: when %s: a condition is a fact of the batch or runtime that holds or not (one of %s)",
				ErrProtocol, i, c.When, ConditionFacts)
		case len(c.Reads.Conditions) > 0:
			return fmt.Errorf("%w: read condition %d (when %s) holds conditions of its own", ErrProtocol, i, c.When)
		}
		if err := c.Reads.Validate(); err != nil {
			return fmt.Errorf("read condition %d (when %s): %w", i, c.When, err)
		}
		for _, d := range c.When.Reads() {
			if what := uncovered(all, d); what != "" {
				return fmt.Errorf("%w: read condition %d (when %s): the reads it narrows must declare its fact, and do not declare %s", ErrProtocol, i, c.When, what)
			}
		}
		for _, d := range c.Reads.Declarations() {
			if what := uncovered(all, d); what != "" {
				return fmt.Errorf("%w: read condition %d (when %s) reads %s, which the reads it narrows do not declare", ErrProtocol, i, c.When, what)
			}
		}
	}
	return nil
}

// uncovered says what of d the declarations all lack ("seq_sum", or
// "prefix_sum at 50 (declared thresholds: [1 100])"), or "" when they
// declare it all.
func uncovered(all []Read, d Read) string {
	j := slices.IndexFunc(all, func(a Read) bool { return a.Quantity == d.Quantity })
	if j < 0 {
		return d.Quantity.String()
	}
	for _, t := range d.At {
		if !slices.Contains(all[j].At, t) {
			return fmt.Sprintf("%s at %d (declared thresholds: %v)", d.Quantity, t, all[j].At)
		}
	}
	return ""
}

// conditionPlans adds to p the plans of r's conditions: each keys its
// requests with the tag i+1 in the bits above every plan's fields, so that
// no key of one condition, or of the whole reads (tag 0), is another's.
func (p *KeyPlan) conditionPlans(r *Reads) {
	if len(r.Conditions) == 0 {
		return
	}
	top := p.bits
	for _, c := range r.Conditions {
		cp := c.Reads.plan()
		p.cases = append(p.cases, keyCase{when: c.When, plan: cp})
		top = max(top, cp.bits)
	}
	for i := range p.cases {
		p.cases[i].plan.tag = Key(i+1) << top
	}
	p.bits = top + uint(bits.Len(uint(len(p.cases))))
}

// keyCase is one condition of a plan.
type keyCase struct {
	when Fact
	plan *KeyPlan
}

// Select returns the plan that keys req: the plan of the first condition
// of the reads that holds in req (Reads.Conditions), or p itself. The
// conditions do not depend on the layer, so one selection serves every
// layer of a forward pass: call BatchKey and LayerKey on the plan it
// returns. It does not allocate.
func (p *KeyPlan) Select(req *Request) *KeyPlan {
	for i := range p.cases {
		if p.cases[i].when.Holds(req) {
			return p.cases[i].plan
		}
	}
	return p
}
