package conformance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Probing. Besides the fixed requests of GenerateRequests, the suite asks
// each name random requests, and, for a few random base requests, variants
// that set one quantity of core's vocabulary at a time: to each side of
// every threshold the name declares for it, and to random values over its
// whole range, so that a threshold the rules read but do not declare is
// crossed wherever it lies. A variant whose key (under the declared reads)
// is its base's but whose answer is not shows an undeclared read; the
// suite then bisects the quantity between the two values to name the
// threshold. Everything random comes from Options.Seed.
//
// A name whose reads hold conditions (core.ReadsCondition) is keyed as a
// host keys it: a request where a condition holds by that condition's
// reads alone. As many bases again are made to meet a condition, each
// condition in turn, and their variants that keep the key vary everything
// outside the condition's reads (around the thresholds of the whole reads
// and over each quantity's range): an answer that changes there shows a
// condition that lies, and the report names it.

// origin is where a request of a name's set came from.
type origin struct {
	base int           // the index of the request it varies; -1 for none
	q    core.Quantity // the quantity it sets, with base >= 0
}

// defaultProbes is how many base requests of each name are varied.
const defaultProbes = 24

// randomProbes is how many random requests of each name are asked.
const randomProbes = 256

// ladderValues is how many values of its ladder each number is set to on
// one base, besides a random value and its declared thresholds.
const ladderValues = 8

// probeRequests returns the probes of the name with the reads reads:
// randomProbes random requests, then bases base requests each followed by
// its variants that have its key under plan (all of them when plan is
// nil); when the reads hold conditions, bases more bases follow, each made
// to meet a condition, in turn. first is the index the first probe will
// have in the name's request set.
func probeRequests(name string, reads *core.Reads, plan *core.KeyPlan, rng *rand.Rand, bases, first int) ([]core.Request, []origin) {
	var reqs []core.Request
	var from []origin
	for range randomProbes {
		reqs = append(reqs, randomRequest(name, rng, false))
		from = append(from, origin{base: -1})
	}
	declared := map[core.Quantity][]int64{}
	for _, d := range reads.Declarations() {
		declared[d.Quantity] = d.At
	}
	// The bases, then as many again that meet a condition, each in turn.
	extra := 0
	if len(reads.Conditions) > 0 {
		extra = bases
	}
	for n := range bases + extra {
		b := randomRequest(name, rng, true)
		if n >= bases {
			holdFact(&b, reads.Conditions[(n-bases)%len(reads.Conditions)].When, rng)
		}
		bi := first + len(reqs)
		reqs = append(reqs, b)
		from = append(from, origin{base: -1})
		var key core.Key
		if plan != nil {
			key = plan.Key(&b)
		}
		for _, q := range core.Quantities() {
			for _, v := range probeValues(q, declared[q], &b, rng) {
				r := b
				if !setQuantity(&r, q, v) || q.Value(&r) == q.Value(&b) || (plan != nil && plan.Key(&r) != key) {
					continue
				}
				reqs = append(reqs, r)
				from = append(from, origin{base: bi, q: q})
			}
		}
	}
	return reqs, from
}

// holdFact changes r so that the fact f holds (a condition's), setting
// the quantity the fact stands for to a value drawn among those that make
// it hold, and reports whether it could.
func holdFact(r *core.Request, f core.Fact, rng *rand.Rand) bool {
	for _, d := range f.Reads() {
		vals := probeValues(d.Quantity, d.At, r, rng)
		rng.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
		for _, v := range vals {
			c := *r
			if setQuantity(&c, d.Quantity, v) && f.Holds(&c) {
				*r = c
				return true
			}
		}
	}
	return f.Holds(r)
}

// declaredFor returns what reads declare for req, as a host keys it: the
// reads of the first condition that holds in req, with words that name
// the condition (", where dsa_use_mha_set holds (its reads then:
// dsa_use_mha),"), or the whole declarations and "".
func declaredFor(reads *core.Reads, req *core.Request) ([]core.Read, string) {
	for _, c := range reads.Conditions {
		if c.When.Holds(req) {
			decls := c.Reads.Declarations()
			return decls, fmt.Sprintf(", where %s holds (its reads then: %s),", c.When, readsString(decls))
		}
	}
	return reads.Declarations(), ""
}

