package kernels

import (
	"fmt"
	"math"
)

// Config holds the DeepSeek MLA attention dimensions and constants that every kernel reads.
type Config struct {
	// Heads is the number of attention heads (local heads after tensor parallelism).
	Heads int
	// KVLoraRank is the width of the compressed latent c_kv (512 for DeepSeek-V3).
	KVLoraRank int
	// QKNopeHeadDim is the per-head width of the non-rotary part of q and k (128).
	QKNopeHeadDim int
	// QKRopeHeadDim is the width of the rotary part q_pe / k_pe (64); it must be even.
	QKRopeHeadDim int
	// VHeadDim is the per-head width of v and of the output (128).
	VHeadDim int
	// SoftmaxScale multiplies q·k before the softmax.
	SoftmaxScale float64
	// RopeBase is the rotary base theta (10000 for DeepSeek-V3).
	RopeBase float64
	// ChunkCapacity is the maximum number of prefix tokens per chunk over the whole
	// batch for MHA_CHUNKED_KV (sglang's get_max_chunk_capacity()).
	ChunkCapacity int
	// TopK is the number of cached tokens the DSA indexer selects per query token;
	// only the sparse methods read it, 0 disables them.
	TopK int
}

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

// maxDim bounds every dimension so that products of dimensions cannot overflow int.
const maxDim = 1 << 16

// Validate reports the first field of c that is out of range, naming the field and value.
func (c Config) Validate() error {
	dims := []struct {
		name string
		v    int
	}{
		{"Heads", c.Heads},
		{"KVLoraRank", c.KVLoraRank},
		{"QKNopeHeadDim", c.QKNopeHeadDim},
		{"QKRopeHeadDim", c.QKRopeHeadDim},
		{"VHeadDim", c.VHeadDim},
	}
	for _, d := range dims {
		if d.v <= 0 || d.v > maxDim {
			return fmt.Errorf("kernels: Config.%s=%d must be in [1, %d]", d.name, d.v, maxDim)
		}
	}
	if c.QKRopeHeadDim%2 != 0 {
		return fmt.Errorf("kernels: Config.QKRopeHeadDim=%d must be even (RoPE rotates pairs)", c.QKRopeHeadDim)
	}
	if !(c.SoftmaxScale > 0) || math.IsInf(c.SoftmaxScale, 0) {
		return fmt.Errorf("kernels: Config.SoftmaxScale=%v must be finite and > 0", c.SoftmaxScale)
	}
	if !(c.RopeBase > 1) || math.IsInf(c.RopeBase, 0) {
		return fmt.Errorf("kernels: Config.RopeBase=%v must be finite and > 1", c.RopeBase)
	}
	if c.ChunkCapacity <= 0 || c.ChunkCapacity > 1<<30 {
		return fmt.Errorf("kernels: Config.ChunkCapacity=%d must be in [1, %d]", c.ChunkCapacity, 1<<30)
	}
	if c.TopK < 0 || c.TopK > maxDim {
		return fmt.Errorf("kernels: Config.TopK=%d must be in [0, %d]", c.TopK, maxDim)
	}
	return nil
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
