package core_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestQuantityNames(t *testing.T) {
	kinds := map[core.QuantityKind]int{}
	for _, q := range core.Quantities() {
		back, err := core.ParseQuantity(q.String())
		if err != nil || back != q {
			t.Errorf("ParseQuantity(%q): got %v, %v, want %v", q.String(), back, err, q)
		}
		kinds[q.Kind()]++
	}
	if kinds[core.KindValue] != 4 || kinds[core.KindFlag] != 14 || kinds[core.KindNumber] != 13 {
		t.Errorf("kinds: %v", kinds)
	}
	if _, err := core.ParseQuantity("prefix_total"); err == nil || !strings.Contains(err.Error(), "prefix_sum") {
		t.Errorf("ParseQuantity of an unknown name: got %v, want an error listing the names", err)
	}
	if q := core.Quantity(200); q.Valid() || q.Kind() != 0 || q.String() != "Quantity(200)" {
		t.Errorf("Quantity(200): valid %v, kind %v, %s", q.Valid(), q.Kind(), q)
	}
}

func TestQuantityValues(t *testing.T) {
	r := req(core.ModeTargetVerify, prefix(5, 100, 20), seq(10, 3000, 25), capacity(4000), threshold(120), hip, cc(103), kvDType("fp8_e5m2"), piecewise, dsaUseMHA, amx)
	unknown := req(core.ModeDecode, capacity(-5), threshold(math.MinInt64))
	tests := []struct {
		q    core.Quantity
		r    core.Request
		want int64
	}{
		{core.QuantityForwardMode, r, int64(core.ModeTargetVerify)},
		{core.QuantityPlatform, r, int64(core.PlatformHIP)},
		{core.QuantityKVCacheDType, r, 7},
		{core.QuantityKVCacheDType, unknown, 0},
		{core.QuantityComputeCapability, r, 103},
		{core.QuantityPrefixSum, r, 125},
		{core.QuantityPrefixMax, r, 100},
		{core.QuantityPrefixMin, r, 5},
		{core.QuantityPrefixCount, r, 3},
		{core.QuantitySeqSum, r, 3035},
		{core.QuantitySeqMax, r, 3000},
		{core.QuantitySeqMin, r, 10},
		{core.QuantitySeqCount, r, 3},
		{core.QuantityMaxChunkCapacity, r, 4000},
		{core.QuantityChunkCapacityLeft, r, 965},
		{core.QuantityChunkedPrefixCacheThreshold, r, 120},
		{core.QuantityPrefixSumPastThreshold, r, 5},
		{core.QuantityPiecewiseCUDAGraph, r, 1},
		{core.QuantityBreakableCUDAGraph, r, 0},
		{core.QuantityDSAUseMHA, r, 1},
		{core.QuantityDSAUseMHASet, r, 0},
		{core.QuantityDSAUseMHAGiven, r, 1},
		{core.QuantityIntelAMX, r, 1},
		{core.QuantityBackend, r, 0},
		// Lists not known: sums, maxima and minima 0, counts -1.
		{core.QuantityPrefixSum, unknown, 0},
		{core.QuantitySeqMax, unknown, 0},
		{core.QuantityPrefixCount, unknown, -1},
		{core.QuantitySeqCount, unknown, -1},
		{core.QuantityChunkCapacityLeft, unknown, -5},
		// 0 - MinInt64 saturates instead of wrapping.
		{core.QuantityPrefixSumPastThreshold, unknown, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := tt.q.Value(&tt.r); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.q, got, tt.want)
		}
	}
	empty := req(core.ModeDecode, seq([]int64{}...))
	if got := core.QuantitySeqCount.Value(&empty); got != 0 {
		t.Errorf("seq_count of an empty list: got %d, want 0", got)
	}
}

