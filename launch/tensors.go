package launch

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnplug/attnplug/core"
)

// Limits on a plan request, so that no shape a caller types overflows the
// int32 indexing of the kernels.
const (
	MaxBatch     = 1 << 16
	MaxSeqLen    = 1 << 24
	MaxQLen      = 64 // query tokens of a work request of a dense MLA plan: a longer request is cut into work requests of MaxQLen
	MaxHeads     = 1024
	MaxHeadDim   = 1024
	MaxPageSize  = 4096
	MaxNumPages  = 1 << 28
	MaxTopK      = 1 << 16           // keys per query token of a sparse plan
	MaxSMs       = core.MaxDeviceSMs // multiprocessors of the device (132 on an H100)
	maxTotalKeys = 1 << 30
)

// CheckRequest verifies a plan request's shape: positive dimensions within
// the limits above, one query length per request, every request with at
// least one query and at least as many keys as queries (a prefix chunk's:
// any keys, none included, and one key in all), enough pages for the keys, and a plan within the bounds of a plan (core's
// PlanRequest.CheckSize: the query tokens, and the prefix chunks of
// MHA_CHUNKED_KV). The error wraps core.ErrInvalidRequest and names the
// field. The host checks every plan request with it before asking a
// plugin, and the planners of devkernels before planning.
func CheckRequest(req *core.PlanRequest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", core.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if err := req.Device.Check(); err != nil {
		return err
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
	case req.KVDType != "" && core.DTypeSize(req.KVDType) == 0:
		return bad("kv_dtype %q is unknown", req.KVDType)
	case d.TopK < 0 || d.TopK > MaxTopK:
		return bad("dims.top_k %d is outside [0, %d]", d.TopK, MaxTopK)
	case d.TopK > 0 && req.Method != core.MLA:
		return bad("dims.top_k %d: sparse attention is MLA, the method is %s", d.TopK, req.Method)
	case len(s.SeqLens) < 1 || len(s.SeqLens) > MaxBatch:
		return bad("shape.seq_lens has %d requests, want 1..%d", len(s.SeqLens), MaxBatch)
	case len(s.QLens) != len(s.SeqLens):
		return bad("shape.q_lens has %d entries, shape.seq_lens %d", len(s.QLens), len(s.SeqLens))
	case s.ChunkCapacity < 0 || s.ChunkCapacity > MaxSeqLen*64:
		return bad("shape.chunk_capacity %d is outside [0, %d]", s.ChunkCapacity, MaxSeqLen*64)
	case s.PrefixChunk && req.Method != core.MHAChunkedKV:
		return bad("shape.prefix_chunk: a prefix chunk is a pass of MHA_CHUNKED_KV, the method is %s", req.Method)
	case req.QuerySplit && req.Method != core.MLA:
		return bad("query_split: queries split into q_nope and q_rope are MLA's, the method is %s", req.Method)
	case req.QuerySplit && d.HeadDimV >= d.HeadDimQK:
		return bad("query_split: dims.head_dim_v %d leaves no rope columns of dims.head_dim_qk %d to split off", d.HeadDimV, d.HeadDimQK)
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
	keys, err := checkLens(s, paged)
	if err != nil {
		return err
	}
	// A sparse request's keys are its tokens' top-k (bounded below), not
	// its lengths: a step's sparse request gives each token the step's
	// bound, which at a long context adds up to more than any dense batch.
	sparse := d.TopK > 0
	switch {
	case keys > maxTotalKeys && !sparse:
		return bad("shape.seq_lens add up to %d keys, more than %d", keys, int64(maxTotalKeys))
	case s.PrefixChunk && keys == 0:
		return bad("shape.seq_lens are all 0: a prefix chunk without a key")
	}
	if sparse {
		// topk_indices are i32 slots (page * page_size + offset).
		if slots := int64(s.NumPages) * int64(s.PageSize); slots > math.MaxInt32 {
			return bad("shape.num_pages %d of %d tokens make %d slots, more than topk_indices (i32) name", s.NumPages, s.PageSize, slots)
		}
		var tokens int64
		for _, q := range s.QLens {
			tokens += q
		}
		if tokens > MaxBatch*MaxQLen || tokens*int64(d.TopK) > maxTotalKeys {
			return bad("shape.q_lens add up to %d query tokens of dims.top_k %d keys: more than %d tokens or %d keys", tokens, d.TopK, MaxBatch*MaxQLen, int64(maxTotalKeys))
		}
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
		case paged && !sparse && int64(len(s.SeqLens))*m > maxTotalKeys:
			return bad("shape.max_seq_len %d for %d requests is more than %d keys", m, len(s.SeqLens), int64(maxTotalKeys))
		}
	}
	return req.CheckSize()
}

