// Package rules holds the dispatch rules of the acme_mla backend, a made-up
// vendor backend: chunked-prefix MHA only from its own prefix threshold on,
// MLA otherwise.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of the acme_mla plugin.
const Version = "1.0.0"

// Name is the backend name acme_mla serves, and the plugin's family name:
// the binary is called attnplug-backend-acme_mla.
const Name = "acme_mla"

// ChunkThreshold is acme's own prefix threshold: an extend batch whose
// prefix lengths add up to at least this many tokens runs chunked-prefix
// MHA. Unlike the shared rules, acme ignores the layer's
// chunked_prefix_cache_threshold.
const ChunkThreshold int64 = 16384

// Decide is acme_mla's rule:
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. an extend batch without speculation whose prefix sum is at least
//     ChunkThreshold: MHA_CHUNKED_KV;
//  3. anything else: MLA.
func Decide(req *core.Request) core.Method {
	if req.Runtime.PiecewiseCUDAGraph {
		return core.MLA
	}
	if req.Batch.Mode.IsExtendWithoutSpeculative() && req.Batch.PrefixSum() >= ChunkThreshold {
		return core.MHAChunkedKV
	}
	return core.MLA
}

// Rules returns acme_mla's rules. Reads declares exactly what Decide reads
// (the host caches answers by it): the mode, the piecewise-graph flag, and
// the comparison of the prefix sum with acme's own constant. Methods is
// acme_mla's catalog: every method Decide can answer.
func Rules() []core.Rule {
	return []core.Rule{{
		Name:   Name,
		Decide: Decide,
		Reads: core.Reads{
			Facts:            core.FactMode | core.FactPiecewiseCUDAGraph,
			PrefixSumAtLeast: []int64{ChunkThreshold},
		},
		Methods: []core.Method{core.MLA, core.MHAChunkedKV},
	}}
}

// New returns the acme_mla backend; it is the plugin's wire.Factory.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend(Name, Version, logger, Rules()...)
}
