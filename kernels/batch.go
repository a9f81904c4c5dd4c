package kernels

import (
	"fmt"
	"unsafe"

	"github.com/attnplug/attnplug/core"
)

// BatchShape describes a batch of requests the way sglang's ForwardBatch does: per
// request the total sequence length (seq_lens) and the cached prefix length
// (extend_prefix_lens); request r has SeqLens[r]-PrefixLens[r] new tokens.
type BatchShape struct {
	// SeqLens is, per request, the number of tokens after this step (prefix + new).
	SeqLens []int
	// PrefixLens is, per request, the number of tokens already in the KV cache.
	PrefixLens []int
}

// maxTokens bounds the tokens of a batch so that every tensor size fits in int32-indexable ranges.
const maxTokens = 1 << 24

// Requests returns the number of requests in b.
func (b BatchShape) Requests() int { return len(b.SeqLens) }

// Tokens returns the number of new (query) tokens in b: the sum of SeqLens-PrefixLens.
func (b BatchShape) Tokens() int {
	n := 0
	for r := range b.SeqLens {
		n += b.SeqLens[r] - b.PrefixLens[r]
	}
	return n
}

// KVTokens returns the number of KV tokens in b (cached prefix plus new): the sum of SeqLens.
func (b BatchShape) KVTokens() int {
	n := 0
	for _, s := range b.SeqLens {
		n += s
	}
	return n
}

// Validate reports the first inconsistency in b: a *core.FieldError
// (errors.Is core.ErrInvalidRequest) naming the field as the dispatch
// format does (seq_lens, extend_prefix_lens), the request and the value.
func (b BatchShape) Validate() error {
	if len(b.SeqLens) == 0 {
		return core.NewFieldError("seq_lens", "empty (a batch needs at least one request)")
	}
	if len(b.PrefixLens) != len(b.SeqLens) {
		return core.NewFieldError("extend_prefix_lens", fmt.Sprintf("has %d entries, seq_lens %d", len(b.PrefixLens), len(b.SeqLens)))
	}
	total := 0
	for r := range b.SeqLens {
		s, p := b.SeqLens[r], b.PrefixLens[r]
		seq, prefix := fmt.Sprintf("seq_lens[%d]", r), fmt.Sprintf("extend_prefix_lens[%d]", r)
		switch {
		case s < 0:
			return core.NewFieldError(seq, fmt.Sprintf("%d is negative", s))
		case p < 0:
			return core.NewFieldError(prefix, fmt.Sprintf("%d is negative", p))
		case p > s:
			return core.NewFieldError(prefix, fmt.Sprintf("%d is longer than %s = %d", p, seq, s))
		case p == s:
			return core.NewFieldError(seq, fmt.Sprintf("request %d has no new token (%s = %s = %d)", r, prefix, seq, s))
		case s > maxTokens:
			return core.NewFieldError(seq, fmt.Sprintf("%d is more than %d", s, maxTokens))
		}
		total += s
		if total > maxTokens {
			return core.NewFieldError("seq_lens", fmt.Sprintf("add up to more than %d KV tokens", maxTokens))
		}
	}
	return nil
}

// Tensors holds the inputs of one attention call as flat row-major slices; see the
// package documentation for the shapes. Index t runs over new tokens (request-major),
// index j over KV tokens (request-major; within a request prefix tokens then new tokens,
// in position order).
type Tensors struct {
	// QNope is q_nope, [T, Heads, QKNopeHeadDim].
	QNope []float32
	// QPe is q_pe, [T, Heads, QKRopeHeadDim]; rotated unless the method is fused-RoPE.
	QPe []float32
	// Positions is the RoPE position of each new token, [T]; normally PrefixLens[r]+i.
	Positions []int32
	// CKV is the normalised latent c_kv of each KV token, [KV, KVLoraRank].
	CKV []float32
	// KPe is the shared rotary key k_pe of each KV token, [KV, QKRopeHeadDim]; rotated
	// unless the method is fused-RoPE.
	KPe []float32
	// WKC is kv_b_proj's key half, [Heads, QKNopeHeadDim, KVLoraRank] (sglang's w_kc):
	// k_nope[j,h,d] = sum_l WKC[h,d,l]*CKV[j,l].
	WKC []float32
	// WVC is kv_b_proj's value half, [Heads, KVLoraRank, VHeadDim] (sglang's w_vc):
	// v[j,h,e] = sum_l CKV[j,l]*WVC[h,l,e].
	WVC []float32
	// TopKIndices is, per new token, the indexer's chosen KV positions within its request,
	// [T, TopK]; -1 is padding. Only sparse methods read it.
	TopKIndices []int32
}

// CopyInputs copies the inputs of src into t's (views of a buffer of the
// same layout, usually); lengths that differ copy the shorter.
func (t *Tensors) CopyInputs(src *Tensors) {
	copy(t.QNope, src.QNope)
	copy(t.QPe, src.QPe)
	copy(t.Positions, src.Positions)
	copy(t.CKV, src.CKV)
	copy(t.KPe, src.KPe)
	copy(t.WKC, src.WKC)
	copy(t.WVC, src.WVC)
	copy(t.TopKIndices, src.TopKIndices)
}

