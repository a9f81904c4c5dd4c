package core

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
)

// A step is what an engine's attention backend knows of one forward
// batch, in the engine's own terms (sglang's model config, KV pool and
// forward batch): StepRequest. The host makes the batch's plan request
// from it (StepRequest.PlanRequest), the one place where an engine's
// facts become a plan request: the method's dims, the cache's dtype, and
// the bound on the lengths that a plan holds for. An engine's backend then
// asks for a step's plan once per batch shape, binds its own tensors and
// launches; it never builds a plan request itself.

// StepModel are the model's attention dims on one rank, as sglang's model
// config gives them.
type StepModel struct {
	// Heads is the query heads on this rank (num_attention_heads over the
	// attention tensor-parallel size).
	Heads int
	// KVLoraRank, QKRopeHeadDim, QKNopeHeadDim and VHeadDim are DeepSeek's
	// MLA dims (512, 64, 128, 128): the latent cache is KVLoraRank +
	// QKRopeHeadDim wide; the MHA methods' queries and keys QKNopeHeadDim +
	// QKRopeHeadDim, their values VHeadDim.
	KVLoraRank, QKRopeHeadDim, QKNopeHeadDim, VHeadDim int
	// SoftmaxScale is the layers' scaling.
	SoftmaxScale float64
	// IndexTopK is the top-k of DeepSeek sparse attention's indexer
	// (index_topk, 2048 for DeepSeek-V3.2) on a sparse layer; 0: dense.
	IndexTopK int
}

// StepPool is the engine's KV pool and page table, as sglang's model runner
// holds them.
type StepPool struct {
	// PageSize is the pool's page size in tokens.
	PageSize int
	// Slots is the rows of a layer's cache buffer, padding rows included
	// (token_to_kv_pool.get_key_buffer(layer).shape[0]): the plan's pages
	// are Slots / PageSize.
	Slots int64
	// MaxTokens is the tokens the pool holds for requests
	// (max_total_num_tokens): no request holds more.
	MaxTokens int64
	// RowWidth is the width of the page table (req_to_token.shape[1]): no
	// request holds more tokens.
	RowWidth int64
	// ContextLen is the model's context length: sglang caps a request at
	// it (and a target verify's drafts come on top).
	ContextLen int64
	// KVDType is the cache's dtype: "bf16", or "fp8_e4m3" (sglang's
	// --kv-cache-dtype fp8_e4m3: the MLA pool's e4m3 rows with the layer's
	// scale; for a sparse layer, DeepSeek-V3.2's 656-byte rows). Empty:
	// bf16.
	KVDType string
}

// StepBatch is the forward batch.
type StepBatch struct {
	// Size is the batch's requests.
	Size int
	// QueryTokens is every request's query tokens in a uniform batch: 1
	// for decode, the draft tokens for a target verify. 0 when QLens gives
	// them.
	QueryTokens int
	// Graph asks for a plan that holds for every step of the batch's shape
	// (its size and query tokens), whatever its key lengths, which are not
	// given: what a step captured in a CUDA graph needs, and what an
	// engine that reads no lengths on the host (sglang's
	// needs_cpu_seq_lens False) asks for its eager steps too.
	Graph bool
	// SeqLens are the keys each request attends to (a target verify's
	// drafts included) and QLens its query tokens, when the engine has
	// them on the host (an eager step). A graph step gives neither.
	SeqLens, QLens []int64
	// ChunkCapacity is MHA_CHUNKED_KV's chunk capacity (sglang's
	// get_max_chunk_capacity()).
	ChunkCapacity int
	// PrefixChunk asks, of MHA_CHUNKED_KV, for the pass over one prefix
	// chunk (sglang's attn_attend_prefix_cache call): SeqLens are each
	// request's keys in the chunk (0 for a prefix that ended before it),
	// QLens its new tokens (PlanShape.PrefixChunk).
	PrefixChunk bool
}

