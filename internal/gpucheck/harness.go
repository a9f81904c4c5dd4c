package gpucheck

import (
	"math"
	"math/rand/v2"

	"github.com/attnplug/attnplug/devicehost"
)

// The harness of the GPU tests is package devicehost's, which
// attnplug run --device cuda, bench --gpu and conform also run; these
// names keep the tests short.

type (
	Env         = devicehost.Env
	Case        = devicehost.Case
	Batch       = devicehost.Batch
	Check       = devicehost.Check
	PrefillCase = devicehost.PrefillCase
	QuantCase   = devicehost.QuantCase
)

const (
	Scale     = devicehost.Scale
	MaxRelErr = devicehost.MaxRelErr
	MaxLSEErr = devicehost.MaxLSEErr
)

var (
	Open          = devicehost.Open
	PrefillScale  = devicehost.PrefillScale
	DecodeShapes  = devicehost.DecodeShapes
	PrefillShapes = devicehost.PrefillShapes
	RunBench      = devicehost.RunBench
	bf16          = devicehost.BF16
	parallel      = devicehost.Parallel
)

// RandomCase draws a batch: heads, page size, batch size and query length
// from the given choices, lengths ragged in [qlen, maxLen] with keys
// totalling at most maxKeys.
func RandomCase(rng *rand.Rand, name string, heads, pageSizes, batches []int, maxQ int, maxLen, maxKeys int64) Case {
	c := Case{Name: name, Heads: heads[rng.IntN(len(heads))], PageSize: pageSizes[rng.IntN(len(pageSizes))], Seed: rng.Uint64()}
	n := batches[rng.IntN(len(batches))]
	q := int64(1 + rng.IntN(maxQ))
	cap := max(maxKeys/int64(n), q)
	for range n {
		hi := min(maxLen, cap)
		l := q + rng.Int64N(max(hi-q+1, 1))
		if rng.IntN(4) == 0 {
			l = q + rng.Int64N(min(hi-q+1, 64)) // some short ones
		}
		c.SeqLens = append(c.SeqLens, l)
		c.QLens = append(c.QLens, q)
	}
	return c
}

// Agreement is the relative difference between two methods' outputs on
// the same batch, over every element.
func Agreement(a, b []uint16) float64 {
	var num, den float64
	for i := range a {
		x, y := bf16(a[i]), bf16(b[i])
		num += (x - y) * (x - y)
		den += y * y
	}
	return math.Sqrt(num / den)
}