// Field locates one named tensor inside a flat buffer of 4-byte elements.
type Field struct {
	// Name is the tensor's snake_case name ("q_nope", "c_kv", ..., "out").
	Name string
	// Offset is the index of the tensor's first element in the buffer (multiply by 4 for bytes).
	Offset int
	// Len is the number of 4-byte elements.
	Len int
	// Shape is the row-major shape; its product is Len.
	Shape []int
	// Int32 is true when the elements are int32 rather than float32.
	Int32 bool
}

// TensorLayout places every tensor of a Config and BatchShape, plus the output, in one
// flat buffer of 4-byte elements, each tensor starting on a 64-byte boundary.
type TensorLayout struct {
	// QNope, QPe, Positions, CKV, KPe, WKC, WVC, TopKIndices and Out locate the tensors
	// of the same names in Tensors and the output.
	QNope, QPe, Positions, CKV, KPe, WKC, WVC, TopKIndices, Out Field
	// Elems is the buffer length in 4-byte elements.
	Elems int
}

// alignElems is the tensor alignment in 4-byte elements (64 bytes).
const alignElems = 16

// Layout computes where each tensor of cfg and b lies in one flat buffer; TopKIndices
// has cfg.TopK columns (zero length when cfg.TopK is 0).
func Layout(cfg Config, b BatchShape) (TensorLayout, error) {
	if err := cfg.Validate(); err != nil {
		return TensorLayout{}, err
	}
	if err := b.Validate(); err != nil {
		return TensorLayout{}, err
	}
	T, KV, H := b.Tokens(), b.KVTokens(), cfg.Heads
	var l TensorLayout
	off := 0
	place := func(name string, int32s bool, shape ...int) Field {
		n := 1
		for _, s := range shape {
			n *= s
		}
		f := Field{Name: name, Offset: off, Len: n, Shape: shape, Int32: int32s}
		off += (n + alignElems - 1) / alignElems * alignElems
		return f
	}
	l.QNope = place("q_nope", false, T, H, cfg.QKNopeHeadDim)
	l.QPe = place("q_pe", false, T, H, cfg.QKRopeHeadDim)
	l.Positions = place("positions", true, T)
	l.CKV = place("c_kv", false, KV, cfg.KVLoraRank)
	l.KPe = place("k_pe", false, KV, cfg.QKRopeHeadDim)
	l.WKC = place("w_kc", false, H, cfg.QKNopeHeadDim, cfg.KVLoraRank)
	l.WVC = place("w_vc", false, H, cfg.KVLoraRank, cfg.VHeadDim)
	l.TopKIndices = place("topk_indices", true, T, cfg.TopK)
	l.Out = place("out", false, T, H, cfg.VHeadDim)
	l.Elems = off
	return l, nil
}

// Bytes returns the buffer size in bytes.
func (l TensorLayout) Bytes() int { return 4 * l.Elems }

// Fields returns the fields in buffer order, the output last.
func (l TensorLayout) Fields() []Field {
	return []Field{l.QNope, l.QPe, l.Positions, l.CKV, l.KPe, l.WKC, l.WVC, l.TopKIndices, l.Out}
}

// Split returns the tensors and the output as views of buf, without copying; int32
// tensors are reinterpreted in place. buf must have at least l.Elems elements.
func (l TensorLayout) Split(buf []float32) (Tensors, []float32, error) {
	if len(buf) < l.Elems {
		return Tensors{}, nil, fmt.Errorf("kernels: buffer has %d elements, layout needs %d", len(buf), l.Elems)
	}
	f32 := func(f Field) []float32 { return buf[f.Offset : f.Offset+f.Len : f.Offset+f.Len] }
	i32 := func(f Field) []int32 {
		if f.Len == 0 {
			return []int32{}
		}
		return unsafe.Slice((*int32)(unsafe.Pointer(&buf[f.Offset])), f.Len)
	}
	t := Tensors{
		QNope:       f32(l.QNope),
		QPe:         f32(l.QPe),
		Positions:   i32(l.Positions),
		CKV:         f32(l.CKV),
		KPe:         f32(l.KPe),
		WKC:         f32(l.WKC),
		WVC:         f32(l.WVC),
		TopKIndices: i32(l.TopKIndices),
	}
	return t, f32(l.Out), nil
}

// SplitBytes is Split over a byte buffer (for example a shared-memory mapping); buf must
// be 4-byte aligned and at least l.Bytes() long.
func (l TensorLayout) SplitBytes(buf []byte) (Tensors, []float32, error) {
	if len(buf) < l.Bytes() {
		return Tensors{}, nil, fmt.Errorf("kernels: buffer has %d bytes, layout needs %d", len(buf), l.Bytes())
	}
	if l.Elems == 0 {
		return l.Split(nil)
	}
	if uintptr(unsafe.Pointer(&buf[0]))%4 != 0 {
		return Tensors{}, nil, fmt.Errorf("kernels: buffer address %p is not 4-byte aligned", &buf[0])
	}
	return l.Split(unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), l.Elems))
}

