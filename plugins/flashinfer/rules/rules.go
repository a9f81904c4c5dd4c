package rules

import (
	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
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
		{Name: "flashinfer", Decide: flashinferRule().Decide, Reads: flashinferRule().Reads(), Methods: flashinferRule().Methods(), Hardware: cuda(80, 0), Kernels: Kernels("flashinfer")},
		{Name: "flashmla", Decide: flashinferRule().Decide, Reads: flashinferRule().Reads(), Methods: flashinferRule().Methods(), Hardware: cuda(90, 109), Kernels: Kernels("flashmla")},
		{Name: "cutlass_mla", Decide: cutlassRule().Decide, Reads: cutlassRule().Reads(), Methods: cutlassRule().Methods(), Hardware: cuda(100, 109), Kernels: Kernels("cutlass_mla")},
		{Name: "trtllm_mla", Decide: DecideTRTLLMMLA, Reads: trt, Methods: trtMethods, Hardware: cuda(100, 109), Kernels: Kernels("trtllm_mla")},
		{Name: "tokenspeed_mla", AliasOf: "trtllm_mla", Decide: DecideTRTLLMMLA, Reads: trt, Methods: trtMethods, Hardware: cuda(100, 109), Kernels: Kernels("tokenspeed_mla")},
	}
}

// Kernels returns the kernel catalog of the plugin's name: FlashInfer's
// ragged prefill (one shot, or per prefix chunk) for the MHA methods of
// flashinfer, flashmla and cutlass_mla, whose sglang backends share
// FlashInfer's prefill; each name's own MLA decode kernel (FlashInfer's
// paged MLA, FlashMLA, CUTLASS MLA, TRT-LLM MLA, TokenSpeed MLA); TRT-LLM's
// and TokenSpeed's ragged DeepSeek prefill for MHA_CHUNKED_KV; and the
// shared fused-RoPE kernels.
func Kernels(name string) []core.Kernel {
	dt := []string{"bf16", "fp16", "fp8_e4m3"}
	mha := []int{192, 128}
	mla := []int{576, 512}
	ragged := func(hw []core.Hardware) []core.Kernel {
		return []core.Kernel{
			{Name: "BatchPrefillWithRaggedKVCacheWrapper", Library: core.LibFlashInfer, Method: core.MHAOneShot, DTypes: dt, HeadDims: mha, PageSizes: []int{1}, Hardware: hw},
			{Name: "BatchPrefillWithRaggedKVCacheWrapper+merge_state", Library: core.LibFlashInfer, Method: core.MHAChunkedKV, DTypes: dt, HeadDims: mha, PageSizes: []int{1}, Hardware: hw, PrefixChunks: true},
		}
	}
	var ks []core.Kernel
	switch name {
	case "flashinfer":
		ks = append(ragged(cuda(80, 0)), core.Kernel{Name: "BatchMLAPagedAttentionWrapper", Library: core.LibFlashInfer, Method: core.MLA, DTypes: dt, HeadDims: mla, PageSizes: []int{1}, CUDAGraph: true, QuerySplit: true, Hardware: cuda(80, 0)})
	case "flashmla":
		ks = append(ragged(cuda(90, 109)), core.Kernel{Name: "flash_mla_with_kvcache", Library: core.LibFlashMLA, Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mla, PageSizes: []int{64}, CUDAGraph: true, QuerySplit: true, Hardware: cuda(90, 109)})
	case "cutlass_mla":
		ks = []core.Kernel{
			ragged(cuda(100, 109))[1],
			{Name: "cutlass_mla_decode", Library: core.LibCutlassMLA, Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mla, PageSizes: []int{128}, CUDAGraph: true, Hardware: cuda(100, 109)},
		}
	case "trtllm_mla":
		ks = []core.Kernel{
			{Name: "trtllm_ragged_attention_deepseek", Library: core.LibTRTLLMMLA, Method: core.MHAChunkedKV, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mha, PageSizes: []int{32, 64}, Hardware: cuda(100, 109)},
			{Name: "trtllm_batch_decode_with_kv_cache_mla", Library: core.LibTRTLLMMLA, Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mla, PageSizes: []int{32, 64}, CUDAGraph: true, Hardware: cuda(100, 109)},
		}
	case "tokenspeed_mla":
		ks = []core.Kernel{
			{Name: "tokenspeed_mla_prefill", Library: core.LibTokenSpeedMLA, Method: core.MHAChunkedKV, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mha, PageSizes: []int{64}, Hardware: cuda(100, 109)},
			{Name: "tokenspeed_mla_decode", Library: core.LibTokenSpeedMLA, Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: mla, PageSizes: []int{64}, CUDAGraph: true, Hardware: cuda(100, 109)},
		}
	default:
		return nil
	}
	return append(ks, backendkit.FusedRoPEKernels()...)
}

// New returns the flashinfer plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	b, err := backendkit.NewRules("flashinfer", Version, logger, Rules()...)
	if err != nil {
		return nil, err
	}
	return b.WithDeviceCode(new(devkernels.Code)), nil
}
