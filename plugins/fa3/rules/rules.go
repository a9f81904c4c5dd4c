package rules

import (
	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
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
// Each call returns a fresh slice.
func fa3Hardware() []core.Hardware {
	return []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90, MaxCapability: 99}}
}

func fa4Hardware() []core.Hardware {
	return []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 100, MaxCapability: 109}}
}

// Rules returns the rules of the fa3 and fa4 names.
func Rules() []core.Rule {
	fa3Reads := fa3Rule().Reads()
	fa3Reads.Facts |= core.FactDeterministicInference
	return []core.Rule{
		{Name: "fa3", Decide: DecideFA3, Reads: fa3Reads, Methods: fa3Rule().Methods(), Hardware: fa3Hardware(), Kernels: FA3Kernels()},
		{Name: "fa4", Decide: DecideFA4, Methods: []core.Method{core.MHAChunkedKV}, Hardware: fa4Hardware(), Kernels: FA4Kernels()},
	}
}

// FA3Kernels is the kernel catalog of fa3: FlashAttention 3's varlen
// prefill (one shot, or per prefix chunk merged by LSE) and its paged
// absorbed-MLA decode, on sm90; the fused-RoPE subtypes are the shared
// kernels (backendkit.FusedRoPEKernels).
func FA3Kernels() []core.Kernel {
	dt := []string{"bf16", "fp16", "fp8_e4m3"}
	mha := []int{192, 128}
	return append([]core.Kernel{
		{Name: "flash_attn_varlen_func", Library: core.LibFlashAttention3, Method: core.MHAOneShot, DTypes: dt, HeadDims: mha, PageSizes: []int{1}, Hardware: fa3Hardware()},
		{Name: "flash_attn_varlen_func+merge_state", Library: core.LibFlashAttention3, Method: core.MHAChunkedKV, DTypes: dt, HeadDims: mha, PageSizes: []int{1}, Hardware: fa3Hardware(), PrefixChunks: true},
		{Name: "flash_attn_with_kvcache", Library: core.LibFlashAttention3, Method: core.MLA, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1, 16, 64}, CUDAGraph: true, QuerySplit: true, Hardware: fa3Hardware()},
	}, backendkit.FusedRoPEKernels()...)
}

// FA4Kernels is the kernel catalog of fa4: FlashAttention 4's varlen
// prefill per prefix chunk, on the sm100 family.
func FA4Kernels() []core.Kernel {
	return []core.Kernel{
		{Name: "flash_attn_varlen_func", Library: core.LibFlashAttention4, Method: core.MHAChunkedKV, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{192, 128}, PageSizes: []int{1, 128}, Hardware: fa4Hardware(), PrefixChunks: true},
	}
}

// New returns the fa3 plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	b, err := backendkit.NewRules("fa3", Version, logger, Rules()...)
	if err != nil {
		return nil, err
	}
	return b.WithDeviceCode(new(devkernels.Code)), nil
}
