// Package kernels holds pure-Go CPU reference kernels for DeepSeek MLA (multi-head
// latent attention), one per forward method of sglang's DeepSeek attention dispatch
// (AttnForwardMethod: MHA, MLA, MHA_CHUNKED_KV, MHA_ONE_SHOT, MLA_FUSED_ROPE_ROCM,
// MLA_FUSED_ROPE_CPU, MHA_NPU, MLA_NPU, DSA_NPU) plus DSA_MLA, the dsa backend's sparse
// MLA, together with a float64 oracle (Reference, SparseReference), a deterministic input
// generator (RandomTensors) and the flop and byte counts (FLOPs, Bytes) behind the
// benchmarks. It is the numerical ground truth that attention plugins are checked
// against; it is not meant to be fast, only reasonable (float32 data, float64
// accumulation, up to GOMAXPROCS goroutines).
//
// # Where to start
//
// Describe the dimensions with a Config (DeepSeekV3 for the real model), the batch with
// a BatchShape (per request seq_lens and extend_prefix_lens, as sglang's ForwardBatch),
// get inputs (RandomTensors, or Layout(cfg, b).Split over one flat buffer that a caller
// filled), and call Run with a Method:
//
//	cfg := kernels.DeepSeekV3()
//	b := kernels.BatchShape{SeqLens: []int{512, 300}, PrefixLens: []int{511, 299}} // decode
//	raw, _ := kernels.RandomTensors(rand.New(rand.NewPCG(1, 2)), cfg, b)          // q_pe, k_pe not rotated
//	in, _ := kernels.ApplyRoPE(cfg, b, raw)                                       // for pre-roped methods
//	out := make([]float32, b.Tokens()*cfg.Heads*cfg.VHeadDim)
//	err := kernels.Run(kernels.MLA, cfg, b, in, out)
//	want, _ := kernels.Reference(cfg, b, raw)                                     // takes raw inputs
//	fmt.Println(kernels.RelError(out, want))                                     // <= 1e-5
//
// # Layouts
//
// All tensors are flat row-major slices. T is the number of new (query) tokens, the sum
// over requests of SeqLens-PrefixLens, ordered request by request; KV is the number of
// KV tokens, the sum of SeqLens, ordered request by request and, within a request, by
// position (the cached prefix first, then the new tokens). H = Heads.
//
//	q_nope        float32 [T, H, QKNopeHeadDim]
//	q_pe          float32 [T, H, QKRopeHeadDim]  rotated, except for the fused-RoPE methods
//	positions     int32   [T]                    RoPE position of each new token
//	c_kv          float32 [KV, KVLoraRank]       normalised latent (kv_a_layernorm output)
//	k_pe          float32 [KV, QKRopeHeadDim]    shared by all heads; rotated, except for fused-RoPE
//	w_kc          float32 [H, QKNopeHeadDim, KVLoraRank]   k_nope[j,h,:] = w_kc[h] · c_kv[j]
//	w_vc          float32 [H, KVLoraRank, VHeadDim]        v[j,h,:] = c_kv[j] · w_vc[h]
//	topk_indices  int32   [T, TopK]              sparse methods: positions within the request, -1 pads
//	out           float32 [T, H, VHeadDim]
//
// w_kc and w_vc are sglang's split of kv_b_proj (w_kc as stored, w_vc after its
// transpose(1, 2)). Layout places all of them, the output included, in one buffer of
// 4-byte elements with 64-byte aligned offsets, so that a shared-memory mapping can be cut
// into Tensors without copying (TensorLayout.Split, TensorLayout.SplitBytes); the int32
// tensors share the buffer's 4-byte slots.
//
// # Conventions
//
// Attention is causal by index: new token i of a request, at index PrefixLens+i in it,
// sees KV indices 0..PrefixLens+i of its request. RoPE is DeepSeek's GPT-J / interleaved
// style (sglang is_neox_style=False: pairs (x[2p], x[2p+1]) turn by pos*RopeBase^(-2p/d))
// without YaRN's frequency interpolation; the YaRN mscale enters only SoftmaxScale. Query
// token t turns at Positions[t]; KV token j of a request turns at j when it is cached
// prefix and at its new token's Positions entry otherwise. Sparse methods reject (with an
// error) top-k indices beyond the query's causal limit, below -1, repeated within a row, or
// rows with no valid index. See docs/kernels.md for each method's math and the benchmarks.
package kernels
