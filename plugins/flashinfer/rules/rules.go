// Package rules holds the dispatch rules of the flashinfer plugin: the
// flashinfer, flashmla, cutlass_mla, trtllm_mla and tokenspeed_mla names.
package rules

import (
	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.1.0"

// The shared chunked-prefix rule as each name applies it: one-shot MHA for
// flashinfer and flashmla (sglang's MHA_ONE_SHOT_SUPPORTED_BACKENDS), which
// also honour flashinfer_mla_disable_ragged; neither for cutlass_mla.
func flashinferRule() core.ChunkedPrefixRule {
	return core.ChunkedPrefixRule{OneShot: true, RaggedSwitch: true}
}

func cutlassRule() core.ChunkedPrefixRule { return core.ChunkedPrefixRule{} }

// DecideTRTLLMMLA is sglang's handle_attention_trtllm_mla (and
// tokenspeed_mla):
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. an extend batch without speculation, with the chunked prefix cache
//     enabled or a prefix sum of 0: MHA_CHUNKED_KV;
//  3. anything else: the MLA subtype.
func DecideTRTLLMMLA(req *core.Request) core.Method {
	if req.Runtime.PiecewiseCUDAGraph {
		return core.MLA
	}
	if req.Batch.Mode.IsExtendWithoutSpeculative() &&
		(!req.Layer.DisableChunkedPrefixCache || req.Batch.PrefixSum() == 0) {
		return core.MHAChunkedKV
	}
	return core.MLASubtype(req)
}

// cuda returns CUDA hardware of compute capability lo to hi (0: open), as
// docs/hardware.md ("Backend requirements") gives for each name.
func cuda(lo, hi int) []core.Hardware {
	return []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: lo, MaxCapability: hi}}
}

// Rules returns the rules of the plugin's names. flashinfer runs on sm80
// and newer, flashmla on sm90 and sm100, cutlass_mla, trtllm_mla and
// tokenspeed_mla on the sm100 family.
func Rules() []core.Rule {
	trt := core.Reads{Facts: core.MLASubtypeReads | core.FactPiecewiseCUDAGraph |
		core.FactDisableChunkedPrefixCache | core.FactPrefixSumZero}
	trtMethods := append(core.MLASubtypeMethods(), core.MHAChunkedKV)
	return []core.Rule{
		{Name: "flashinfer", Decide: flashinferRule().Decide, Reads: flashinferRule().Reads(), Methods: flashinferRule().Methods(), Hardware: cuda(80, 0)},
		{Name: "flashmla", Decide: flashinferRule().Decide, Reads: flashinferRule().Reads(), Methods: flashinferRule().Methods(), Hardware: cuda(90, 109)},
		{Name: "cutlass_mla", Decide: cutlassRule().Decide, Reads: cutlassRule().Reads(), Methods: cutlassRule().Methods(), Hardware: cuda(100, 109)},
		{Name: "trtllm_mla", Decide: DecideTRTLLMMLA, Reads: trt, Methods: trtMethods, Hardware: cuda(100, 109)},
		{Name: "tokenspeed_mla", AliasOf: "trtllm_mla", Decide: DecideTRTLLMMLA, Reads: trt, Methods: trtMethods, Hardware: cuda(100, 109)},
	}
}

// New returns the flashinfer plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("flashinfer", Version, logger, Rules()...)
}
