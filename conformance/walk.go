package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Explaining an undeclared read. Two requests with the same key and
// different answers show that the rules read something their declarations
// do not: the suite walks from one request to the other a field at a time
// (the mode, the platform, the dtype, each flag, the capability, the
// capacity, the threshold, then each length, a sequence before its prefix
// when it grows), asking each step. The first step that changes the answer
// without changing the key is where the undeclared read lies; when that
// field is a number, the suite bisects it to two adjacent values, and
// reports the quantities of core's vocabulary that change there.

// field is one thing a walk sets on a request.
type field struct {
	name   string
	number bool // bisectable
	whole  bool // both length lists at once: always a step
	get    func(*core.Request) int64
	set    func(*core.Request, int64)
}

// scalarFields are the fields of a request besides its length lists.
func scalarFields() []field {
	f := func(name string, number bool, get func(*core.Request) int64, set func(*core.Request, int64)) field {
		return field{name: name, number: number, get: get, set: set}
	}
	out := []field{
		f("forward_mode", false, func(r *core.Request) int64 { return int64(r.Batch.Mode) }, func(r *core.Request, v int64) { r.Batch.Mode = core.ForwardMode(v) }),
		f("runtime.platform", false, func(r *core.Request) int64 { return int64(r.Runtime.Platform) }, func(r *core.Request, v int64) { r.Runtime.Platform = core.Platform(v) }),
		f("runtime.kv_cache_dtype", false, core.QuantityKVCacheDType.Value, func(r *core.Request, v int64) { setQuantity(r, core.QuantityKVCacheDType, v) }),
	}
	for _, q := range core.Quantities() {
		if q.Kind() == core.KindFlag && q != core.QuantityDSAUseMHAGiven {
			out = append(out, f(q.String(), false, q.Value, func(r *core.Request, v int64) { setFlag(r, q, v) }))
		}
	}
	return append(out,
		f("runtime.compute_capability", true, core.QuantityComputeCapability.Value, func(r *core.Request, v int64) { r.Runtime.ComputeCapability = int(v) }),
		f("max_chunk_capacity", true, core.QuantityMaxChunkCapacity.Value, func(r *core.Request, v int64) { r.Batch.MaxChunkCapacity = v }),
		f("layer.chunked_prefix_cache_threshold", true, core.QuantityChunkedPrefixCacheThreshold.Value, func(r *core.Request, v int64) { r.Layer.ChunkedPrefixCacheThreshold = v }),
	)
}

// listFields are the steps from a's length lists to b's: entry by entry
// when both have lists of the same lengths (a sequence before its prefix
// when it grows, so that every step is valid), else one step for both
// lists whole.
func listFields(a, b *core.Request) []field {
	pa, pb, sa, sb := a.Batch.ExtendPrefixLens, b.Batch.ExtendPrefixLens, a.Batch.SeqLens, b.Batch.SeqLens
	known := (pa == nil) == (pb == nil) && (sa == nil) == (sb == nil)
	if known && max(len(pa), len(sa)) != max(len(pb), len(sb)) && (pa == nil || sa == nil || len(pa) == len(sa)) {
		// First the batch size: a's entries, then b's, to b's size.
		size := field{
			name:   "the number of requests",
			number: true,
			get:    func(r *core.Request) int64 { return int64(max(len(r.Batch.ExtendPrefixLens), len(r.Batch.SeqLens))) },
			set: func(r *core.Request, v int64) {
				r.Batch.ExtendPrefixLens = splice(r.Batch.ExtendPrefixLens, pb, int(v))
				r.Batch.SeqLens = splice(r.Batch.SeqLens, sb, int(v))
			},
		}
		return append([]field{size}, entryFields(pb, sb, pb, sb)...)
	}
	same := known && len(pa) == len(pb) && len(sa) == len(sb)
	if !same {
		return []field{{
			name:  "extend_prefix_lens and seq_lens",
			whole: true,
			get:   func(r *core.Request) int64 { return 0 },
			set: func(r *core.Request, _ int64) {
				r.Batch.ExtendPrefixLens, r.Batch.SeqLens = pb, sb
			},
		}}
	}
	return entryFields(pa, sa, pb, sb)
}

