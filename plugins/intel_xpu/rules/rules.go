package rules

import (
	"github.com/attnplug/attnplug/backendkit"
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
			Hardware: xpu(), Kernels: XPUKernels(),
		},
		{
			Name: "intel_amx", Decide: core.TritonDecide, Reads: amx.Reads, Methods: amx.Methods,
			Hardware: amxHW(), Kernels: AMXKernels(),
		},
	}
}

// xpu is what intel_xpu runs on: Intel GPUs. Each call returns a fresh
// slice.
func xpu() []core.Hardware { return []core.Hardware{{Platforms: []core.Platform{core.PlatformXPU}}} }

// amxHW is what intel_amx runs on: amd64 CPUs with AMX. Each call returns a
// fresh slice.
func amxHW() []core.Hardware {
	return []core.Hardware{{Platforms: []core.Platform{core.PlatformCPU}, Archs: []string{"amd64"}, NeedsAMX: true}}
}

// XPUKernels is the kernel catalog of intel_xpu: the Intel XPU kernels of
// sgl-kernel-xpu for the chunked MHA prefill and the paged MLA decode, and
// the shared fused-RoPE kernels.
func XPUKernels() []core.Kernel {
	dt := []string{"bf16", "fp16"}
	return append([]core.Kernel{
		{Name: "flash_attn_varlen_func", Library: core.LibIntelXPU, Method: core.MHAChunkedKV, DTypes: dt, HeadDims: []int{192, 128}, PageSizes: []int{1}, Hardware: xpu()},
		{Name: "flash_attn_with_kvcache", Library: core.LibIntelXPU, Method: core.MLA, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1, 64}, CUDAGraph: false, Hardware: xpu()},
	}, backendkit.FusedRoPEKernels()...)
}

// AMXKernels is the kernel catalog of intel_amx: sgl-kernel's CPU kernels
// (AMX) for MHA, MLA and the fused-RoPE MLA decode, and the triton grouped
// RoPE decode that the triton rules give on ROCm.
func AMXKernels() []core.Kernel {
	dt := []string{"bf16"}
	return append([]core.Kernel{
		{Name: "extend_attention_cpu", Library: core.LibSGLKernel, Method: core.MHA, DTypes: dt, HeadDims: []int{192, 128}, PageSizes: []int{1}, Hardware: amxHW()},
		{Name: "decode_attention_cpu", Library: core.LibSGLKernel, Method: core.MLA, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{1}, Hardware: amxHW()},
	}, backendkit.FusedRoPEKernels()...)
}

// New returns the intel_xpu plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return backendkit.NewRules("intel_xpu", Version, logger, Rules()...)
}
