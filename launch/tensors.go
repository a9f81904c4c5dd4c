package launch

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
)

// Limits on a plan request, so that no shape a caller types overflows the
// int32 indexing of the kernels.
const (
	MaxBatch     = 1 << 16
	MaxSeqLen    = 1 << 24
	MaxQLen      = 64 // query tokens per request of a decode (MLA) plan
	MaxHeads     = 1024
	MaxHeadDim   = 1024
	MaxPageSize  = 4096
	MaxNumPages  = 1 << 28
	maxTotalKeys = 1 << 30
)

// CheckRequest verifies a plan request's shape: positive dimensions within
// the limits above, one query length per request, every request with at
// least one query and at least as many keys as queries, and enough pages
// for the keys. The error wraps core.ErrInvalidRequest and names the field.
func CheckRequest(req *core.PlanRequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", core.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	d, s := req.Dims, req.Shape
	switch {
	case d.Heads < 1 || d.Heads > MaxHeads:
		return bad("dims.heads %d is outside [1, %d]", d.Heads, MaxHeads)
	case d.HeadDimQK < 1 || d.HeadDimQK > MaxHeadDim:
		return bad("dims.head_dim_qk %d is outside [1, %d]", d.HeadDimQK, MaxHeadDim)
	case d.HeadDimV < 1 || d.HeadDimV > d.HeadDimQK:
		return bad("dims.head_dim_v %d is outside [1, head_dim_qk %d]", d.HeadDimV, d.HeadDimQK)
	case !(d.SoftmaxScale > 0) || d.SoftmaxScale > 1e6:
		return bad("dims.softmax_scale %v is not in (0, 1e6]", d.SoftmaxScale)
	case core.DTypeSize(req.DType) == 0:
		return bad("dtype %q is unknown", req.DType)
	case len(s.SeqLens) < 1 || len(s.SeqLens) > MaxBatch:
		return bad("shape.seq_lens has %d requests, want 1..%d", len(s.SeqLens), MaxBatch)
	case len(s.QLens) != len(s.SeqLens):
		return bad("shape.q_lens has %d entries, shape.seq_lens %d", len(s.QLens), len(s.SeqLens))
	case s.ChunkCapacity < 0 || s.ChunkCapacity > MaxSeqLen*64:
		return bad("shape.chunk_capacity %d is outside [0, %d]", s.ChunkCapacity, MaxSeqLen*64)
	}
	paged := req.Method == core.MLA
	if paged {
		switch {
		case s.PageSize < 1 || s.PageSize > MaxPageSize:
			return bad("shape.page_size %d is outside [1, %d]", s.PageSize, MaxPageSize)
		case s.NumPages < 1 || s.NumPages > MaxNumPages:
			return bad("shape.num_pages %d is outside [1, %d]", s.NumPages, MaxNumPages)
		}
	}
	maxQ := int64(MaxQLen)
	if !paged {
		maxQ = MaxSeqLen
	}
	var keys int64
	for i, n := range s.SeqLens {
		q := s.QLens[i]
		if n < 1 || n > MaxSeqLen {
			return bad("shape.seq_lens[%d] %d is outside [1, %d]", i, n, MaxSeqLen)
		}
		if q < 1 || q > maxQ || q > n {
			return bad("shape.q_lens[%d] %d is outside [1, min(%d, seq_lens[%d] %d)]", i, q, maxQ, i, n)
		}
		if !paged {
			keys += n
			continue
		}
		if p := (n + int64(s.PageSize) - 1) / int64(s.PageSize); p > int64(s.NumPages) {
			// Pages may be shared between requests (a common prefix), but
			// one request cannot use more pages than the cache has.
			return bad("shape.seq_lens[%d] %d needs %d pages of %d tokens, the cache has %d", i, n, p, s.PageSize, s.NumPages)
		}
		keys += n
	}
	if keys > maxTotalKeys {
		return bad("shape.seq_lens add up to %d keys, more than %d", keys, int64(maxTotalKeys))
	}
	if m := s.MaxSeqLen; m != 0 {
		var longest int64
		for _, n := range s.SeqLens {
			longest = max(longest, n)
		}
		switch {
		case m < 1 || m > MaxSeqLen:
			return bad("shape.max_seq_len %d is outside [1, %d]", m, MaxSeqLen)
		case m < longest:
			return bad("shape.max_seq_len %d is below the longest of shape.seq_lens, %d", m, longest)
		case paged && (m+int64(s.PageSize)-1)/int64(s.PageSize) > int64(s.NumPages):
			return bad("shape.max_seq_len %d needs %d pages of %d tokens, the cache has %d", m, (m+int64(s.PageSize)-1)/int64(s.PageSize), s.PageSize, s.NumPages)
		case paged && int64(len(s.SeqLens))*m > maxTotalKeys:
			return bad("shape.max_seq_len %d for %d requests is more than %d keys", m, len(s.SeqLens), int64(maxTotalKeys))
		}
	}
	return nil
}

// PagesPerRequest is the page-table room a graph plan gives each request
// (kv_indices holds batch times as many): ceil(MaxSeqLen/PageSize). 0 when
// req is not a graph request with a declared MaxSeqLen.
func PagesPerRequest(req *core.PlanRequest) int64 {
	s := req.Shape
	if !req.Graph || s.MaxSeqLen == 0 || s.PageSize < 1 {
		return 0
	}
	return (s.MaxSeqLen + int64(s.PageSize) - 1) / int64(s.PageSize)
}