// splice returns the list of n entries: v's, then to's from len(v) on; a
// list not known stays so.
func splice(v, to []int64, n int) []int64 {
	if v == nil {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		if i < len(v) {
			out[i] = v[i]
		} else if i < len(to) {
			out[i] = to[i]
		}
	}
	return out
}

// entryFields are the steps of lists of the same lengths, entry by entry:
// from (pa, sa) to (pb, sb).
func entryFields(pa, sa, pb, sb []int64) []field {
	var out []field
	entry := func(name string, i int, seqs bool) field {
		list := func(r *core.Request) []int64 {
			if seqs {
				return r.Batch.SeqLens
			}
			return r.Batch.ExtendPrefixLens
		}
		return field{
			name:   fmt.Sprintf("%s[%d]", name, i),
			number: true,
			get:    func(r *core.Request) int64 { return list(r)[i] },
			set: func(r *core.Request, v int64) {
				l := append([]int64(nil), list(r)...)
				l[i] = v
				if seqs {
					r.Batch.SeqLens = l
				} else {
					r.Batch.ExtendPrefixLens = l
				}
			},
		}
	}
	for i := range max(len(pb), len(sb)) {
		p := entry("extend_prefix_lens", i, false)
		s := entry("seq_lens", i, true)
		switch {
		case pb == nil:
			out = append(out, s)
		case sb == nil:
			out = append(out, p)
		case i < len(sa) && sb[i] < sa[i]:
			out = append(out, p, s)
		default:
			out = append(out, s, p)
		}
	}
	return out
}

// explain walks from request a of name i to request b (same key, other
// answers) and says what the rules read there.
func (s *suite) explain(ctx context.Context, i int, a, b core.Request, ma, mb core.Method) string {
	h, plan := s.cov.names[i], s.cov.plans[i]
	decls, where := declaredFor(&h.Reads, &a) // a and b share a key: the same condition holds in both
	plain := fmt.Sprintf("%s%s reads more than it declares (%s): these requests have the same key but got %s and %s: [%s] and [%s]",
		h.Name, where, readsString(decls), ma, mb, describe(&a), describe(&b))
	if s.dead != nil {
		return plain
	}
	if !s.sameAgain(ctx, &a, ma) || !s.sameAgain(ctx, &b, mb) {
		return plain + "; asked again, the answers changed (see determinism)"
	}
	cur, mc := a, ma
	for _, f := range append(scalarFields(), listFields(&a, &b)...) {
		if s.dead != nil {
			break
		}
		if !f.whole && f.get(&cur) == f.get(&b) {
			continue
		}
		next := cur
		f.set(&next, f.get(&b))
		if next.Validate() != nil {
			continue
		}
		mn, _, err := s.dispatch(ctx, &next)
		if err != nil {
			return plain
		}
		if mn != mc && plan.Key(&next) == plan.Key(&cur) {
			lo, hi, mlo, mhi := cur, next, mc, mn
			if f.number {
				lo, hi, mlo, mhi = s.bisect(ctx, f, lo, hi, mlo, mhi)
			}
			if !s.sameAgain(ctx, &lo, mlo) || !s.sameAgain(ctx, &hi, mhi) {
				return plain + "; asked again, the answers changed (see determinism)"
			}
			heads := headQuantities(&lo, &hi)
			if len(heads) > 1 {
				if q, ok := s.isolate(ctx, plan, &lo, &hi, mlo, mhi, heads); ok {
					heads = []core.Quantity{q}
				}
			}
			decls, where := declaredFor(&h.Reads, &lo) // the walk may have left a's condition
			return undeclared(h.Name+where, decls, heads, &lo, &hi, mlo, mhi)
		}
		cur, mc = next, mn
	}
	return plain
}

