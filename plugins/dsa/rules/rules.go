package rules

import (
	"fmt"
	"os"
	"strconv"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/hashicorp/go-hclog"
)

// Version is the version of these rules.
const Version = "0.2.0"

// DefaultDenseKVLenThreshold is the longest sequence for which the DSA
// backend runs a prefill as dense MHA: sglang's
// SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD (default 2048, DeepSeek
// V3.2's index_topk, so that dense and sparse attention see the same keys).
const DefaultDenseKVLenThreshold = 2048

// EnvDenseKVLenThreshold names the environment variable that sets the
// threshold of the plugin's process, as SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD
// does sglang's.
const EnvDenseKVLenThreshold = "ATTNPLUG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"

// DSAPrefillUseMHA is the MHA-or-MLA part of sglang's
// DeepseekSparseAttnBackend.set_dsa_prefill_impl
// (python/sglang/srt/layers/attention/dsa_backend.py, formerly
// nsa_backend.py, in sgl-project/sglang), the choice the DSA backend makes
// per batch when the request does not give runtime.dsa_use_mha:
//
//  1. inside a piecewise or breakable CUDA graph: MLA (a graph replay
//     cannot branch on seq_lens_cpu);
//  2. an extend batch without speculation runs MHA when all of these hold:
//     the device is SM90 (compute capability 90) or SM100-class ([100,
//     110)); the longest sequence is at most threshold; the KV cache is
//     bf16 or fp8_e4m3 ("auto" is the model's bf16); the sum of the
//     sequence lengths fits the chunk capacity; prefill context parallelism
//     (mla_prefill_cp) is off;
//  3. anything else (decode, target-verify, ...): MLA.
//
// sglang also requires no HiSparse coordinator, which the dispatch format
// does not describe: such a deployment must give dsa_use_mha. Lengths not
// known count as 0, as everywhere in the format.
func DSAPrefillUseMHA(req *core.Request, threshold int64) bool {
	rt := &req.Runtime
	if rt.PiecewiseCUDAGraph || rt.BreakableCUDAGraph {
		return false
	}
	if !req.Batch.Mode.IsExtendWithoutSpeculative() {
		return false
	}
	return rt.DenseDSADevice() &&
		req.Batch.MaxSeqLen() <= threshold &&
		rt.KVCacheDenseDType() &&
		req.Batch.SeqSum() <= req.Batch.MaxChunkCapacity &&
		!req.Batch.MLAPrefillCP
}

// Decider returns sglang's handle_attention_dsa with the prefill choice of
// DSAPrefillUseMHA at threshold: the DSA backend's per-batch choice
// (runtime.dsa_use_mha, read from the primary backend under two-batch
// overlap) when the request gives it, else the backend's own; MHA_ONE_SHOT
// when it is MHA, else MLA.
func Decider(threshold int64) func(*core.Request) core.Method {
	return func(req *core.Request) core.Method {
		useMHA := req.Runtime.DSAUseMHA
		if !req.Runtime.DSAUseMHAGiven() {
			useMHA = DSAPrefillUseMHA(req, threshold)
		}
		if useMHA {
			return core.MHAOneShot
		}
		return core.MLA
	}
}

// DecideDSA is Decider at the default threshold.
func DecideDSA(req *core.Request) core.Method { return Decider(DefaultDenseKVLenThreshold)(req) }

// ReadsAt is what Decider(threshold) reads: whether the request gives
// runtime.dsa_use_mha, and the value it gives, or else the facts of
// DSAPrefillUseMHA. Its condition says that a request that gives
// dsa_use_mha (FactDSAUseMHASet: dsa_use_mha_set, or dsa_use_mha true) is
// decided by dsa_use_mha alone, so that a host keys such requests (sglang's
// own, which always read the backend's use_mha) without the sums and
// maximum of their lengths.
func ReadsAt(threshold int64) core.Reads {
	return core.Reads{
		Facts: core.FactDSAUseMHA | core.FactDSAUseMHASet | core.FactMode | core.FactPiecewiseCUDAGraph |
			core.FactBreakableCUDAGraph | core.FactDenseDSADevice | core.FactKVCacheDenseDType |
			core.FactSeqSumWithinCapacity | core.FactMLAPrefillCP,
		MaxSeqLenAtMost: []int64{threshold},
		Conditions: []core.ReadsCondition{
			{When: core.FactDSAUseMHASet, Reads: core.Reads{Facts: core.FactDSAUseMHA}},
		},
	}
}

// Rules returns the rules of the dsa and nsa names at the default
// threshold.
func Rules() []core.Rule { return RulesAt(DefaultDenseKVLenThreshold) }

// RulesAt returns the rules of the dsa and nsa names with the dense-prefill
// threshold given. sglang sets DSA up on CUDA and ROCm GPUs; on CUDA its
// kernels (flashmla_sparse, fa3, trtllm) need sm90 or newer. On Ascend NPUs
// the ascend plugin serves DSA layers.
func RulesAt(threshold int64) []core.Rule {
	reads := ReadsAt(threshold)
	methods := []core.Method{core.MHAOneShot, core.MLA}
	decide := Decider(threshold)
	ks := Kernels()
	return []core.Rule{
		{Name: "dsa", Decide: decide, Reads: reads, Methods: methods, Hardware: dsaHardware(), Kernels: ks},
		{Name: "nsa", AliasOf: "dsa", Deprecated: `"nsa" is a deprecated alias of "dsa"`, Decide: decide, Reads: reads, Methods: methods, Hardware: dsaHardware(), Kernels: ks},
	}
}

// dsaHardware is what the dsa names run on: CUDA from sm90, and ROCm. Each
// call returns a fresh slice.
func dsaHardware() []core.Hardware {
	return []core.Hardware{
		{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90},
		{Platforms: []core.Platform{core.PlatformHIP}},
	}
}

// Kernels is the kernel catalog of dsa: FlashMLA's sparse MLA over the
// indexer's top-k (flashmla_sparse, DeepSeek sparse attention), and the
// dense FlashAttention 3 varlen prefill of MHA_ONE_SHOT.
func Kernels() []core.Kernel {
	return []core.Kernel{
		{Name: "flash_attn_varlen_func", Library: core.LibFlashAttention3, Method: core.MHAOneShot, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{192, 128}, PageSizes: []int{1},
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90, MaxCapability: 109}}},
		{Name: "flash_mla_sparse_fwd", Library: core.LibDSA, Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{576, 512}, PageSizes: []int{64}, CUDAGraph: true, QuerySplit: true,
			Hardware: dsaHardware(), Sparse: true},
	}
}

// ThresholdFromEnv returns the threshold that getenv's
// EnvDenseKVLenThreshold sets, DefaultDenseKVLenThreshold when unset.
func ThresholdFromEnv(getenv func(string) string) (int64, error) {
	v := getenv(EnvDenseKVLenThreshold)
	if v == "" {
		return DefaultDenseKVLenThreshold, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > core.MaxLength {
		return 0, fmt.Errorf("%s=%q: want an integer in [0, %d]", EnvDenseKVLenThreshold, v, int64(core.MaxLength))
	}
	return n, nil
}

// New returns the dsa plugin's backend, with the threshold of
// EnvDenseKVLenThreshold.
func New(logger hclog.Logger) (core.Backend, error) {
	t, err := ThresholdFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	b, err := backendkit.NewRules("dsa", Version, logger, RulesAt(t)...)
	if err != nil {
		return nil, err
	}
	return b.WithDeviceCode(new(devkernels.Code)), nil
}
