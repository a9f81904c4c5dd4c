package rules

import (
	"github.com/attnplug/attnplug/backendkit"
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
		Name:     "aiter",
		Decide:   DecideAiter,
		Reads:    core.Reads{Facts: core.FactMode | core.FactPiecewiseCUDAGraph | core.FactBreakableCUDAGraph},
		Methods:  []core.Method{core.MHA, core.MLA},
		Hardware: aiterHardware(),
		Kernels:  Kernels(),
	}}
}

// aiterHardware is what aiter runs on: the ROCm GPUs it is built for. Each
// call returns a fresh slice.
func aiterHardware() []core.Hardware {
	return []core.Hardware{{
		Platforms: []core.Platform{core.PlatformHIP},
		Archs:     []string{"gfx90a", "gfx942", "gfx950"},
	}}
}

// Kernels is the kernel catalog of aiter: its varlen MHA prefill and its
// MLA decode, on ROCm GPUs.
func Kernels() []core.Kernel {
	dt := []string{"bf16", "fp16", "fp8_e4m3"}
	return []core.Kernel{
		{Name: "flash_attn_varlen_func", Library: core.LibAiter, Method: core.MHA, DTypes: dt, HeadDims: []int{192, 128}, PageSizes: []int{1}, CUDAGraph: true, Hardware: aiterHardware()},
		{Name: "mla_decode_fwd", Library: core.LibAiter, Method: core.MLA, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1}, CUDAGraph: true, Hardware: aiterHardware()},
	}
}

// New returns the aiter plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return backendkit.NewRules("aiter", Version, logger, Rules()...)
}