// sameAgain asks r again and reports whether it gets m.
func (s *suite) sameAgain(ctx context.Context, r *core.Request, m core.Method) bool {
	got, _, err := s.dispatch(ctx, r)
	return err == nil && got == m
}

// maxBisect bounds the calls of one bisection: more than the 64 steps any
// int64 range needs.
const maxBisect = 70

// bisect narrows the field f between lo (answered mlo) and hi (answered
// mhi) to adjacent values, and returns the requests there with their
// answers. Every value between two of one field keeps the key.
func (s *suite) bisect(ctx context.Context, f field, lo, hi core.Request, mlo, mhi core.Method) (core.Request, core.Request, core.Method, core.Method) {
	for step := 0; step < maxBisect && s.dead == nil; step++ {
		a, b := f.get(&lo), f.get(&hi)
		if b-a <= 1 && a-b <= 1 {
			break
		}
		var mid int64
		if (a < 0) != (b < 0) {
			mid = (a + b) / 2
		} else {
			mid = a + (b-a)/2
		}
		r := lo
		f.set(&r, mid)
		if r.Validate() != nil {
			break
		}
		m, _, err := s.dispatch(ctx, &r)
		if err != nil {
			break
		}
		if m == mlo {
			lo = r
		} else {
			hi, mhi = r, m
		}
	}
	return lo, hi, mlo, mhi
}

// headQuantities are the quantities that change between lo and hi, but
// for a difference (prefix_sum_past_threshold, chunk_capacity_left) when
// one of its terms changes with it.
func headQuantities(lo, hi *core.Request) []core.Quantity {
	moved := func(q core.Quantity) bool { return q.Value(lo) != q.Value(hi) }
	var heads []core.Quantity
	for _, q := range core.Quantities() {
		if q == core.QuantityBackend || !moved(q) {
			continue
		}
		derived := (q == core.QuantityPrefixSumPastThreshold && (moved(core.QuantityPrefixSum) || moved(core.QuantityChunkedPrefixCacheThreshold))) ||
			(q == core.QuantityChunkCapacityLeft && (moved(core.QuantitySeqSum) || moved(core.QuantityMaxChunkCapacity))) ||
			(q == core.QuantityDSAUseMHAGiven && (moved(core.QuantityDSAUseMHA) || moved(core.QuantityDSAUseMHASet)))
		if !derived {
			heads = append(heads, q)
		}
	}
	return heads
}