// probeValues returns the values q is set to on base: for a number, each
// side of its declared thresholds and random values over its range; for a
// value or a flag, every value.
func probeValues(q core.Quantity, at []int64, base *core.Request, rng *rand.Rand) []int64 {
	switch q.Kind() {
	case core.KindFlag:
		return []int64{1 - q.Value(base)}
	case core.KindValue:
		switch q {
		case core.QuantityForwardMode:
			return seq(1, int64(len(core.ForwardModes())))
		case core.QuantityPlatform:
			return seq(1, 5)
		case core.QuantityKVCacheDType:
			return seq(0, int64(len(core.KVCacheDTypes())))
		}
		return nil
	}
	var out []int64
	// Around the declared thresholds: a sample of at most four of them.
	for _, i := range rng.Perm(len(at))[:min(4, len(at))] {
		out = append(out, at[i]-1, at[i], at[i]+1)
	}
	l := ladder(q)
	for _, i := range rng.Perm(len(l))[:min(ladderValues, len(l))] {
		out = append(out, l[i])
	}
	return append(out, randomValue(q, base, rng))
}

// ladder returns values spread over a number's whole range, so that any
// threshold a rule compares it with lies between two of them: powers of
// two and of ten for lengths, sums and capacities (negated too for the
// differences), the batch sizes 0 to 128 and not known, and the compute
// capabilities of real GPUs.
func ladder(q core.Quantity) []int64 {
	switch q {
	case core.QuantityComputeCapability:
		return []int64{0, 50, 60, 70, 75, 80, 86, 89, 90, 100, 103, 110, 120, 121, 200, 1000}
	case core.QuantityPrefixCount, core.QuantitySeqCount:
		return []int64{-1, 0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128}
	case core.QuantityChunkCapacityLeft, core.QuantityPrefixSumPastThreshold:
		out := []int64{0}
		for p := int64(1); p <= 1<<20; p <<= 2 {
			out = append(out, p, -p)
		}
		return out
	}
	out := []int64{0, 1000, 10000, 100000}
	for p := int64(1); p <= 1<<20; p <<= 1 {
		out = append(out, p)
	}
	return out
}

func seq(lo, hi int64) []int64 {
	var out []int64
	for v := lo; v <= hi; v++ {
		out = append(out, v)
	}
	return out
}

// logUniform returns an integer in [0, 2^bits), uniform in its logarithm.
func logUniform(rng *rand.Rand, bits int) int64 {
	return int64(math.Exp2(rng.Float64()*float64(bits))) - 1
}

// randomValue returns a random value of the number q, over the range a
// real batch gives it.
func randomValue(q core.Quantity, base *core.Request, rng *rand.Rand) int64 {
	switch q {
	case core.QuantityComputeCapability:
		if rng.IntN(5) != 0 {
			caps := []int64{0, 70, 75, 80, 86, 89, 90, 100, 103, 110, 120, 121}
			return caps[rng.IntN(len(caps))]
		}
		return rng.Int64N(131)
	case core.QuantityPrefixCount, core.QuantitySeqCount:
		return logUniform(rng, 7) - 1 // -1 (not known) to 127
	case core.QuantityChunkCapacityLeft, core.QuantityPrefixSumPastThreshold:
		v := logUniform(rng, 21)
		if rng.IntN(2) == 0 {
			v = -v - 1
		}
		return v
	}
	return logUniform(rng, 21)
}

