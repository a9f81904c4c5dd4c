package conformance

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// altThreshold is a second chunked-prefix threshold the generated requests
// use, so that a rule that compares with a constant of its own while
// declaring the layer's threshold is caught.
const altThreshold = 4096

// toggle sets one boolean fact of a request.
type toggle struct {
	name string
	set  func(*core.Request)
}

// toggles returns the boolean facts the generated set varies one at a
// time, all at once and all but one, around a smaller base.
func toggles() []toggle {
	return []toggle{
		{"layer.disable_chunked_prefix_cache", func(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true }},
		{"layer.flashinfer_mla_disable_ragged", func(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true }},
		{"layer.rocm_fused_decode_mla", func(r *core.Request) { r.Layer.ROCmFusedDecodeMLA = true }},
		{"layer.use_dsa", func(r *core.Request) { r.Layer.UseDSA = true }},
		{"layer.fused_qkv_a_proj_with_mqa", func(r *core.Request) { r.Layer.FusedQKVAProjWithMQA = true }},
		{"layer.intel_amx", func(r *core.Request) { r.Layer.IntelAMX = true }},
		{"mla_prefill_cp", func(r *core.Request) { r.Batch.MLAPrefillCP = true }},
		{"runtime.deterministic_inference", func(r *core.Request) { r.Runtime.DeterministicInference = true }},
		{"runtime.dsa_use_mha", func(r *core.Request) { r.Runtime.DSAUseMHA = true }},
		{"runtime.two_batch_overlap", func(r *core.Request) { r.Runtime.TwoBatchOverlap = true }},
		{"runtime.dsa_use_mha_set", func(r *core.Request) { r.Runtime.DSAUseMHASet = true }},
		{"runtime.compute_capability=90", func(r *core.Request) { r.Runtime.ComputeCapability = 90 }},
	}
}

// platforms returns the platforms every request is asked on: each but the
// unset one, in core's order.
func platforms() []core.Platform {
	var out []core.Platform
	for p := core.PlatformUnset + 1; p.Valid(); p++ {
		out = append(out, p)
	}
	return out
}

// graphFlags returns the combinations of runtime.piecewise_cuda_graph and
// runtime.breakable_cuda_graph.
func graphFlags() [][2]bool {
	return [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}}
}

// batch sets a two-request batch whose prefix lengths add up to prefix and
// whose sequence lengths add up to seq (seq >= prefix).
func batch(r *core.Request, prefix, seq int64) {
	p0 := prefix / 2
	s0 := p0 + (seq-prefix)/2
	r.Batch.ExtendPrefixLens = []int64{p0, prefix - p0}
	r.Batch.SeqLens = []int64{s0, seq - s0}
}

// GenerateRequests returns the requests the suite asks of the backend name
// whose rules declare reads: every forward mode, with and without each
// CUDA-graph flag, on every platform, with prefix sums of 0 and one below,
// at and one above the chunked-prefix threshold (8192, and 4096 for a
// second threshold), sequence sums one below, at and one above the chunk
// capacity, lengths not known, each boolean fact alone, all together and
// all but one (on cuda, hip and cpu), and every threshold reads declares
// for the prefix sum and the sequence sum (Reads.Declarations) one below,
// at and one above equality. Every request is valid and has its platform
// set. The order is fixed. The suite asks random probes besides (seeded:
// Options.Seed).
func GenerateRequests(name string, reads core.Reads) []core.Request {
	var out []core.Request
	add := func(r core.Request) {
		if r.Validate() == nil {
			out = append(out, r)
		}
	}
	const extra = 1024 // new tokens on top of the prefix
	t := int64(core.DefaultChunkedPrefixCacheThreshold)
	prefixes := []int64{0, t - 1, t, t + 1}
	togs, pls, gfs := toggles(), platforms(), graphFlags()
	var prefixAt, seqAt []int64
	for _, d := range reads.Declarations() {
		switch d.Quantity {
		case core.QuantityPrefixSum:
			prefixAt = d.At
		case core.QuantitySeqSum:
			seqAt = d.At
		}
	}

	// The grid: modes x graph flags x prefix sums x capacity edges x
	// platforms.
	for _, mode := range core.ForwardModes() {
		for _, g := range gfs {
			for _, p := range prefixes {
				for _, capDelta := range []int64{+1, 0, -1} {
					for _, pl := range pls {
						r := core.NewRequest(name, mode)
						batch(&r, p, p+extra)
						// seq sum = capacity-1, capacity, capacity+1
						r.Batch.MaxChunkCapacity = p + extra + capDelta
						r.Runtime.Platform = pl
						r.Runtime.PiecewiseCUDAGraph, r.Runtime.BreakableCUDAGraph = g[0], g[1]
						add(r)
					}
				}
			}
		}
	}
	variants := toggleVariants(len(togs))
	for _, mode := range core.ForwardModes() {
		for _, pl := range pls {
			// A second threshold.
			for _, p := range []int64{altThreshold - 1, altThreshold, altThreshold + 1} {
				r := core.NewRequest(name, mode)
				r.Layer.ChunkedPrefixCacheThreshold = altThreshold
				batch(&r, p, p+extra)
				r.Batch.MaxChunkCapacity = p + extra
				r.Runtime.Platform = pl
				add(r)
			}
			// Lengths not known.
			r := core.NewRequest(name, mode)
			r.Runtime.Platform = pl
			add(r)
			r.Batch.SeqLens = []int64{extra}
			r.Batch.MaxChunkCapacity = extra
			add(r)
			// Each boolean fact alone, all of them, all but one, on the
			// platforms whose rules differ in the reference (hip) and two
			// others.
			for _, v := range variants {
				if pl == core.PlatformNPU || pl == core.PlatformXPU {
					break
				}
				for _, p := range []int64{0, t} {
					r := core.NewRequest(name, mode)
					batch(&r, p, p+extra)
					r.Batch.MaxChunkCapacity = p + extra
					r.Runtime.Platform = pl
					for _, i := range v {
						togs[i].set(&r)
					}
					add(r)
				}
			}
			// The name's own thresholds of the sums, at equality and either
			// side.
			declaredEdges(name, mode, pl, gfs, prefixAt, seqAt, add)
		}
	}
	return out
}