// checkLen returns an error naming field when got differs from want.
func checkLen(field string, got, want int, shape string) error {
	if got != want {
		return fmt.Errorf("kernels: Tensors.%s has %d elements, want %d (%s)", field, got, want, shape)
	}
	return nil
}

// validateInputs checks cfg, b and the lengths and index ranges of t and out.
func validateInputs(cfg Config, b BatchShape, t *Tensors, outLen int, sparse bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("kernels: Tensors is nil")
	}
	T, KV, H := b.Tokens(), b.KVTokens(), cfg.Heads
	nope, rope, lora, v := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.KVLoraRank, cfg.VHeadDim
	checks := []error{
		checkLen("QNope", len(t.QNope), T*H*nope, fmt.Sprintf("[tokens=%d, heads=%d, qk_nope=%d]", T, H, nope)),
		checkLen("QPe", len(t.QPe), T*H*rope, fmt.Sprintf("[tokens=%d, heads=%d, qk_rope=%d]", T, H, rope)),
		checkLen("Positions", len(t.Positions), T, fmt.Sprintf("[tokens=%d]", T)),
		checkLen("CKV", len(t.CKV), KV*lora, fmt.Sprintf("[kv_tokens=%d, kv_lora_rank=%d]", KV, lora)),
		checkLen("KPe", len(t.KPe), KV*rope, fmt.Sprintf("[kv_tokens=%d, qk_rope=%d]", KV, rope)),
		checkLen("WKC", len(t.WKC), H*nope*lora, fmt.Sprintf("[heads=%d, qk_nope=%d, kv_lora_rank=%d]", H, nope, lora)),
		checkLen("WVC", len(t.WVC), H*lora*v, fmt.Sprintf("[heads=%d, kv_lora_rank=%d, v_head=%d]", H, lora, v)),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if outLen >= 0 && outLen != T*H*v {
		return fmt.Errorf("kernels: out has %d elements, want %d ([tokens=%d, heads=%d, v_head=%d])", outLen, T*H*v, T, H, v)
	}
	for i, p := range t.Positions {
		if p < 0 {
			return fmt.Errorf("kernels: Tensors.Positions[%d]=%d is negative", i, p)
		}
	}
	if sparse {
		return validateTopK(cfg, b, t)
	}
	return nil
}

// validateTopK checks that every top-k index is -1 or a causally visible position of
// the query's request, without duplicates, and that every row selects at least one token.
func validateTopK(cfg Config, b BatchShape, t *Tensors) error {
	if cfg.TopK <= 0 {
		return core.NewFieldError("top_k", fmt.Sprintf("%d: a sparse method needs 1 or more", cfg.TopK))
	}
	T, K := b.Tokens(), cfg.TopK
	if err := checkLen("TopKIndices", len(t.TopKIndices), T*K, fmt.Sprintf("[tokens=%d, top_k=%d]", T, K)); err != nil {
		return err
	}
	maxSeq := 0
	for _, s := range b.SeqLens {
		maxSeq = max(maxSeq, s)
	}
	seen := make([]int32, maxSeq) // seen[j] == row+1 marks j as used in row
	tok := 0
	for r := range b.SeqLens {
		p, s := b.PrefixLens[r], b.SeqLens[r]
		for i := 0; i < s-p; i++ {
			qpos := p + i
			row := t.TopKIndices[tok*K : (tok+1)*K]
			valid := 0
			for k, j := range row {
				switch {
				case j == -1:
					continue
				case j < -1:
					return fmt.Errorf("kernels: Tensors.TopKIndices[%d,%d]=%d is negative (only -1 marks padding)", tok, k, j)
				case int(j) > qpos:
					return fmt.Errorf("kernels: Tensors.TopKIndices[%d,%d]=%d is beyond the causal limit %d of token %d (request %d, prefix %d, seq_len %d)", tok, k, j, qpos, tok, r, p, s)
				case seen[j] == int32(tok+1):
					return fmt.Errorf("kernels: Tensors.TopKIndices[%d,%d]=%d repeats an index of the same row", tok, k, j)
				}
				seen[j] = int32(tok + 1)
				valid++
			}
			if valid == 0 {
				return fmt.Errorf("kernels: Tensors.TopKIndices row %d (request %d) selects no token", tok, r)
			}
			tok++
		}
	}
	return nil
}

// batchIndex holds per-request offsets of a validated batch.
type batchIndex struct {
	tokStart []int // first new token of request r
	kvStart  []int // first KV token of request r
	reqOf    []int // request of each new token
}

func newBatchIndex(b BatchShape) batchIndex {
	n := b.Requests()
	ix := batchIndex{tokStart: make([]int, n+1), kvStart: make([]int, n+1), reqOf: make([]int, 0, b.Tokens())}
	for r := 0; r < n; r++ {
		nw := b.SeqLens[r] - b.PrefixLens[r]
		ix.tokStart[r+1] = ix.tokStart[r] + nw
		ix.kvStart[r+1] = ix.kvStart[r] + b.SeqLens[r]
		for i := 0; i < nw; i++ {
			ix.reqOf = append(ix.reqOf, r)
		}
	}
	return ix
}