// isolate finds, among the list quantities heads that change together
// between the adjacent requests lo and hi, the one that alone gives the
// other answer: for each, it builds requests of their key where that
// quantity has the other request's value and the rest stay, from either
// side, and asks them. It reports the single quantity that does.
func (s *suite) isolate(ctx context.Context, plan *core.KeyPlan, lo, hi *core.Request, mlo, mhi core.Method, heads []core.Quantity) (core.Quantity, bool) {
	var found []core.Quantity
	key := plan.Key(lo)
	for _, q := range heads {
		for _, side := range []struct {
			from, to *core.Request
			want     core.Method
		}{{lo, hi, mhi}, {hi, lo, mlo}} {
			hit := false
			for _, r := range alone(side.from, side.to, q, heads) {
				if plan.Key(&r) != key || s.dead != nil {
					continue
				}
				if m, _, err := s.dispatch(ctx, &r); err == nil && m == side.want {
					hit = true
					break
				}
			}
			if hit {
				found = append(found, q)
				break
			}
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0], true
}

// alone returns requests where q has hi's value and every other quantity
// of heads lo's: lo with one entry of q's list moved (for a sum, a maximum
// or a minimum), or with one entry added or removed that leaves the other
// aggregates as they are (for a count).
func alone(lo, hi *core.Request, q core.Quantity, heads []core.Quantity) []core.Request {
	var out []core.Request
	ok := func(r *core.Request) bool {
		if r.Validate() != nil || q.Value(r) != q.Value(hi) {
			return false
		}
		for _, o := range heads {
			if o != q && o.Value(r) != o.Value(lo) {
				return false
			}
		}
		return true
	}
	try := func(r core.Request) {
		if ok(&r) {
			out = append(out, r)
		}
	}
	seqs := q == core.QuantitySeqSum || q == core.QuantitySeqMax || q == core.QuantitySeqMin || q == core.QuantitySeqCount
	list := func(r *core.Request) *[]int64 {
		if seqs {
			return &r.Batch.SeqLens
		}
		return &r.Batch.ExtendPrefixLens
	}
	base := *list(lo)
	if q == core.QuantityPrefixCount || q == core.QuantitySeqCount {
		hiV, loV := core.QuantityPrefixMax.Value(lo), core.QuantityPrefixMin.Value(lo)
		if seqs {
			hiV, loV = core.QuantitySeqMax.Value(lo), core.QuantitySeqMin.Value(lo)
		}
		for _, pad := range [][2]int64{{0, 0}, {loV, loV}, {hiV, hiV}, {0, hiV}, {loV, hiV}} {
			r := *lo
			r.Batch.ExtendPrefixLens = appendKnown(r.Batch.ExtendPrefixLens, pad[0])
			r.Batch.SeqLens = appendKnown(r.Batch.SeqLens, pad[1])
			try(r)
		}
		for j := range base {
			r := *lo
			r.Batch.ExtendPrefixLens = dropKnown(r.Batch.ExtendPrefixLens, j)
			r.Batch.SeqLens = dropKnown(r.Batch.SeqLens, j)
			try(r)
		}
		return out
	}
	delta := q.Value(hi) - q.Value(lo)
	for j := range base {
		for _, d := range []int64{delta, -delta} {
			r := *lo
			l := slices.Clone(base)
			l[j] += d
			*list(&r) = l
			try(r)
			// A prefix may need its sequence to grow with it.
			if !seqs && r.Batch.SeqLens != nil && l[j] > r.Batch.SeqLens[j] {
				sl := slices.Clone(r.Batch.SeqLens)
				sl[j] = l[j]
				r.Batch.SeqLens = sl
				try(r)
			}
		}
	}
	return out
}

// dropKnown removes entry j of a list that is known.
func dropKnown(v []int64, j int) []int64 {
	if v == nil {
		return nil
	}
	return slices.Delete(slices.Clone(v), j, j+1)
}

// appendKnown appends x to a list that is known.
func appendKnown(v []int64, x int64) []int64 {
	if v == nil {
		return nil
	}
	return append(slices.Clone(v), x)
}

// undeclared says what the rules of name read between lo and hi, adjacent
// requests of one key with other answers: heads, the quantities that
// change there (one when isolate found it), with the threshold of a
// number, and every quantity that changes.
func undeclared(name string, decls []core.Read, heads []core.Quantity, lo, hi *core.Request, mlo, mhi core.Method) string {
	// Name the answers in the order of the quantity's values.
	if len(heads) > 0 && heads[0].Value(lo) > heads[0].Value(hi) {
		lo, hi, mlo, mhi = hi, lo, mhi, mlo
	}
	where := strings.Join(changed(lo, hi), ", ")
	var what string
	switch {
	case len(heads) == 1 && heads[0].Kind() == core.KindNumber:
		q := heads[0]
		at := q.Value(hi)
		what = fmt.Sprintf("reads %s at %d, which it does not declare (declared thresholds: %s); declare %s", q, at, declString(q, decls), core.Read{Quantity: q, At: []int64{at}})
	case len(heads) == 1:
		what = fmt.Sprintf("reads %s, which it does not declare", heads[0])
	default:
		names := make([]string, len(heads))
		for i, q := range heads {
			names[i] = q.String()
		}
		what = fmt.Sprintf("reads one of %s where they change together, which it does not declare", strings.Join(names, ", "))
	}
	return fmt.Sprintf("%s %s: the answer changes from %s to %s where %s, on [%s]", name, what, mlo, mhi, where, describe(lo))
}