// setQuantity returns r changed so that q is v, or false when this test
// cannot set q to v. Lists of two entries carry the list quantities.
func setQuantity(r core.Request, q core.Quantity, v int64) (core.Request, bool) {
	b := &r.Batch
	switch q {
	case core.QuantityComputeCapability:
		r.Runtime.ComputeCapability = int(v)
	case core.QuantityPrefixSum:
		b.ExtendPrefixLens, b.SeqLens = []int64{v / 2, v - v/2}, []int64{v, v}
	case core.QuantityPrefixMax:
		b.ExtendPrefixLens, b.SeqLens = []int64{0, v}, []int64{v, v}
	case core.QuantityPrefixMin:
		b.ExtendPrefixLens, b.SeqLens = []int64{v, v + 5}, []int64{v + 5, v + 5}
	case core.QuantitySeqSum:
		b.ExtendPrefixLens, b.SeqLens = nil, []int64{v / 2, v - v/2}
	case core.QuantitySeqMax:
		b.ExtendPrefixLens, b.SeqLens = nil, []int64{0, v}
	case core.QuantitySeqMin:
		b.ExtendPrefixLens, b.SeqLens = nil, []int64{v, v + 5}
	case core.QuantityPrefixCount:
		if v < 0 {
			b.ExtendPrefixLens = nil
		} else {
			b.ExtendPrefixLens, b.SeqLens = make([]int64, v), make([]int64, v)
		}
	case core.QuantitySeqCount:
		if v < 0 {
			b.SeqLens = nil
		} else {
			b.ExtendPrefixLens, b.SeqLens = nil, make([]int64, v)
		}
	case core.QuantityMaxChunkCapacity:
		b.MaxChunkCapacity = v
	case core.QuantityChunkCapacityLeft:
		b.SeqLens, b.ExtendPrefixLens, b.MaxChunkCapacity = []int64{100}, nil, 100+v
	case core.QuantityChunkedPrefixCacheThreshold:
		r.Layer.ChunkedPrefixCacheThreshold = v
	case core.QuantityPrefixSumPastThreshold:
		b.ExtendPrefixLens, b.SeqLens, r.Layer.ChunkedPrefixCacheThreshold = []int64{500}, []int64{500}, 500-v
	default:
		return r, false
	}
	return r, r.Validate() == nil && q.Value(&r) == v
}

// TestKeyPerQuantity checks, for every number, that a declared threshold
// t splits t-1 from t and keeps t and t+1 together, that an undeclared
// number changes no key, and, for every value and flag, that declaring it
// tells its values apart.
func TestKeyPerQuantity(t *testing.T) {
	base := req(core.ModeExtend, prefix(100, 0), seq(200, 50), capacity(1000))
	for _, q := range core.Quantities() {
		t.Run(q.String(), func(t *testing.T) {
			switch q.Kind() {
			case core.KindNumber:
				const th = 10
				lo, ok1 := setQuantity(base, q, th-1)
				at, ok2 := setQuantity(base, q, th)
				hi, ok3 := setQuantity(base, q, th+1)
				if !ok1 || !ok2 || !ok3 {
					t.Fatalf("cannot set %s around %d", q, th)
				}
				declared := core.Reads{Quantities: []core.Read{{Quantity: q, At: []int64{th}}}}
				p, err := declared.Plan()
				if err != nil {
					t.Fatal(err)
				}
				if p.Key(&lo) == p.Key(&at) {
					t.Errorf("%d and %d across the threshold %d: equal keys", th-1, th, th)
				}
				if p.Key(&at) != p.Key(&hi) {
					t.Errorf("%d and %d on the same side of %d: different keys", th, th+1, th)
				}
				all := core.Reads{Facts: core.AllFacts}
				if q != core.QuantityPrefixSum && q != core.QuantityPrefixSumPastThreshold && q != core.QuantityChunkCapacityLeft &&
					q != core.QuantityComputeCapability && all.Key(&at) != all.Key(&hi) && q != core.QuantityChunkedPrefixCacheThreshold {
					t.Errorf("not declared, but keys differ")
				}
			case core.KindFlag, core.KindValue:
				p, err := (&core.Reads{Quantities: []core.Read{{Quantity: q}}}).Plan()
				if err != nil {
					t.Fatal(err)
				}
				a, b := base, base
				switch q {
				case core.QuantityBackend:
					b.Backend = "other"
					if p.Key(&a) != p.Key(&b) || p.Bits() != 0 {
						t.Errorf("the backend name takes no key bits: a host caches per name")
					}
					return
				case core.QuantityForwardMode:
					b.Batch.Mode = core.ModeDLLMExtend
				case core.QuantityPlatform:
					b.Runtime.Platform = core.PlatformCPU
				case core.QuantityKVCacheDType:
					a.Runtime.KVCacheDType, b.Runtime.KVCacheDType = "fp8_e4m3", "fp8_e5m2"
				case core.QuantityDSAUseMHAGiven:
					b.Runtime.DSAUseMHASet = true
				default:
					for _, set := range []func(*core.Request){piecewise, breakable, deterministic, dsaUseMHA, dsaSet, tbo, prefillCP, noChunked, noRagged, fusedDecode, useDSA, fusedQKV, amx} {
						c := base
						set(&c)
						if q.Value(&c) == 1 {
							b = c
						}
					}
				}
				if q.Value(&a) == q.Value(&b) {
					t.Fatalf("test requests do not differ in %s", q)
				}
				if p.Key(&a) == p.Key(&b) {
					t.Errorf("declared %s: values %d and %d share a key", q, q.Value(&a), q.Value(&b))
				}
			}
		})
	}
}