// Tensors returns the tensors the host binds for req, with their shapes:
// the paged absorbed-MLA layout of sglang.
//
//	q          [tokens, heads, head_dim_qk]    dtype   queries (absorbed, rotated)
//	kv_cache   [num_pages, page_size, head_dim_qk] dtype the latent cache
//	kv_indptr  [batch+1]                       i32     request i's pages are
//	kv_indices [pages]                         i32     kv_indices[kv_indptr[i]:kv_indptr[i+1]]
//	seq_lens   [batch]                         i32     request i's keys (its prefix and new tokens)
//	qo_indptr  [batch+1]                       i32     request i's queries are rows
//	                                                   qo_indptr[i]:qo_indptr[i+1] of q, out, lse
//	out        [tokens, heads, head_dim_v]     dtype   output
//	lse        [tokens, heads]                 f32     natural log-sum-exp of the scaled scores
//
// tokens is the sum of the query lengths; kv_indptr[i+1]-kv_indptr[i] is
// ceil(seq_lens[i]/page_size), the layout of sglang's triton and
// flashinfer backends (with page size 1, one index per token). pages is
// kv_indptr[batch], the sum of those; for a graph request with a declared
// Shape.MaxSeqLen it is the room of the page table, batch times
// PagesPerRequest, which the host fills up to kv_indptr[batch] at each
// step. seq_lens and qo_indptr are what a kernel needs to know each
// request's keys and queries: every paged kernel reads them from there
// rather than from metadata of its own.
func Tensors(req *core.PlanRequest) ([]core.TensorSpec, error) {
	if err := CheckRequest(req); err != nil {
		return nil, err
	}
	switch req.Method {
	case core.MLA:
	case core.MHA, core.MHAOneShot, core.MHAChunkedKV:
		return raggedTensors(req), nil
	default:
		return nil, fmt.Errorf("%w: method %s has no device layout", core.ErrNoPlan, req.Method)
	}
	d, s := req.Dims, req.Shape
	var tokens, pages int64
	for i, n := range s.SeqLens {
		tokens += s.QLens[i]
		pages += (n + int64(s.PageSize) - 1) / int64(s.PageSize)
	}
	b := int64(len(s.SeqLens))
	h := int64(d.Heads)
	if per := PagesPerRequest(req); per > 0 {
		pages = b * per
	}
	return []core.TensorSpec{
		{Name: "q", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimQK)}},
		{Name: "kv_cache", DType: req.DType, Shape: []int64{int64(s.NumPages), int64(s.PageSize), int64(d.HeadDimQK)}},
		{Name: "kv_indptr", DType: "i32", Shape: []int64{b + 1}},
		{Name: "kv_indices", DType: "i32", Shape: []int64{pages}},
		{Name: "seq_lens", DType: "i32", Shape: []int64{b}},
		{Name: "qo_indptr", DType: "i32", Shape: []int64{b + 1}},
		{Name: "out", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimV)}, Output: true},
		{Name: "lse", DType: "f32", Shape: []int64{tokens, h}, Output: true},
	}, nil
}

// raggedTensors is the layout of the MHA methods, sglang's ragged prefill:
//
//	q        [tokens, heads, head_dim_qk]   queries of the new tokens
//	k, v     [keys, heads, head_dim_qk|v]   MHA and MHA_ONE_SHOT: each request's keys,
//	                                         prefix then new tokens, request by request
//	                                         (keys = sum of seq_lens; MHA with no prefix:
//	                                         the new tokens over themselves);
//	                                         MHA_CHUNKED_KV: the new tokens' keys
//	k_prefix, v_prefix [prefix, heads, ...]  MHA_CHUNKED_KV only: the prefixes,
//	                                         decompressed, request by request
//	out      [tokens, heads, head_dim_v]    output
//	lse      [tokens, heads] f32            natural log-sum-exp of the scaled scores
func raggedTensors(req *core.PlanRequest) []core.TensorSpec {
	d, s := req.Dims, req.Shape
	var tokens, keys int64
	for i, n := range s.SeqLens {
		tokens += s.QLens[i]
		keys += n
	}
	h, dqk, dv := int64(d.Heads), int64(d.HeadDimQK), int64(d.HeadDimV)
	kv := keys
	if req.Method == core.MHAChunkedKV {
		kv = tokens
	}
	ts := []core.TensorSpec{
		{Name: "q", DType: req.DType, Shape: []int64{tokens, h, dqk}},
		{Name: "k", DType: req.DType, Shape: []int64{kv, h, dqk}},
		{Name: "v", DType: req.DType, Shape: []int64{kv, h, dv}},
	}
	if req.Method == core.MHAChunkedKV {
		ts = append(ts,
			core.TensorSpec{Name: "k_prefix", DType: req.DType, Shape: []int64{keys - tokens, h, dqk}},
			core.TensorSpec{Name: "v_prefix", DType: req.DType, Shape: []int64{keys - tokens, h, dv}})
	}
	return append(ts,
		core.TensorSpec{Name: "out", DType: req.DType, Shape: []int64{tokens, h, dv}, Output: true},
		core.TensorSpec{Name: "lse", DType: "f32", Shape: []int64{tokens, h}, Output: true})
}
