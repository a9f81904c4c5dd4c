// Package rules holds the dispatch rules of the intel_xpu plugin (Intel
// XPU), as sglang's handle_attention_intel_xpu.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// xpuRule is the shared chunked-prefix rule without one-shot MHA and
// without the ragged switch, as the reference applies it to "intel_xpu".
func xpuRule() core.ChunkedPrefixRule { return core.ChunkedPrefixRule{} }

// DecideIntelXPU is sglang's handle_attention_intel_xpu.
func DecideIntelXPU(req *core.Request) core.Method { return xpuRule().Decide(req) }

// Rules returns the rules of the intel_xpu name.
func Rules() []core.Rule {
	return []core.Rule{{Name: "intel_xpu", Decide: DecideIntelXPU, Reads: xpuRule().Reads(), Methods: xpuRule().Methods()}}
}

// New returns the intel_xpu plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("intel_xpu", Version, logger, Rules()...)
}