// checkLens checks each request's keys and query tokens (CheckRequest) and
// returns the keys of the batch. Any request may have as many query tokens
// as keys: a ragged prefill, a sparse MLA request (each query token has
// its own keys), a dense MLA extend (cut into work requests of MaxQLen
// tokens); a prefix chunk's, any number over its chunk's keys, none
// included.
func checkLens(s core.PlanShape, paged bool) (keys int64, err error) {
	bad := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("%w: %s", core.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	least := int64(1)
	if s.PrefixChunk {
		least = 0
	}
	for i, n := range s.SeqLens {
		q := s.QLens[i]
		if n < least || n > MaxSeqLen {
			return bad("shape.seq_lens[%d] %d is outside [%d, %d]", i, n, least, MaxSeqLen)
		}
		switch {
		case s.PrefixChunk && (q < 1 || q > MaxSeqLen):
			return bad("shape.q_lens[%d] %d is outside [1, %d]", i, q, MaxSeqLen)
		case !s.PrefixChunk && (q < 1 || q > n):
			return bad("shape.q_lens[%d] %d is outside [1, seq_lens[%d] %d]", i, q, i, n)
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
	return keys, nil
}

// PagesPerRequest is the page-table room a graph plan gives each request
// (kv_indices holds batch times as many): ceil(MaxSeqLen/PageSize). 0 when
// req is not a graph request with a declared MaxSeqLen of the paged dense
// MLA layout, the one layout with a page table (MHA's keys are ragged, a
// sparse request's are its top-k).
func PagesPerRequest(req *core.PlanRequest) int64 {
	s := req.Shape
	if !req.Graph || s.MaxSeqLen == 0 || s.PageSize < 1 || req.Method != core.MLA || req.Dims.TopK > 0 {
		return 0
	}
	return (s.MaxSeqLen + int64(s.PageSize) - 1) / int64(s.PageSize)
}

// Tensors returns the tensors the host binds for req, with their shapes:
// the paged absorbed-MLA layout of sglang.
//
//	q          [tokens, heads, head_dim_qk]    dtype   queries (absorbed, rotated)
//	kv_cache   [num_pages, page_size, head_dim_qk] kv_dtype the latent cache
//	kv_indptr  [batch+1]                       i32     request i's pages are
//	kv_indices [pages]                         i32     kv_indices[kv_indptr[i]:kv_indptr[i+1]]
//	seq_lens   [batch]                         i32     request i's keys (its prefix and new tokens)
//	qo_indptr  [batch+1]                       i32     request i's queries are rows
//	                                                   qo_indptr[i]:qo_indptr[i+1] of q, out, lse
//	out        [tokens, heads, head_dim_v]     dtype   output
//	lse        [tokens, heads]                 f32     natural log-sum-exp of the scaled scores
//
// A request with QuerySplit binds, instead of q, its two parts as
// DeepSeek's absorbed attention leaves them, each strided
// (core.TensorSpec.Strided: any row strides, read through ArgStride):
//
//	q_nope     [tokens, heads, head_dim_v]     dtype   the first head_dim_v columns of q
//	q_rope     [tokens, heads, head_dim_qk-head_dim_v] dtype the rest (the rotated part)
//
// tokens is the sum of the query lengths; kv_indptr[i+1]-kv_indptr[i] is
// ceil(seq_lens[i]/page_size), the layout of sglang's triton and
// flashinfer backends (with page size 1, one index per token). pages is
// kv_indptr[batch], the sum of those; for a graph request with a declared
// Shape.MaxSeqLen it is the room of the page table, batch times
// PagesPerRequest, which the host fills up to kv_indptr[batch] at each
// step. seq_lens and qo_indptr are what a kernel needs to know each
// request's keys and queries: every paged kernel reads them from there
// rather than from metadata of its own. An FP8 cache (kv_dtype fp8_e4m3)
// adds
//
//	kv_scale   [1]                             f32     the layer's scale: a cached
//	                                                   value is the e4m3 times kv_scale
//
// A sparse request (dims.top_k > 0: DeepSeek sparse attention) binds
//
//	q, out, lse                                        as above
//	kv_cache   [num_pages, page_size, row]     kv_dtype row: head_dim_qk for bf16;
//	                                                   SparseFP8RowBytes for fp8_e4m3
//	topk_indices [tokens, top_k]               i32     query token t attends to the
//	                                                   cache slots topk_indices[t, :]
//	                                                   (page * page_size + offset,
//	                                                   sglang's page_table_1), -1 pads
//
// and reads neither the page table nor the lengths: the indexer chose each
// token's keys.
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
	kvd := req.CacheDType()
	cache := core.TensorSpec{Name: "kv_cache", DType: kvd, Shape: []int64{int64(s.NumPages), int64(s.PageSize), int64(d.HeadDimQK)}}
	qs := []core.TensorSpec{{Name: "q", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimQK)}}}
	if req.QuerySplit {
		qs = []core.TensorSpec{
			{Name: "q_nope", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimV)}, Strided: true},
			{Name: "q_rope", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimQK - d.HeadDimV)}, Strided: true},
		}
	}
	outs := []core.TensorSpec{
		{Name: "out", DType: req.DType, Shape: []int64{tokens, h, int64(d.HeadDimV)}, Output: true},
		{Name: "lse", DType: "f32", Shape: []int64{tokens, h}, Output: true},
	}
	if d.TopK > 0 {
		if core.DTypeSize(kvd) == 1 {
			cache.Shape[2] = SparseFP8RowBytes(d)
		}
		return slices.Concat(qs, []core.TensorSpec{cache, {Name: "topk_indices", DType: "i32", Shape: []int64{tokens, int64(d.TopK)}}}, outs), nil
	}
	ts := append(qs, cache,
		core.TensorSpec{Name: "kv_indptr", DType: "i32", Shape: []int64{b + 1}},
		core.TensorSpec{Name: "kv_indices", DType: "i32", Shape: []int64{pages}},
		core.TensorSpec{Name: "seq_lens", DType: "i32", Shape: []int64{b}},
		core.TensorSpec{Name: "qo_indptr", DType: "i32", Shape: []int64{b + 1}},
	)
	if core.DTypeSize(kvd) == 1 {
		ts = append(ts, core.TensorSpec{Name: "kv_scale", DType: "f32", Shape: []int64{1}})
	}
	return append(ts, outs...), nil
}

