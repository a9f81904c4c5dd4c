// Package rules holds the dispatch rules of the dsa plugin (DeepSeek sparse
// attention): the dsa name and its deprecated alias nsa, as sglang's
// handle_attention_dsa.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// DecideDSA is sglang's handle_attention_dsa: the DSA backend decided its
// prefill implementation per batch (runtime.dsa_use_mha, read from the
// primary backend under two-batch overlap); MHA_ONE_SHOT when it chose MHA,
// else MLA.
func DecideDSA(req *core.Request) core.Method {
	if req.Runtime.DSAUseMHA {
		return core.MHAOneShot
	}
	return core.MLA
}

// Rules returns the rules of the dsa and nsa names. sglang sets DSA up on
// CUDA and ROCm GPUs; on CUDA its kernels (flashmla_sparse, fa3, trtllm)
// need sm90 or newer. On Ascend NPUs the ascend plugin serves DSA layers.
func Rules() []core.Rule {
	reads := core.Reads{Facts: core.FactDSAUseMHA}
	methods := []core.Method{core.MHAOneShot, core.MLA}
	hw := []core.Hardware{
		{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90},
		{Platforms: []core.Platform{core.PlatformHIP}},
	}
	return []core.Rule{
		{Name: "dsa", Decide: DecideDSA, Reads: reads, Methods: methods, Hardware: hw},
		{Name: "nsa", AliasOf: "dsa", Deprecated: `"nsa" is a deprecated alias of "dsa"`, Decide: DecideDSA, Reads: reads, Methods: methods, Hardware: hw},
	}
}

// New returns the dsa plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("dsa", Version, logger, Rules()...)
}
