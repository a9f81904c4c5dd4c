// Package rules holds the dispatch rules of the ascend plugin (Ascend NPU),
// as sglang's handle_attention_ascend.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// DecideAscend is sglang's handle_attention_ascend: a DSA layer runs
// DSA_NPU; otherwise an extend batch that is neither target-verify nor
// draft-extend-v2 runs MHA_NPU, and anything else MLA_NPU.
func DecideAscend(req *core.Request) core.Method {
	m := req.Batch.Mode
	if m.IsExtend() && !m.IsTargetVerify() && !m.IsDraftExtendV2() {
		if req.Layer.UseDSA {
			return core.DSANPU
		}
		return core.MHANPU
	}
	if req.Layer.UseDSA {
		return core.DSANPU
	}
	return core.MLANPU
}

// Rules returns the rules of the ascend name, which runs on Ascend NPUs
// (DSA layers included).
func Rules() []core.Rule {
	return []core.Rule{{
		Name:     "ascend",
		Decide:   DecideAscend,
		Reads:    core.Reads{Facts: core.FactMode | core.FactUseDSA},
		Methods:  []core.Method{core.MHANPU, core.MLANPU, core.DSANPU},
		Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformNPU}}},
	}}
}

// New returns the ascend plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("ascend", Version, logger, Rules()...)
}