// StepRequest asks for the plan of one forward batch of an engine.
type StepRequest struct {
	// Backend is the name whose plugin's kernels run the step.
	Backend string
	// Mode is the batch's forward mode; Method is what the dispatch
	// answered for it (MLA for a decode, a target verify or an absorbed
	// extend; an MHA method for a prefill).
	Mode   ForwardMode
	Method Method
	Model  StepModel
	Pool   StepPool
	Batch  StepBatch
	// Device is the device the plan runs on.
	Device DeviceInfo
	// QuerySplit offers, for an MLA step, to bind the queries in the two
	// parts DeepSeek's absorbed attention leaves them in (q nope and q
	// rope, PlanRequest.QuerySplit): the plan takes them so where the
	// backend's kernel does (Kernel.QuerySplit), and whole otherwise. The
	// plan's tensors say which.
	QuerySplit bool
}

// The bounds of a step request: what no engine has.
const (
	maxStepBatch = 1 << 16
	maxStepLen   = 1 << 24
	// maxStepHeadDim bounds each head dim of the plan request made of a
	// step, as the host's check of a plan request does (launch.MaxHeadDim).
	maxStepHeadDim = 1024
)

// minEagerBound is the least bound of an eager step's plan.
const minEagerBound = 1024

// Admitted is the longest request, in keys, the engine's pool and page
// table admit at a step of q query tokens a request (a target verify's
// drafts on top of a request capped at the context length): the least of
// the context length plus the drafts, the pool's tokens and the page
// table's width. sglang caps requests so; a graph step's plan holds for
// it.
func (p StepPool) Admitted(mode ForwardMode, q int) int64 {
	longest := p.ContextLen
	if mode == ModeTargetVerify {
		longest += int64(q)
	}
	return min(longest, p.MaxTokens, p.RowWidth)
}

// Bound is the max_seq_len of a step's plan: for a graph step the longest
// request the pool admits (Admitted), so that one plan and one captured
// graph serve every step of the batch size; for an eager one the least
// power of two at least its longest request and minEagerBound, at most
// what the pool admits, so that the eager steps of a batch size share a
// few plans whose page tables stay within twice what they need. 0 for a
// step whose plan reads the lengths themselves (the MHA methods).
func (s *StepRequest) Bound() (int64, error) {
	if s.Method != MLA {
		return 0, nil
	}
	q := s.Batch.QueryTokens
	admitted := s.Pool.Admitted(s.Mode, q)
	if s.Batch.Graph {
		return admitted, nil
	}
	longest := int64(0)
	for _, n := range s.Batch.SeqLens {
		longest = max(longest, n)
	}
	if longest > admitted {
		return 0, invalid("batch.seq_lens", fmt.Sprintf("a request of %d keys, more than the pool and page table admit (%d: context_len %d, max_tokens %d, row_width %d)",
			longest, admitted, s.Pool.ContextLen, s.Pool.MaxTokens, s.Pool.RowWidth))
	}
	b := int64(minEagerBound)
	for b < longest {
		b *= 2
	}
	return min(b, admitted), nil
}

