package ruletest

import (
	"math/rand/v2"

	"github.com/attnplug/attnplug/core"
)

// Domain is the space Random draws requests from: the values the rules
// under test compare against, so that many requests share a key and both
// sides of every threshold are met. A field left empty draws the zero
// value, but for Modes and Platforms (every one).
type Domain struct {
	// Names are the backend names asked; default "random".
	Names []string
	// Modes are the forward modes; default core.ForwardModes().
	Modes []core.ForwardMode
	// Platforms are the platforms; default every one, unset included.
	Platforms []core.Platform
	// ComputeCaps and KVDTypes are the devices' capabilities and the KV
	// cache dtypes.
	ComputeCaps []int
	KVDTypes    []string
	// Counts are the numbers of sequences of a batch.
	Counts []int
	// PrefixSums are the totals the prefix lengths sit on and around (by
	// up to 2), spread over the sequences; Extends are what each sequence
	// adds to its prefix, on and around.
	PrefixSums, Extends []int64
	// Capacities are the max_chunk_capacity values, on and around; the
	// batch's total length is one of them, always.
	Capacities []int64
	// Thresholds are the layers' chunked_prefix_cache_threshold values.
	Thresholds []int64
	// FlagOneIn sets each boolean fact of the request one time in
	// FlagOneIn; default 2. The override that takes the choice from the
	// rules (dsa_use_mha, dsa_use_mha_set) is rarer: each one time in
	// 4*FlagOneIn, so that most requests leave it to them.
	FlagOneIn int
}

// Random returns n valid requests drawn from d with rng: the one
// generator of random requests of the tests (the fixed requests of a
// conformance run are conformance.GenerateRequests; the lines sglang's
// code is compared on are reference.Generate's JSON). A third of the
// batches give only prefix lengths, a third only sequence lengths.
func Random(rng *rand.Rand, d Domain, n int) []core.Request {
	if len(d.Modes) == 0 {
		d.Modes = core.ForwardModes()
	}
	if len(d.Platforms) == 0 {
		d.Platforms = []core.Platform{core.PlatformUnset, core.PlatformCUDA, core.PlatformHIP, core.PlatformNPU, core.PlatformXPU, core.PlatformCPU}
	}
	if len(d.Names) == 0 {
		d.Names = []string{"random"}
	}
	if d.FlagOneIn <= 0 {
		d.FlagOneIn = 2
	}
	out := make([]core.Request, 0, n)
	for len(out) < n {
		r := core.NewRequest(pick(rng, d.Names, ""), pick(rng, d.Modes, core.ModeDecode))
		d.facts(rng, &r)
		d.lengths(rng, &r.Batch)
		r.Batch.MaxChunkCapacity = near(rng, r.Batch.SeqSum())
		if i := rng.IntN(len(d.Capacities) + 1); i < len(d.Capacities) {
			r.Batch.MaxChunkCapacity = near(rng, d.Capacities[i])
		}
		if r.Validate() == nil {
			out = append(out, r)
		}
	}
	return out
}

// facts draws the request's facts other than its lengths.
func (d *Domain) facts(rng *rand.Rand, r *core.Request) {
	flag := func() bool { return rng.IntN(d.FlagOneIn) == 0 }
	r.Runtime.Platform = pick(rng, d.Platforms, core.PlatformUnset)
	r.Runtime.ComputeCapability = pick(rng, d.ComputeCaps, 0)
	r.Runtime.KVCacheDType = pick(rng, d.KVDTypes, "")
	r.Layer.ChunkedPrefixCacheThreshold = pick(rng, d.Thresholds, 0)
	for _, b := range []*bool{
		&r.Layer.DisableChunkedPrefixCache, &r.Layer.FlashinferMLADisableRagged, &r.Layer.ROCmFusedDecodeMLA,
		&r.Layer.UseDSA, &r.Layer.FusedQKVAProjWithMQA, &r.Layer.IntelAMX, &r.Batch.MLAPrefillCP,
		&r.Runtime.PiecewiseCUDAGraph, &r.Runtime.BreakableCUDAGraph, &r.Runtime.DeterministicInference,
		&r.Runtime.TwoBatchOverlap,
	} {
		*b = flag()
	}
	r.Runtime.DSAUseMHA = rng.IntN(4*d.FlagOneIn) == 0
	r.Runtime.DSAUseMHASet = rng.IntN(4*d.FlagOneIn) == 0
}

// lengths draws the batch's prefix and sequence lengths.
func (d *Domain) lengths(rng *rand.Rand, b *core.Batch) {
	count := pick(rng, d.Counts, 0)
	prefix, seq := make([]int64, count), make([]int64, count)
	left := near(rng, pick(rng, d.PrefixSums, 0))
	for i := range prefix {
		prefix[i] = left
		if i < count-1 {
			prefix[i] = rng.Int64N(left + 1)
		}
		left -= prefix[i]
		seq[i] = prefix[i] + near(rng, pick(rng, d.Extends, 0))
	}
	switch rng.IntN(3) {
	case 0:
		b.ExtendPrefixLens, b.SeqLens = prefix, seq
	case 1:
		b.ExtendPrefixLens = prefix
	case 2:
		b.SeqLens = seq
	}
}

// pick returns one of vals, or def when there is none.
func pick[T any](rng *rand.Rand, vals []T, def T) T {
	if len(vals) == 0 {
		return def
	}
	return vals[rng.IntN(len(vals))]
}

// near returns x or a value up to 2 away from it, not below 0.
func near(rng *rand.Rand, x int64) int64 { return max(0, x+rng.Int64N(5)-2) }