// randomRequest returns a valid request of name, drawn over the whole
// vocabulary: any mode and platform, each flag, any dtype and capability,
// batches of 0 to 64 requests (or lengths not known), lengths from 0 to a
// million tokens, capacities and thresholds near the sums or anywhere. A
// plain request (a base) sets each flag less often, and has the default
// dtype and cuda more often, so that its variants reach the rules' later
// branches.
func randomRequest(name string, rng *rand.Rand, plain bool) core.Request {
	modes := core.ForwardModes()
	r := core.NewRequest(name, modes[rng.IntN(len(modes))])
	r.Runtime.Platform = core.Platform(1 + rng.IntN(5))
	odds := 4
	if plain {
		odds = 10
		if rng.IntN(2) == 0 {
			r.Runtime.Platform = core.PlatformCUDA
		}
	}
	flip := func() bool { return rng.IntN(odds) == 0 }
	r.Runtime.PiecewiseCUDAGraph, r.Runtime.BreakableCUDAGraph = flip(), flip()
	r.Runtime.DeterministicInference, r.Runtime.DSAUseMHA, r.Runtime.DSAUseMHASet = flip(), flip(), flip()
	r.Runtime.TwoBatchOverlap, r.Batch.MLAPrefillCP = flip(), flip()
	r.Layer.DisableChunkedPrefixCache, r.Layer.FlashinferMLADisableRagged = flip(), flip()
	r.Layer.ROCmFusedDecodeMLA, r.Layer.UseDSA, r.Layer.FusedQKVAProjWithMQA, r.Layer.IntelAMX = flip(), flip(), flip(), flip()
	dtypes := append([]string{""}, core.KVCacheDTypes()...)
	if r.Runtime.KVCacheDType = dtypes[rng.IntN(len(dtypes))]; plain && rng.IntN(2) == 0 {
		r.Runtime.KVCacheDType = ""
	}
	r.Runtime.ComputeCapability = int(randomValue(core.QuantityComputeCapability, &r, rng))
	n := int(logUniform(rng, 6)) + rng.IntN(2) // 0 to 64
	prefix, seqs := make([]int64, n), make([]int64, n)
	for i := range prefix {
		if rng.IntN(4) != 0 {
			prefix[i] = logUniform(rng, 17)
		}
		seqs[i] = prefix[i] + 1 + logUniform(rng, 14)
	}
	switch rng.IntN(10) {
	case 0:
		prefix = nil
	case 1:
		seqs = nil
	case 2:
		prefix, seqs = nil, nil
	}
	r.Batch.ExtendPrefixLens, r.Batch.SeqLens = prefix, seqs
	switch ss := r.Batch.SeqSum(); rng.IntN(3) {
	case 0:
		r.Batch.MaxChunkCapacity = max(0, ss+rng.Int64N(3)-1)
	case 1:
		r.Batch.MaxChunkCapacity = logUniform(rng, 21)
	default:
		r.Batch.MaxChunkCapacity = 131072
	}
	switch ps := r.Batch.PrefixSum(); rng.IntN(3) {
	case 0:
		r.Layer.ChunkedPrefixCacheThreshold = max(0, ps+rng.Int64N(3)-1)
	case 1:
		r.Layer.ChunkedPrefixCacheThreshold = logUniform(rng, 18)
	}
	return r
}

