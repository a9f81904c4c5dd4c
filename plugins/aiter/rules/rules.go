// Package rules holds the dispatch rules of the aiter plugin (ROCm), as
// sglang's handle_attention_aiter.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// DecideAiter is sglang's handle_attention_aiter:
//
//  1. inside a piecewise or breakable CUDA graph: MHA (aiter's fp8 MLA
//     prefill has no capture kernels);
//  2. an extend batch without speculation: MHA, whatever the prefix lengths;
//  3. anything else: MLA (never a fused-RoPE subtype).
func DecideAiter(req *core.Request) core.Method {
	if req.Runtime.PiecewiseCUDAGraph || req.Runtime.BreakableCUDAGraph {
		return core.MHA
	}
	if req.Batch.Mode.IsExtendWithoutSpeculative() {
		return core.MHA
	}
	return core.MLA
}

// Rules returns the rules of the aiter name, whose kernels run on ROCm
// GPUs of gfx90a (MI200), gfx942 (MI300) and gfx950 (MI350).
func Rules() []core.Rule {
	return []core.Rule{{
		Name:    "aiter",
		Decide:  DecideAiter,
		Reads:   core.Reads{Facts: core.FactMode | core.FactPiecewiseCUDAGraph | core.FactBreakableCUDAGraph},
		Methods: []core.Method{core.MHA, core.MLA},
		Hardware: []core.Hardware{{
			Platforms: []core.Platform{core.PlatformHIP},
			Archs:     []string{"gfx90a", "gfx942", "gfx950"},
		}},
	}}
}

// New returns the aiter plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("aiter", Version, logger, Rules()...)
}