// check refuses a step request no engine sends, naming the field.
func (s *StepRequest) check() error {
	m, p, b := s.Model, s.Pool, s.Batch
	positive := func(field string, v int64, most int64) error {
		if v < 1 || v > most {
			return invalid(field, fmt.Sprintf("%d is outside [1, %d]", v, most))
		}
		return nil
	}
	for _, c := range []struct {
		field   string
		v, most int64
	}{
		{"model.heads", int64(m.Heads), 1024},
		{"model.kv_lora_rank", int64(m.KVLoraRank), maxStepHeadDim}, {"model.qk_rope_head_dim", int64(m.QKRopeHeadDim), maxStepHeadDim},
		{"model.qk_nope_head_dim", int64(m.QKNopeHeadDim), maxStepHeadDim}, {"model.v_head_dim", int64(m.VHeadDim), maxStepHeadDim},
		{"pool.page_size", int64(p.PageSize), 4096}, {"pool.slots", p.Slots, 1 << 40},
		{"pool.max_tokens", p.MaxTokens, 1 << 40}, {"pool.row_width", p.RowWidth, maxStepLen}, {"pool.context_len", p.ContextLen, maxStepLen},
		{"batch.size", int64(b.Size), maxStepBatch},
	} {
		if err := positive(c.field, c.v, c.most); err != nil {
			return err
		}
	}
	switch {
	case s.Backend == "":
		return invalid("backend", "empty")
	case !s.Mode.Valid():
		return invalid("mode", fmt.Sprintf("%d is not a forward mode", s.Mode))
	case !s.Method.Valid():
		return invalid("method", fmt.Sprintf("%d is not a method", s.Method))
	case !(m.SoftmaxScale > 0) || m.SoftmaxScale > 1e6 || math.IsInf(m.SoftmaxScale, 0):
		return invalid("model.softmax_scale", fmt.Sprintf("%v is not in (0, 1e6]", m.SoftmaxScale))
	case m.IndexTopK < 0 || m.IndexTopK > 1<<16:
		return invalid("model.index_topk", fmt.Sprintf("%d is outside [0, 65536]", m.IndexTopK))
	case p.KVDType != "" && p.KVDType != "bf16" && p.KVDType != "fp8_e4m3":
		return invalid("pool.kv_dtype", fmt.Sprintf("%q: want bf16 or fp8_e4m3", shortText(p.KVDType)))
	case p.Slots < int64(p.PageSize):
		return invalid("pool.slots", fmt.Sprintf("%d hold no page of pool.page_size %d", p.Slots, p.PageSize))
	case b.QueryTokens < 0 || b.QueryTokens > maxStepLen:
		return invalid("batch.query_tokens", fmt.Sprintf("%d is outside [0, %d]", b.QueryTokens, maxStepLen))
	case b.Graph && len(b.SeqLens) > 0:
		return invalid("batch.seq_lens", "a graph step gives no key lengths: its plan holds for every step of its shape")
	case len(b.SeqLens) != 0 && len(b.SeqLens) != b.Size:
		return invalid("batch.seq_lens", fmt.Sprintf("%d lengths for a batch of %d", len(b.SeqLens), b.Size))
	case len(b.QLens) != 0 && len(b.QLens) != b.Size:
		return invalid("batch.q_lens", fmt.Sprintf("%d lengths for a batch of %d", len(b.QLens), b.Size))
	case b.QueryTokens == 0 && len(b.QLens) == 0:
		return invalid("batch.query_tokens", "0, and no batch.q_lens")
	case b.ChunkCapacity < 0:
		return invalid("batch.chunk_capacity", fmt.Sprintf("%d is negative", b.ChunkCapacity))
	case b.PrefixChunk && s.Method != MHAChunkedKV:
		return invalid("batch.prefix_chunk", fmt.Sprintf("a prefix chunk is a pass of MHA_CHUNKED_KV, the method is %s", s.Method))
	}
	least := int64(1)
	if b.PrefixChunk {
		least = 0 // a request whose prefix ended before the chunk
	}
	for i, n := range b.SeqLens {
		if n < least || n > maxStepLen {
			return invalid("batch.seq_lens", fmt.Sprintf("[%d] %d is outside [%d, %d]", i, n, least, maxStepLen))
		}
	}
	for i, n := range b.QLens {
		if n < 1 || n > maxStepLen {
			return invalid("batch.q_lens", fmt.Sprintf("[%d] %d is outside [1, %d]", i, n, maxStepLen))
		}
	}
	return nil
}