// SparseFP8RowBytes is the size of one token of a sparse plan's FP8 cache,
// DeepSeek-V3.2's layout (sglang's NSA pool in fp8_e4m3, FlashMLA's sparse
// FP8 cache): head_dim_v e4m3 values, a float32 scale per 128 of them, and
// the head_dim_qk-head_dim_v rope values in bf16: 656 bytes at 576/512.
func SparseFP8RowBytes(d core.PlanDims) int64 {
	return int64(d.HeadDimV) + 4*int64((d.HeadDimV+127)/128) + 2*int64(d.HeadDimQK-d.HeadDimV)
}

// raggedTensors is the layout of the MHA methods, sglang's ragged prefill:
//
//	q        [tokens, heads, head_dim_qk]   queries of the new tokens
//	k, v     [keys, heads, head_dim_qk|v]   MHA and MHA_ONE_SHOT: each request's keys,
//	                                         prefix then new tokens, request by request
//	                                         (keys = sum of seq_lens; MHA with no prefix:
//	                                         the new tokens over themselves);
//	                                         MHA_CHUNKED_KV: the new tokens' keys; its
//	                                         prefix chunk (shape.prefix_chunk): the
//	                                         chunk's keys, request by request
//	k_prefix, v_prefix [prefix, heads, ...]  MHA_CHUNKED_KV only (not a prefix chunk):
//	                                         the prefixes, decompressed, request by request
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
	if req.Method == core.MHAChunkedKV && !s.PrefixChunk {
		kv = tokens
	}
	ts := []core.TensorSpec{
		{Name: "q", DType: req.DType, Shape: []int64{tokens, h, dqk}},
		{Name: "k", DType: req.DType, Shape: []int64{kv, h, dqk}},
		{Name: "v", DType: req.DType, Shape: []int64{kv, h, dv}},
	}
	if req.Method == core.MHAChunkedKV && !s.PrefixChunk {
		ts = append(ts,
			core.TensorSpec{Name: "k_prefix", DType: req.DType, Shape: []int64{keys - tokens, h, dqk}},
			core.TensorSpec{Name: "v_prefix", DType: req.DType, Shape: []int64{keys - tokens, h, dv}})
	}
	return append(ts,
		core.TensorSpec{Name: "out", DType: req.DType, Shape: []int64{tokens, h, dv}, Output: true},
		core.TensorSpec{Name: "lse", DType: "f32", Shape: []int64{tokens, h}, Output: true})
}
