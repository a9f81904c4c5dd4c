package rules

import (
	"github.com/attnplug/attnplug/backendkit"
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
		Hardware: npu(),
		Kernels:  Kernels(),
	}}
}

// npu is what ascend runs on: Ascend NPUs. Each call returns a fresh slice.
func npu() []core.Hardware { return []core.Hardware{{Platforms: []core.Platform{core.PlatformNPU}}} }

// Kernels is the kernel catalog of ascend: torch_npu's fused attention for
// MHA and MLA, and its sparse flash attention over the DSA indexer's top-k.
func Kernels() []core.Kernel {
	dt := []string{"bf16", "fp16", "int8"}
	return []core.Kernel{
		{Name: "npu_fused_infer_attention_score", Library: core.LibTorchNPU, Method: core.MHANPU, DTypes: dt, HeadDims: []int{192, 128}, PageSizes: []int{128}, CUDAGraph: true, Hardware: npu()},
		{Name: "npu_fused_infer_attention_score_mla", Library: core.LibTorchNPU, Method: core.MLANPU, DTypes: dt, HeadDims: []int{576, 512}, PageSizes: []int{128}, CUDAGraph: true, Hardware: npu()},
		{Name: "npu_sparse_flash_attention", Library: core.LibTorchNPU, Method: core.DSANPU, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: []int{128}, CUDAGraph: true, Hardware: npu(), Sparse: true},
	}
}

// New returns the ascend plugin's backend.
func New(logger hclog.Logger) (core.Backend, error) {
	return backendkit.NewRules("ascend", Version, logger, Rules()...)
}