// TestFactsAreDeclarations checks that each fact keys requests as the
// predicate it names: two requests with the same key under the fact agree
// on it (and, for all but the two facts whose declaration is finer, two
// that agree on it have the same key).
func TestFactsAreDeclarations(t *testing.T) {
	// Holds is each fact's predicate (TestFactHolds checks it).
	facts := []core.Fact{core.FactPrefixSumZero, core.FactPrefixSumAtThreshold, core.FactSeqSumWithinCapacity,
		core.FactDSAUseMHASet, core.FactDenseDSADevice, core.FactKVCacheDenseDType}
	finer := map[core.Fact]bool{core.FactDenseDSADevice: true, core.FactKVCacheDenseDType: true}
	reqs := randomRequests(3000, 11)
	for _, f := range facts {
		pred := f.Holds
		t.Run(f.String(), func(t *testing.T) {
			p, err := (&core.Reads{Facts: f}).Plan()
			if err != nil {
				t.Fatal(err)
			}
			byKey := map[core.Key]bool{}
			byPred := map[bool]core.Key{}
			for i := range reqs {
				k, v := p.Key(&reqs[i]), pred(&reqs[i])
				if w, ok := byKey[k]; ok && w != v {
					t.Fatalf("key %#x holds requests on both sides of %s", k, f)
				}
				byKey[k] = v
				if k0, ok := byPred[v]; ok && k0 != k && !finer[f] {
					t.Fatalf("%s = %v for keys %#x and %#x: the declaration is finer than the fact", f, v, k0, k)
				}
				byPred[v] = k
			}
			if len(byPred) != 2 {
				t.Errorf("the requests do not cover both sides of %s", f)
			}
		})
	}
	if got := core.FactDenseDSADevice.Reads(); len(got) != 1 || got[0].Quantity != core.QuantityComputeCapability || !slices.Equal(got[0].At, []int64{90, 91, 100, 110}) {
		t.Errorf("dense_dsa_device: %v", got)
	}
	if got := core.AllFacts.Reads(); len(got) != 20 {
		t.Errorf("AllFacts.Reads: %d declarations, want 20: %v", len(got), got)
	}
}

