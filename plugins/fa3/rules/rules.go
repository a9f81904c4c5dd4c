// Package rules holds the dispatch rules of the fa3 plugin: the fa3 and fa4
// names, as sglang's handle_attention_fa3 and handle_attention_fa4.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// fa3Rule is the shared chunked-prefix rule with one-shot MHA, as the
// reference applies it to "fa3".
func fa3Rule() core.ChunkedPrefixRule { return core.ChunkedPrefixRule{OneShot: true} }

// DecideFA3 is sglang's handle_attention_fa3: with deterministic inference
// the MLA subtype, else the shared chunked-prefix rule with one-shot MHA.
func DecideFA3(req *core.Request) core.Method {
	if req.Runtime.DeterministicInference {
		return core.MLASubtype(req)
	}
	return fa3Rule().Decide(req)
}

// DecideFA4 is sglang's handle_attention_fa4: MHA_CHUNKED_KV, always, even
// for decode.
func DecideFA4(*core.Request) core.Method { return core.MHAChunkedKV }

// Hardware the names' kernels run on (docs/hardware.md, "Backend
// requirements"): FlashAttention 3 on Hopper (sm90; sglang allows sm80 only
// for models without MLA), FlashAttention 4 on Blackwell (sm100 family).
var (
	fa3Hardware = []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90, MaxCapability: 99}}
	fa4Hardware = []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 100, MaxCapability: 109}}
)

// Rules returns the rules of the fa3 and fa4 names.
func Rules() []core.Rule {
	fa3Reads := fa3Rule().Reads()
	fa3Reads.Facts |= core.FactDeterministicInference
	return []core.Rule{
		{Name: "fa3", Decide: DecideFA3, Reads: fa3Reads, Methods: fa3Rule().Methods(), Hardware: fa3Hardware},
		{Name: "fa4", Decide: DecideFA4, Methods: []core.Method{core.MHAChunkedKV}, Hardware: fa4Hardware},
	}
}

// New returns the fa3 plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("fa3", Version, logger, Rules()...)
}
