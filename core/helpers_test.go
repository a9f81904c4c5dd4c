package core_test

import "github.com/attnplug/attnplug/core"

// req builds a request of the dispatch format's defaults (threshold 8192)
// for mode on CUDA, then applies the options in order.
func req(mode core.ForwardMode, opts ...func(*core.Request)) core.Request {
	r := core.NewRequest("test", mode)
	r.Runtime.Platform = core.PlatformCUDA
	for _, o := range opts {
		o(&r)
	}
	return r
}

func prefix(v ...int64) func(*core.Request) {
	return func(r *core.Request) { r.Batch.ExtendPrefixLens = v }
}

func seq(v ...int64) func(*core.Request) { return func(r *core.Request) { r.Batch.SeqLens = v } }

func capacity(c int64) func(*core.Request) {
	return func(r *core.Request) { r.Batch.MaxChunkCapacity = c }
}

func threshold(c int64) func(*core.Request) {
	return func(r *core.Request) { r.Layer.ChunkedPrefixCacheThreshold = c }
}

func platform(p core.Platform) func(*core.Request) {
	return func(r *core.Request) { r.Runtime.Platform = p }
}

func hip(r *core.Request)           { r.Runtime.Platform = core.PlatformHIP }
func fusedDecode(r *core.Request)   { r.Layer.ROCmFusedDecodeMLA = true }
func amx(r *core.Request)           { r.Layer.IntelAMX = true }
func fusedQKV(r *core.Request)      { r.Layer.FusedQKVAProjWithMQA = true }
func piecewise(r *core.Request)     { r.Runtime.PiecewiseCUDAGraph = true }
func breakable(r *core.Request)     { r.Runtime.BreakableCUDAGraph = true }
func deterministic(r *core.Request) { r.Runtime.DeterministicInference = true }
func prefillCP(r *core.Request)     { r.Batch.MLAPrefillCP = true }
func noRagged(r *core.Request)      { r.Layer.FlashinferMLADisableRagged = true }
func noChunked(r *core.Request)     { r.Layer.DisableChunkedPrefixCache = true }
func dsaUseMHA(r *core.Request)     { r.Runtime.DSAUseMHA = true }
func useDSA(r *core.Request)        { r.Layer.UseDSA = true }
func tbo(r *core.Request)           { r.Runtime.TwoBatchOverlap = true }

var dsaSet = func(r *core.Request) { r.Runtime.DSAUseMHASet = true }

func cc(v int) func(*core.Request) { return func(r *core.Request) { r.Runtime.ComputeCapability = v } }

func kvDType(v string) func(*core.Request) {
	return func(r *core.Request) { r.Runtime.KVCacheDType = v }
}