// PlanRequest is the plan request of s, and the bound the plan
// holds for (Bound): for MLA (a decode, a target verify, an extend over
// the cache) the absorbed dims (KVLoraRank + QKRopeHeadDim queries and
// keys, KVLoraRank values) over the pool's pages, each request QueryTokens
// (or QLens) query tokens; a graph plan that holds for the batch size,
// scheduled on the device, whose lengths are the bound (it reads none of
// them); on a sparse layer the sparse kernel's top-k, over the step's
// query tokens as requests of one token each; the queries split where the
// step offers it (QuerySplit: the host keeps it only for a kernel that
// takes it). For an MHA method,
// the prefill dims (QKNopeHeadDim + QKRopeHeadDim, VHeadDim) over the
// batch's own lengths. The error wraps ErrInvalidRequest and names the
// field.
func (s *StepRequest) PlanRequest() (PlanRequest, int64, error) {
	if err := s.check(); err != nil {
		return PlanRequest{}, 0, err
	}
	m, p, b := s.Model, s.Pool, s.Batch
	kv := p.KVDType
	if kv == "bf16" {
		kv = ""
	}
	req := PlanRequest{Backend: s.Backend, Method: s.Method, DType: "bf16", KVDType: kv, Device: s.Device}
	qlens := b.QLens
	if len(qlens) == 0 {
		qlens = slices.Repeat([]int64{int64(b.QueryTokens)}, b.Size)
	}
	size := b.Size
	switch s.Method {
	case MLA:
		if m.IndexTopK > 0 {
			// Sparse attention: each query token attends to its own top-k
			// keys (its row of topk_indices), whatever its request, so the
			// plan is one of the step's query tokens alone, each a request
			// of one token; its key depends on their number only.
			var tokens int64
			for _, q := range qlens {
				tokens += q
			}
			if tokens > maxStepBatch {
				return PlanRequest{}, 0, invalid("batch.q_lens", fmt.Sprintf("%d query tokens on a sparse layer, more than %d", tokens, maxStepBatch))
			}
			size = int(tokens)
			qlens = slices.Repeat([]int64{1}, size)
		}
		if w := m.KVLoraRank + m.QKRopeHeadDim; w > maxStepHeadDim {
			return PlanRequest{}, 0, invalid("model.kv_lora_rank", fmt.Sprintf("%d and qk_rope_head_dim %d make a latent cache %d wide, more than %d",
				m.KVLoraRank, m.QKRopeHeadDim, w, maxStepHeadDim))
		}
		bound, err := s.Bound()
		if err != nil {
			return PlanRequest{}, 0, err
		}
		req.Dims = PlanDims{Heads: m.Heads, HeadDimQK: m.KVLoraRank + m.QKRopeHeadDim, HeadDimV: m.KVLoraRank, SoftmaxScale: m.SoftmaxScale, TopK: m.IndexTopK}
		req.Shape = PlanShape{SeqLens: slices.Repeat([]int64{bound}, size), QLens: qlens, PageSize: p.PageSize,
			NumPages: int(min(p.Slots/int64(p.PageSize), math.MaxInt32)), MaxSeqLen: bound}
		req.Graph = true
		req.QuerySplit = s.QuerySplit
		return req, bound, nil
	case MHA, MHAOneShot, MHAChunkedKV:
		if b.Graph || len(b.SeqLens) == 0 {
			return PlanRequest{}, 0, invalid("batch.seq_lens", fmt.Sprintf("%s reads each request's lengths: an eager step gives them", s.Method))
		}
		switch qk := m.QKNopeHeadDim + m.QKRopeHeadDim; {
		case qk > maxStepHeadDim:
			return PlanRequest{}, 0, invalid("model.qk_nope_head_dim", fmt.Sprintf("%d + qk_rope_head_dim %d is %d, more than %d", m.QKNopeHeadDim, m.QKRopeHeadDim, qk, maxStepHeadDim))
		case m.VHeadDim > qk:
			return PlanRequest{}, 0, invalid("model.v_head_dim", fmt.Sprintf("%d is more than qk_nope_head_dim %d + qk_rope_head_dim %d (%d)", m.VHeadDim, m.QKNopeHeadDim, m.QKRopeHeadDim, qk))
		}
		req.Dims = PlanDims{Heads: m.Heads, HeadDimQK: m.QKNopeHeadDim + m.QKRopeHeadDim, HeadDimV: m.VHeadDim, SoftmaxScale: m.SoftmaxScale}
		req.Shape = PlanShape{SeqLens: b.SeqLens, QLens: qlens, ChunkCapacity: b.ChunkCapacity, PrefixChunk: b.PrefixChunk}
		return req, 0, nil
	}
	return PlanRequest{}, 0, invalid("method", fmt.Sprintf("%s has no device plan (MLA and the MHA methods do)", s.Method))
}