func TestDeclarationsMerge(t *testing.T) {
	r := core.Reads{
		Facts:            core.FactMode | core.FactPrefixSumZero,
		PrefixSumAtLeast: []int64{16384},
		SeqSumAtMost:     []int64{100, math.MaxInt64},
		Quantities: []core.Read{
			{Quantity: core.QuantityPrefixSum, At: []int64{1000, 1}},
			{Quantity: core.QuantityForwardMode},
			{Quantity: core.QuantitySeqMax, At: []int64{2049}},
		},
	}
	got := r.Declarations()
	want := []core.Read{
		{Quantity: core.QuantityForwardMode},
		{Quantity: core.QuantityPrefixSum, At: []int64{1, 1000, 16384}},
		{Quantity: core.QuantitySeqSum, At: []int64{101}},
		{Quantity: core.QuantitySeqMax, At: []int64{2049}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Quantity != want[i].Quantity || !slices.Equal(got[i].At, want[i].At) {
			t.Errorf("declaration %d: got %v, want %v", i, got[i], want[i])
		}
	}
	p, err := r.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.Bits() != 4+2+1+1 {
		t.Errorf("bits: got %d (%s), want 8", p.Bits(), p)
	}
	// The order of the declarations does not change a key.
	shuffled := r
	shuffled.Quantities = []core.Read{r.Quantities[2], r.Quantities[0], r.Quantities[1]}
	for _, q := range randomRequests(500, 3) {
		if a, b := r.Key(&q), shuffled.Key(&q); a != b {
			t.Fatalf("shuffled declarations: keys %#x and %#x", a, b)
		}
	}
}

func TestReadsValidate(t *testing.T) {
	many := make([]int64, core.MaxReadThresholds+1)
	for i := range many {
		many[i] = int64(i)
	}
	wide := []core.Read{{Quantity: core.QuantityForwardMode}, {Quantity: core.QuantityPlatform}, {Quantity: core.QuantityKVCacheDType}}
	for _, q := range []core.Quantity{core.QuantityPrefixSum, core.QuantityPrefixMax, core.QuantitySeqSum, core.QuantitySeqMax, core.QuantitySeqMin, core.QuantityPrefixMin, core.QuantityMaxChunkCapacity} {
		wide = append(wide, core.Read{Quantity: q, At: many[:64]})
	}
	tests := []struct {
		name  string
		reads core.Reads
		want  string // "" for valid
	}{
		{"number", core.Reads{Quantities: []core.Read{{Quantity: core.QuantitySeqMax, At: []int64{2049}}}}, ""},
		{"value", core.Reads{Quantities: []core.Read{{Quantity: core.QuantityKVCacheDType}}}, ""},
		{"number_without_threshold", core.Reads{Quantities: []core.Read{{Quantity: core.QuantityPrefixSum}}}, "reads the number prefix_sum without a threshold"},
		{"flag_with_threshold", core.Reads{Quantities: []core.Read{{Quantity: core.QuantityUseDSA, At: []int64{1}}}}, "use_dsa is a flag and takes no thresholds"},
		{"unknown_quantity", core.Reads{Quantities: []core.Read{{Quantity: 99}}}, "reads Quantity(99), a quantity this host does not know"},
		{"too_many_thresholds", core.Reads{Quantities: []core.Read{{Quantity: core.QuantitySeqSum, At: many}}}, "65 thresholds on seq_sum, more than 64"},
		{"too_wide", core.Reads{Facts: core.AllFacts, Quantities: wide}, "need a key of"},
		{"unknown_fact", core.Reads{Facts: 1 << 30}, "unknown facts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.reads.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			case err != nil && !errors.Is(err, core.ErrProtocol):
				t.Errorf("errors.Is(err, ErrProtocol) is false: %v", err)
			}
			if tt.reads.Cacheable() != (tt.want == "") {
				t.Errorf("Cacheable: got %v", tt.reads.Cacheable())
			}
			if _, err := tt.reads.Plan(); (err == nil) != (tt.want == "") {
				t.Errorf("Plan: got %v", err)
			}
		})
	}
}

