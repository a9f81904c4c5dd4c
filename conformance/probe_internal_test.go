package conformance

import (
	"math/rand/v2"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestSetQuantity: on random requests, every quantity set to values of its
// ladder, around thresholds and at random either leaves a valid request
// where the quantity has the value, or says it cannot; nothing panics.
func TestSetQuantity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	set, refused := 0, 0
	for n := 0; n < 300; n++ {
		base := randomRequest("x", rng, n%2 == 0)
		if err := base.Validate(); err != nil {
			t.Fatalf("randomRequest gave an invalid request: %v", err)
		}
		for _, q := range core.Quantities() {
			for _, v := range probeValues(q, []int64{1000, -5}, &base, rng) {
				r := base
				if !setQuantity(&r, q, v) {
					refused++
					continue
				}
				set++
				if err := r.Validate(); err != nil || q.Value(&r) != v {
					t.Fatalf("%s = %d on %s: valid %v, value %d", q, v, describe(&base), err, q.Value(&r))
				}
			}
		}
	}
	if set < 3*refused {
		t.Errorf("%d set, %d refused: the setters refuse too often", set, refused)
	}
}

// TestSpreadMonotone: along sums, every entry of spread moves one way, so
// a bisection over a sum stays in one key class.
func TestSpreadMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 200; n++ {
		v := make([]int64, 1+rng.IntN(6))
		floor := make([]int64, len(v))
		for i := range v {
			floor[i] = rng.Int64N(50)
			v[i] = floor[i] + rng.Int64N(500)
		}
		var prev []int64
		for sum := int64(0); sum < 4000; sum += 7 {
			out, ok := spread(v, floor, sum)
			if !ok {
				continue
			}
			var total int64
			for i, x := range out {
				total += x
				if x < floor[i] {
					t.Fatalf("spread(%v, floor %v, %d) = %v: below the floor", v, floor, sum, out)
				}
				if prev != nil && x < prev[i] {
					t.Fatalf("spread(%v, %d) = %v after %v: entry %d went down", v, sum, out, prev, i)
				}
			}
			if total != sum {
				t.Fatalf("spread(%v, %d) = %v adds up to %d", v, sum, out, total)
			}
			prev = out
		}
	}
}