// declaredEdges adds the requests of mode on pl at the thresholds a
// name's reads declare for the prefix sum (prefixAt) and the sequence sum
// (seqAt), at equality and either side, under each of the graph flags gfs.
func declaredEdges(name string, mode core.ForwardMode, pl core.Platform, gfs [][2]bool, prefixAt, seqAt []int64, add func(core.Request)) {
	const extra = 1024 // new tokens on top of the prefix
	for _, g := range gfs {
		for _, c := range prefixAt {
			for _, p := range []int64{c - 1, c, c + 1} {
				if p < 0 || p+extra > core.MaxLength {
					continue
				}
				r := core.NewRequest(name, mode)
				batch(&r, p, p+extra)
				r.Batch.MaxChunkCapacity = p + extra
				r.Runtime.Platform = pl
				r.Runtime.PiecewiseCUDAGraph, r.Runtime.BreakableCUDAGraph = g[0], g[1]
				add(r)
			}
		}
		for _, t := range seqAt {
			for _, s := range []int64{t - 2, t - 1, t} { // seq_sum <= t-1, either side
				if s < 0 || s > core.MaxLength {
					continue
				}
				r := core.NewRequest(name, mode)
				batch(&r, 0, s)
				r.Batch.MaxChunkCapacity = s
				r.Runtime.Platform = pl
				r.Runtime.PiecewiseCUDAGraph, r.Runtime.BreakableCUDAGraph = g[0], g[1]
				add(r)
			}
		}
	}
}

// toggleVariants lists the sets of the n toggles applied, by index: each
// alone, all of them, and all but each one.
func toggleVariants(n int) [][]int {
	variants := make([][]int, 0, 2*n+1)
	all := make([]int, n)
	for i := range n {
		all[i] = i
		variants = append(variants, []int{i})
	}
	variants = append(variants, all)
	for i := range n {
		but := make([]int, 0, n-1)
		for j := range n {
			if j != i {
				but = append(but, j)
			}
		}
		variants = append(variants, but)
	}
	return variants
}

// sample returns n requests of reqs, a fixed pseudo-random choice, in their
// order; all of reqs when n is not positive or not smaller.
func sample(reqs []core.Request, n int) []core.Request {
	if n <= 0 || n >= len(reqs) {
		return reqs
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(reqs))))
	idx := rng.Perm(len(reqs))[:n]
	keep := make([]bool, len(reqs))
	for _, i := range idx {
		keep[i] = true
	}
	out := make([]core.Request, 0, n)
	for i, k := range keep {
		if k {
			out = append(out, reqs[i])
		}
	}
	return out
}

// describe is a one-line account of a request's facts, for a report: the
// mode, the sums, the capacity, the threshold, the platform, and the
// boolean facts that are set.
func describe(r *core.Request) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s", r.Batch.Mode)
	if r.Batch.ExtendPrefixLens == nil {
		sb.WriteString(" prefix=unknown")
	} else {
		fmt.Fprintf(&sb, " prefix_sum=%d", r.Batch.PrefixSum())
	}
	if r.Batch.SeqLens == nil {
		sb.WriteString(" seq=unknown")
	} else {
		fmt.Fprintf(&sb, " seq_sum=%d seq_max=%d n=%d", r.Batch.SeqSum(), r.Batch.MaxSeqLen(), len(r.Batch.SeqLens))
	}
	fmt.Fprintf(&sb, " capacity=%d threshold=%d platform=%s", r.Batch.MaxChunkCapacity, r.Layer.ChunkedPrefixCacheThreshold, r.Runtime.Platform)
	flag := func(name string, v bool) {
		if v {
			sb.WriteString(" " + name)
		}
	}
	// Flags named one by one, in the line's order (runtime, then batch and
	// layer), with the two runtime values among them.
	flag("piecewise_cuda_graph", r.Runtime.PiecewiseCUDAGraph)
	flag("breakable_cuda_graph", r.Runtime.BreakableCUDAGraph)
	flag("deterministic_inference", r.Runtime.DeterministicInference)
	flag("dsa_use_mha", r.Runtime.DSAUseMHA)
	flag("two_batch_overlap", r.Runtime.TwoBatchOverlap)
	flag("dsa_use_mha_set", r.Runtime.DSAUseMHASet)
	if r.Runtime.ComputeCapability != 0 {
		fmt.Fprintf(&sb, " compute_capability=%d", r.Runtime.ComputeCapability)
	}
	if r.Runtime.KVCacheDType != "" {
		fmt.Fprintf(&sb, " kv_cache_dtype=%s", r.Runtime.KVCacheDType)
	}
	flag("mla_prefill_cp", r.Batch.MLAPrefillCP)
	flag("disable_chunked_prefix_cache", r.Layer.DisableChunkedPrefixCache)
	flag("flashinfer_mla_disable_ragged", r.Layer.FlashinferMLADisableRagged)
	flag("rocm_fused_decode_mla", r.Layer.ROCmFusedDecodeMLA)
	flag("use_dsa", r.Layer.UseDSA)
	flag("fused_qkv_a_proj_with_mqa", r.Layer.FusedQKVAProjWithMQA)
	flag("intel_amx", r.Layer.IntelAMX)
	return sb.String()
}
