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
	MaxQLen      = 64
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
	case s.PageSize < 1 || s.PageSize > MaxPageSize:
		return bad("shape.page_size %d is outside [1, %d]", s.PageSize, MaxPageSize)
	case s.NumPages < 1 || s.NumPages > MaxNumPages:
		return bad("shape.num_pages %d is outside [1, %d]", s.NumPages, MaxNumPages)
	}
	var keys int64
	for i, n := range s.SeqLens {
		q := s.QLens[i]
		if n < 1 || n > MaxSeqLen {
			return bad("shape.seq_lens[%d] %d is outside [1, %d]", i, n, MaxSeqLen)
		}
		if q < 1 || q > MaxQLen || q > n {
			return bad("shape.q_lens[%d] %d is outside [1, min(%d, seq_lens[%d] %d)]", i, q, MaxQLen, i, n)
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
	return nil
}

// Tensors returns the tensors the host binds for req, with their shapes:
// the paged absorbed-MLA layout of sglang.
//
//	q          [tokens, heads, head_dim_qk]    dtype   queries (absorbed, rotated)
//	kv_cache   [num_pages, page_size, head_dim_qk] dtype the latent cache
//	kv_indptr  [batch+1]                       i32     request i's pages are
//	kv_indices [kv_indptr[batch]]              i32     kv_indices[kv_indptr[i]:kv_indptr[i+1]]
//	out        [tokens, heads, head_dim_v]     dtype   output
//	lse        [tokens, heads]                 f32     natural log-sum-exp of the scaled scores
//
// tokens is the sum of the query lengths; kv_indptr[i+1]-kv_indptr[i] is
// ceil(seq_lens[i]/page_size), the layout of sglang's triton and
// flashinfer backends (with page size 1, one index per token).
func Tensors(req *core.PlanRequest) ([]core.TensorSpec, error) {
	if err := CheckRequest(req); err != nil {
		return nil, err
	}
	if req.Method != core.MLA {
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
	return []core.TensorSpec{
		{Name: "q", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimQK)}},
		{Name: "kv_cache", DType: req.DType, Shape: []int64{int64(s.NumPages), int64(s.PageSize), int64(d.HeadDimQK)}},
		{Name: "kv_indptr", DType: "i32", Shape: []int64{b + 1}},
		{Name: "kv_indices", DType: "i32", Shape: []int64{pages}},
		{Name: "out", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimV)}, Output: true},
		{Name: "lse", DType: "f32", Shape: []int64{tokens, h}, Output: true},
	}, nil
}