// setQuantity changes r so that q has the value v, and reports whether it
// could: the request stays valid, and the other quantities change as
// little as a batch allows (setting a sum spreads it evenly, and raises
// sequence lengths that would fall below their prefix). Along the values
// of one quantity, every number a setter changes moves one way only, so
// two values on the same side of every declared threshold bound requests
// that are too. It never sets the backend name.
func setQuantity(r *core.Request, q core.Quantity, v int64) bool {
	b := &r.Batch
	p, s := slices.Clone(b.ExtendPrefixLens), slices.Clone(b.SeqLens)
	n := max(len(p), len(s))
	switch q {
	case core.QuantityBackend:
		return false
	case core.QuantityForwardMode:
		b.Mode = core.ForwardMode(v)
	case core.QuantityPlatform:
		r.Runtime.Platform = core.Platform(v)
	case core.QuantityKVCacheDType:
		if v < 0 || v > int64(len(core.KVCacheDTypes())) {
			return false
		}
		r.Runtime.KVCacheDType = ""
		if v > 0 {
			r.Runtime.KVCacheDType = core.KVCacheDTypes()[v-1]
		}
	case core.QuantityComputeCapability:
		if v < 0 || v > core.MaxComputeCapability {
			return false
		}
		r.Runtime.ComputeCapability = int(v)
	case core.QuantityPrefixSum, core.QuantityPrefixMax, core.QuantityPrefixMin:
		n = max(n, 1)
		p, s = resize(p, max(n, len(p)), 0, true), grow(s, n, 1)
		var ok bool
		if p, ok = setAggregate(p, nil, q, v); !ok {
			return false
		}
		for i := range s {
			s[i] = max(s[i], p[i]) // a sequence holds its prefix
		}
		b.ExtendPrefixLens, b.SeqLens = p, s
	case core.QuantitySeqSum, core.QuantitySeqMax, core.QuantitySeqMin:
		n = max(n, 1)
		s, p = resize(s, max(n, len(s)), 0, true), grow(p, n, 0)
		floor := make([]int64, n) // what each sequence must hold: its prefix
		copy(floor, p)
		var ok bool
		if s, ok = setAggregate(s, floor, q, v); !ok {
			return false
		}
		b.ExtendPrefixLens, b.SeqLens = p, s
	case core.QuantityPrefixCount, core.QuantitySeqCount:
		if v > core.MaxBatchSize {
			return false
		}
		if v < 0 {
			if q == core.QuantityPrefixCount {
				b.ExtendPrefixLens = nil
			} else {
				b.SeqLens = nil
			}
			break
		}
		p, s = resize(p, int(v), 0, q == core.QuantityPrefixCount), resize(s, int(v), 1, q == core.QuantitySeqCount)
		b.ExtendPrefixLens, b.SeqLens = p, s
	case core.QuantityMaxChunkCapacity:
		b.MaxChunkCapacity = v
	case core.QuantityChunkCapacityLeft:
		ss := b.SeqSum()
		if v > 0 && ss > math.MaxInt64-v {
			return false
		}
		b.MaxChunkCapacity = ss + v
	case core.QuantityChunkedPrefixCacheThreshold:
		r.Layer.ChunkedPrefixCacheThreshold = v
	case core.QuantityPrefixSumPastThreshold:
		ps := b.PrefixSum()
		if v < 0 && ps > math.MaxInt64+v {
			return false
		}
		r.Layer.ChunkedPrefixCacheThreshold = ps - v
	default:
		return setFlag(r, q, v)
	}
	return r.Validate() == nil && q.Value(r) == v
}

// spread returns a copy of v whose entries add up to sum, none below its
// floor (0 without floors), changing the largest and the smallest entry
// only when the others cannot take the difference: so that setting a sum
// moves the list's maximum and minimum as little as it can. Along sums,
// every entry moves one way only.
func spread(v, floor []int64, sum int64) ([]int64, bool) {
	out := slices.Clone(v)
	if len(out) == 0 {
		return nil, false
	}
	lowest := func(i int) int64 {
		if floor == nil {
			return 0
		}
		return floor[i]
	}
	hi, lo := 0, 0 // the first largest and smallest entries
	var total int64
	for i, x := range out {
		if x > out[hi] {
			hi = i
		}
		if x < out[lo] {
			lo = i
		}
		total += x
	}
	delta := sum - total
	// The others first, between the minimum and the maximum; then the
	// smallest or the largest entry, which moves an extreme.
	order := make([]int, 0, len(out))
	for i := range out {
		if i != hi && i != lo {
			order = append(order, i)
		}
	}
	top, bottom := out[hi], out[lo]
	if delta > 0 {
		order = append(order, lo)
		for _, i := range order {
			room := top - out[i]
			add := min(room, delta)
			out[i] += add
			delta -= add
		}
		out[hi] += delta
		return out, true
	}
	order = append(order, hi)
	for _, i := range order {
		room := out[i] - max(bottom, lowest(i))
		sub := min(room, -delta)
		out[i] -= sub
		delta += sub
	}
	for i := range out {
		sub := min(out[i]-lowest(i), -delta)
		out[i] -= sub
		delta += sub
	}
	return out, delta == 0
}

// setAggregate returns a copy of v whose sum, maximum or minimum (by q)
// is x, no entry below its floor (nil: 0). A sum is spread (spread); a
// maximum sets the first entry and lowers the others to it, a minimum sets
// the first and raises the others.
func setAggregate(v, floor []int64, q core.Quantity, x int64) ([]int64, bool) {
	switch q {
	case core.QuantityPrefixSum, core.QuantitySeqSum:
		return spread(v, floor, x)
	}
	out := slices.Clone(v)
	for i := range out {
		if q == core.QuantityPrefixMax || q == core.QuantitySeqMax {
			out[i] = min(out[i], x)
		} else {
			out[i] = max(out[i], x)
		}
		if floor != nil {
			out[i] = max(out[i], floor[i])
		}
	}
	out[0] = x
	return out, true
}