// StepPlan is the plan of a step: the plan request made of it, the plan,
// checked by the host, and what it holds for.
type StepPlan struct {
	// Request is the plan request made of the step (StepRequest.PlanRequest).
	Request PlanRequest
	// Plan is its plan.
	Plan *Plan
	// Key is the plan's key (PlanKey): steps whose plans share a key share
	// the plan.
	Key PlanKey
	// MaxSeqLen, when set, is the longest request (in keys) the plan
	// holds for: it serves every step of the batch size whose requests
	// hold at most that many keys, with no other plan request. 0: the plan
	// holds for the step's own lengths only.
	MaxSeqLen int64
	// PagesPerRequest is the page table's room per request in the plan's
	// kv_indices: ceil(MaxSeqLen / page size); 0 when MaxSeqLen is.
	PagesPerRequest int64
}

// PlanKey is the key of a plan request as far as a plan reads it: the
// SHA-256 of every field of the request that every plan depends on
// (backend, method, dtypes, dims, device, graph, the batch size, page
// size, number of pages and max_seq_len) and of the per-batch quantities
// reads names, each length-prefixed, so that two requests share a key
// only when they agree on all of them. The registry keeps plans by it; a
// plan's StepPlan.Key is it.
type PlanKey [32]byte

// String is the key in hex.
func (k PlanKey) String() string { return hex.EncodeToString(k[:]) }

// Key returns r's key as far as a plan reading reads reads it (0: the
// base key, none of the per-batch quantities).
func (r *PlanRequest) Key(reads PlanReads) PlanKey {
	b := make([]byte, 0, 256+16*len(r.Shape.SeqLens))
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(xs ...int64) {
		for _, x := range xs {
			b = binary.AppendVarint(b, x)
		}
	}
	flag := func(v bool) {
		if v {
			num(1)
		} else {
			num(0)
		}
	}
	lens := func(xs []int64) {
		num(int64(len(xs)))
		num(xs...)
	}
	d, s, dev := r.Dims, r.Shape, r.Device
	str(r.Backend)
	num(int64(r.Method))
	str(r.DType)
	str(r.KVDType)
	num(int64(d.Heads), int64(d.HeadDimQK), int64(d.HeadDimV), int64(math.Float64bits(d.SoftmaxScale)), int64(d.TopK))
	num(int64(len(s.SeqLens)), int64(s.PageSize), int64(s.NumPages), s.MaxSeqLen)
	flag(s.PrefixChunk)
	num(int64(dev.Platform))
	str(dev.Name)
	num(int64(dev.ComputeCapability), int64(dev.SMs), int64(dev.MaxThreadsPerBlock), int64(dev.MaxSharedPerBlock),
		int64(dev.MaxGrid[0]), int64(dev.MaxGrid[1]), int64(dev.MaxGrid[2]))
	flag(r.Graph)
	flag(r.QuerySplit)
	num(int64(reads))
	if reads&PlanReadsSeqLens != 0 {
		lens(s.SeqLens)
	}
	if reads&PlanReadsQLens != 0 {
		lens(s.QLens)
	}
	if reads&PlanReadsChunkCapacity != 0 {
		num(int64(s.ChunkCapacity))
	}
	return sha256.Sum256(b)
}
