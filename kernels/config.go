package kernels

import (
	"fmt"
	"math"

	"github.com/attnplug/attnplug/core"
)

// Config holds the DeepSeek MLA attention dimensions and constants that every kernel
// reads: core.KernelDims itself, which plugins and hosts fill, so that no copy of it
// stands between the contract and the kernels.
type Config = core.KernelDims

// YarnMscale returns sglang's yarn_get_mscale(scale, mscale): 0.1*mscale*ln(scale)+1, or 1 when scale <= 1.
func YarnMscale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

// DeepSeekSoftmaxScale returns the softmax scale sglang's DeepseekV2AttentionMLA uses:
// (qkNope+qkRope)^-0.5 * yarn_get_mscale(factor, mscaleAllDim)^2.
func DeepSeekSoftmaxScale(qkNope, qkRope int, factor, mscaleAllDim float64) float64 {
	m := YarnMscale(factor, mscaleAllDim)
	return m * m / math.Sqrt(float64(qkNope+qkRope))
}

// DeepSeekV3 returns the DeepSeek-V3 attention configuration (128 heads, rope_scaling
// factor 40, mscale_all_dim 1, rope_theta 10000), with sglang's default chunk capacity
// 128*1024 and DeepSeek-V3.2's index_topk 2048 for the sparse methods.
func DeepSeekV3() Config {
	return Config{
		Heads:         128,
		KVLoraRank:    512,
		QKNopeHeadDim: 128,
		QKRopeHeadDim: 64,
		VHeadDim:      128,
		SoftmaxScale:  DeepSeekSoftmaxScale(128, 64, 40, 1.0),
		RopeBase:      10000,
		ChunkCapacity: 128 * 1024,
		TopK:          2048,
	}
}

// Method names one sglang DeepSeek attention forward method (AttnForwardMethod) or the
// dsa backend's sparse MLA.
type Method string

// The methods, spelled as sglang's AttnForwardMethod members, plus DSAMLA for the dsa backend.
const (
	// MHA decompresses K/V from the latent per request and runs causal multi-head attention.
	MHA Method = "MHA"
	// MLA is absorbed multi-latent attention: 576-wide latent queries over [c_kv ‖ k_pe].
	MLA Method = "MLA"
	// MHAChunkedKV attends the new tokens over themselves, then over the prefix in chunks, merged by LSE.
	MHAChunkedKV Method = "MHA_CHUNKED_KV"
	// MHAOneShot decompresses prefix and new latents of the whole batch in one pass, then attends.
	MHAOneShot Method = "MHA_ONE_SHOT"
	// MLAFusedRopeROCm is MLA with RoPE applied inside the kernel (inputs not yet rotated).
	MLAFusedRopeROCm Method = "MLA_FUSED_ROPE_ROCM"
	// MLAFusedRopeCPU is MLA with RoPE applied inside the kernel (inputs not yet rotated).
	MLAFusedRopeCPU Method = "MLA_FUSED_ROPE_CPU"
	// MHANPU is the NPU entry point of MHA.
	MHANPU Method = "MHA_NPU"
	// MLANPU is the NPU entry point of MLA.
	MLANPU Method = "MLA_NPU"
	// DSANPU is DeepSeek-V3.2 sparse (top-k) absorbed attention, NPU entry point.
	DSANPU Method = "DSA_NPU"
	// DSAMLA is the dsa backend's sparse (top-k) absorbed MLA.
	DSAMLA Method = "DSA_MLA"
)

// Methods returns every method this package implements, in a fixed order.
func Methods() []Method {
	return []Method{MHA, MLA, MHAChunkedKV, MHAOneShot, MLAFusedRopeROCm, MLAFusedRopeCPU, MHANPU, MLANPU, DSANPU, DSAMLA}
}

// ParseMethod returns the Method spelled s; it also accepts sglang's older name
// "MLA_FUSED_ROPE" for MLA_FUSED_ROPE_ROCM.
func ParseMethod(s string) (Method, error) {
	if s == "MLA_FUSED_ROPE" {
		return MLAFusedRopeROCm, nil
	}
	for _, m := range Methods() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("kernels: unknown method %q", s)
}

// Valid reports whether m is one of Methods().
func (m Method) Valid() bool {
	_, err := ParseMethod(string(m))
	return err == nil && m != "MLA_FUSED_ROPE"
}

// Sparse reports whether m attends only over the top-k indices in Tensors.TopKIndices.
func (m Method) Sparse() bool { return m == DSANPU || m == DSAMLA }

// PreRoped reports whether m expects Tensors.QPe and Tensors.KPe already rotated
// (true for all but the fused-RoPE methods, which rotate them inside the kernel).
func (m Method) PreRoped() bool { return m != MLAFusedRopeROCm && m != MLAFusedRopeCPU }

// Absorbed reports whether m uses the weight-absorbed latent formulation instead of
// decompressing K/V per head.
func (m Method) Absorbed() bool {
	switch m {
	case MLA, MLANPU, MLAFusedRopeROCm, MLAFusedRopeCPU, DSANPU, DSAMLA:
		return true
	}
	return false
}