// TestKeyPlanParts checks that a key is its batch part and its layer part,
// for random declarations and requests.
func TestKeyPlanParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	reqs := randomRequests(400, 5)
	for n := 0; n < 50; n++ {
		var r core.Reads
		for _, q := range core.Quantities() {
			if rng.IntN(3) != 0 {
				continue
			}
			d := core.Read{Quantity: q}
			if q.Kind() == core.KindNumber {
				for i := 0; i < 1+rng.IntN(3); i++ {
					d.At = append(d.At, rng.Int64N(20000)-100)
				}
			}
			r.Quantities = append(r.Quantities, d)
		}
		p, err := r.Plan()
		if err != nil {
			continue
		}
		for i := range reqs {
			q := &reqs[i]
			ps, ss := q.Batch.PrefixSum(), q.Batch.SeqSum()
			if k, parts := p.Key(q), p.BatchKey(q, ps, ss)|p.LayerKey(&q.Layer, ps); k != parts {
				t.Fatalf("%s: Key %#x, parts %#x", p, k, parts)
			}
			if k := p.Key(q); uint64(k)>>core.KeyBits != 0 {
				t.Fatalf("%s: key %#x past %d bits", p, k, core.KeyBits)
			}
		}
	}
}

// TestShorthand: quantities with a form in facts and constants keep the
// same key classes in it; the others have none.
func TestShorthand(t *testing.T) {
	exact := core.Reads{Facts: core.FactUseDSA, Quantities: []core.Read{
		{Quantity: core.QuantityBackend}, {Quantity: core.QuantityForwardMode}, {Quantity: core.QuantityPiecewiseCUDAGraph},
		{Quantity: core.QuantityPrefixSum, At: []int64{16384}}, {Quantity: core.QuantitySeqMax, At: []int64{2049}},
		{Quantity: core.QuantitySeqSum, At: []int64{101}}, {Quantity: core.QuantityPrefixSumPastThreshold, At: []int64{0}},
		{Quantity: core.QuantityChunkCapacityLeft, At: []int64{0}}, {Quantity: core.QuantityDSAUseMHAGiven},
	}}
	short, ok := exact.Shorthand()
	if !ok || len(short.Quantities) != 0 || !slices.Equal(short.MaxSeqLenAtMost, []int64{2048}) || !slices.Equal(short.SeqSumAtMost, []int64{100}) {
		t.Fatalf("Shorthand: %+v, %v", short, ok)
	}
	a, b := exact.Declarations(), short.Declarations()
	if len(a) != len(b)+1 { // the backend name needs no form
		t.Errorf("declarations: %v and %v", a, b)
	}
	pa, _ := exact.Plan()
	pb, _ := short.Plan()
	reqs := randomRequests(2000, 9)
	classes, back := map[core.Key]core.Key{}, map[core.Key]core.Key{}
	for i := range reqs {
		ka, kb := pa.Key(&reqs[i]), pb.Key(&reqs[i])
		if k, ok := classes[ka]; ok && k != kb {
			t.Fatalf("one class of the quantities is two of the shorthand")
		}
		if k, ok := back[kb]; ok && k != ka {
			t.Fatalf("one class of the shorthand is two of the quantities: a cache by it would answer wrongly")
		}
		classes[ka], back[kb] = kb, ka
	}
	for _, q := range []core.Read{
		{Quantity: core.QuantityKVCacheDType}, {Quantity: core.QuantityComputeCapability, At: []int64{100}},
		{Quantity: core.QuantityMaxChunkCapacity, At: []int64{65536}}, {Quantity: core.QuantityPrefixSumPastThreshold, At: []int64{5}},
		{Quantity: core.QuantitySeqCount, At: []int64{4}},
	} {
		if _, ok := (&core.Reads{Quantities: []core.Read{q}}).Shorthand(); ok {
			t.Errorf("%s has a shorthand", q)
		}
	}
}