// grow pads a known list shorter than n to n entries with pad.
func grow(v []int64, n int, pad int64) []int64 {
	if v == nil || len(v) >= n {
		return v
	}
	return resize(v, n, pad, true)
}

// resize makes a length list of n entries, keeping the first ones and
// padding with pad; a list not known stays so unless force.
func resize(v []int64, n int, pad int64, force bool) []int64 {
	if v == nil && !force {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		if i < len(v) {
			out[i] = v[i]
		} else {
			out[i] = pad
		}
	}
	return out
}

// setFlag sets a flag quantity; dsa_use_mha_given is set through
// dsa_use_mha_set, and cleared with dsa_use_mha.
func setFlag(r *core.Request, q core.Quantity, v int64) bool {
	on := v == 1
	if v != 0 && v != 1 {
		return false
	}
	// One case per flag, the write side of core's Quantity.Value: core has no
	// setter, and probing is the one place that sets a quantity by value.
	rt, l := &r.Runtime, &r.Layer
	switch q {
	case core.QuantityPiecewiseCUDAGraph:
		rt.PiecewiseCUDAGraph = on
	case core.QuantityBreakableCUDAGraph:
		rt.BreakableCUDAGraph = on
	case core.QuantityDeterministicInference:
		rt.DeterministicInference = on
	case core.QuantityDSAUseMHA:
		rt.DSAUseMHA = on
	case core.QuantityDSAUseMHASet:
		rt.DSAUseMHASet = on
	case core.QuantityDSAUseMHAGiven:
		rt.DSAUseMHASet = on
		if !on {
			rt.DSAUseMHA = false
		}
	case core.QuantityTwoBatchOverlap:
		rt.TwoBatchOverlap = on
	case core.QuantityMLAPrefillCP:
		r.Batch.MLAPrefillCP = on
	case core.QuantityDisableChunkedPrefixCache:
		l.DisableChunkedPrefixCache = on
	case core.QuantityFlashinferMLADisableRagged:
		l.FlashinferMLADisableRagged = on
	case core.QuantityROCmFusedDecodeMLA:
		l.ROCmFusedDecodeMLA = on
	case core.QuantityUseDSA:
		l.UseDSA = on
	case core.QuantityFusedQKVAProjWithMQA:
		l.FusedQKVAProjWithMQA = on
	case core.QuantityIntelAMX:
		l.IntelAMX = on
	default:
		return false
	}
	return r.Validate() == nil && q.Value(r) == v
}

// valueString shows a quantity's value: a mode, platform or dtype by its
// name, a number as it is.
func valueString(q core.Quantity, v int64) string {
	switch q {
	case core.QuantityForwardMode:
		return core.ForwardMode(v).String()
	case core.QuantityPlatform:
		return core.Platform(v).String()
	case core.QuantityKVCacheDType:
		if v <= 0 || v > int64(len(core.KVCacheDTypes())) {
			return `""`
		}
		return core.KVCacheDTypes()[v-1]
	}
	return fmt.Sprint(v)
}

// changed lists the quantities whose values differ between a and b, as
// "prefix_sum 999→1000", the backend name aside.
func changed(a, b *core.Request) []string {
	var out []string
	for _, q := range core.Quantities() {
		va, vb := q.Value(a), q.Value(b)
		if q != core.QuantityBackend && va != vb {
			out = append(out, fmt.Sprintf("%s %s→%s", q, valueString(q, va), valueString(q, vb)))
		}
	}
	return out
}

// declString shows the declarations of q in decls: "[1000 16384]", or
// "none".
func declString(q core.Quantity, decls []core.Read) string {
	for _, d := range decls {
		if d.Quantity == q {
			if len(d.At) == 0 {
				return "declared"
			}
			return fmt.Sprint(d.At)
		}
	}
	return "none"
}

// readsString lists a plan's declarations, or "nothing".
func readsString(decls []core.Read) string {
	if len(decls) == 0 {
		return "nothing"
	}
	parts := make([]string, len(decls))
	for i, d := range decls {
		parts[i] = d.String()
	}
	return strings.Join(parts, ", ")
}
