package core

// MLASubtype is the MLA variant a layer runs when the rules choose MLA
// (sglang's _dispatch_mla_subtype):
//
//  1. on ROCm (platform hip): MLA_FUSED_ROPE_ROCM for a decode batch of a
//     layer with rocm_fused_decode_mla, else MLA;
//  2. elsewhere: MLA_FUSED_ROPE_CPU for a layer with both the fused q/kv-a
//     projection and the Intel AMX backend, else MLA.
func MLASubtype(req *Request) Method {
	if req.Runtime.Platform == PlatformHIP {
		if req.Layer.ROCmFusedDecodeMLA && req.Batch.Mode.IsDecode() {
			return MLAFusedRoPEROCm
		}
		return MLA
	}
	if req.Layer.FusedQKVAProjWithMQA && req.Layer.IntelAMX {
		return MLAFusedRoPECPU
	}
	return MLA
}

// MLASubtypeReads is what MLASubtype reads.
const MLASubtypeReads = FactMode | FactPlatform | FactROCmFusedDecodeMLA | FactFusedQKVAProjWithMQA | FactIntelAMX

// MLASubtypeMethods are the methods MLASubtype can return.
func MLASubtypeMethods() []Method { return []Method{MLA, MLAFusedRoPEROCm, MLAFusedRoPECPU} }

// ChunkedPrefixRule is the rule that sglang's flashinfer, fa3, flashmla,
// cutlass_mla and intel_xpu handlers share (_handle_attention_backend). The
// two fields are what the reference derives from the backend's name.
type ChunkedPrefixRule struct {
	// OneShot: the name may run MHA_ONE_SHOT (sglang's
	// MHA_ONE_SHOT_SUPPORTED_BACKENDS: fa3, flashinfer, flashmla).
	OneShot bool
	// RaggedSwitch: the name honours layer.flashinfer_mla_disable_ragged
	// (flashinfer and flashmla).
	RaggedSwitch bool
}

// Decide applies the rule:
//
//  1. inside a piecewise CUDA graph: MLA;
//  2. with MLA prefill context parallelism: MLASubtype;
//  3. unless the ragged prefill is switched off, an extend batch without
//     speculation whose prefix sum is 0, or at least the layer's threshold
//     with the chunked prefix cache enabled, runs MHA: MHA_ONE_SHOT when
//     the name supports it and the sequence sum fits the chunk capacity,
//     else MHA_CHUNKED_KV;
//  4. anything else: MLASubtype.
func (c ChunkedPrefixRule) Decide(req *Request) Method {
	if req.Runtime.PiecewiseCUDAGraph {
		return MLA
	}
	if req.Batch.MLAPrefillCP {
		return MLASubtype(req)
	}
	disableRagged := c.RaggedSwitch && req.Layer.FlashinferMLADisableRagged
	if !disableRagged && req.Batch.Mode.IsExtendWithoutSpeculative() {
		ps := req.Batch.PrefixSum()
		if (ps >= req.Layer.ChunkedPrefixCacheThreshold && !req.Layer.DisableChunkedPrefixCache) || ps == 0 {
			if c.OneShot && req.Batch.SeqSum() <= req.Batch.MaxChunkCapacity {
				return MHAOneShot
			}
			return MHAChunkedKV
		}
	}
	return MLASubtype(req)
}

// Reads is what Decide reads.
func (c ChunkedPrefixRule) Reads() Reads {
	f := MLASubtypeReads | FactPiecewiseCUDAGraph | FactMLAPrefillCP | FactDisableChunkedPrefixCache |
		FactPrefixSumZero | FactPrefixSumAtThreshold
	if c.RaggedSwitch {
		f |= FactFlashinferMLADisableRagged
	}
	if c.OneShot {
		f |= FactSeqSumWithinCapacity
	}
	return Reads{Facts: f}
}

// Methods are the methods Decide can return.
func (c ChunkedPrefixRule) Methods() []Method {
	m := append(MLASubtypeMethods(), MHAChunkedKV)
	if c.OneShot {
		m = append(m, MHAOneShot)
	}
	return m
}
