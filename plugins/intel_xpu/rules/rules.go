// Package rules holds the dispatch rules of the intel_xpu plugin: the
// intel_xpu name (Intel GPUs), as sglang's handle_attention_intel_xpu, and
// the intel_amx name (Intel CPUs with AMX), which sglang's registry leaves
// to the triton rules.
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

// Rules returns the rules of the intel_xpu and intel_amx names. intel_xpu
// runs on the xpu platform; intel_amx is the triton rules (core.TritonRule,
// whose MLA subtype gives MLA_FUSED_ROPE_CPU to AMX layers) on an amd64
// CPU with usable AMX.
func Rules() []core.Rule {
	amx := core.TritonRule()
	return []core.Rule{
		{
			Name: "intel_xpu", Decide: DecideIntelXPU, Reads: xpuRule().Reads(), Methods: xpuRule().Methods(),
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformXPU}}},
		},
		{
			Name: "intel_amx", Decide: core.TritonDecide, Reads: amx.Reads, Methods: amx.Methods,
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCPU}, Archs: []string{"amd64"}, NeedsAMX: true}},
		},
	}
}

// New returns the intel_xpu plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("intel_xpu", Version, logger, Rules()...)
}
