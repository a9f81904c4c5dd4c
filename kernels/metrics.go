package kernels

// keyPairs returns the number of (query, key) pairs per head that m scores for b:
// prefix+i+1 for new token i of a request, capped at cfg.TopK for sparse methods.
func keyPairs(m Method, cfg Config, b BatchShape) float64 {
	n := 0.0
	for r := range b.SeqLens {
		for i := range b.SeqLens[r] - b.PrefixLens[r] {
			k := b.PrefixLens[r] + i + 1
			if m.Sparse() {
				k = min(k, cfg.TopK)
			}
			n += float64(k)
		}
	}
	return n
}

// FLOPs returns the floating-point operations (a multiply-add counts 2) of method m on
// cfg and b, counting the matrix products only: for the decompressing methods
// 2*KV*H*lora*(nope+v) + 2*pairs*H*(nope+rope+v); for the absorbed methods
// 2*T*H*nope*lora + 2*pairs*H*(2*lora+rope) + 2*T*H*lora*v, where pairs is the number of
// (query, key) pairs per head (capped at TopK per query for sparse methods). It returns 0
// for invalid input.
func FLOPs(m Method, cfg Config, b BatchShape) float64 {
	if !m.Valid() || cfg.Validate() != nil || b.Validate() != nil {
		return 0
	}
	H := float64(cfg.Heads)
	lora, nope, rope, vd := float64(cfg.KVLoraRank), float64(cfg.QKNopeHeadDim), float64(cfg.QKRopeHeadDim), float64(cfg.VHeadDim)
	T, KV := float64(b.Tokens()), float64(b.KVTokens())
	pairs := keyPairs(m, cfg, b)
	if m.Absorbed() {
		return 2*T*H*nope*lora + 2*pairs*H*(2*lora+rope) + 2*T*H*lora*vd
	}
	return 2*KV*H*lora*(nope+vd) + 2*pairs*H*(nope+rope+vd)
}

// Bytes returns the compulsory memory traffic of method m on cfg and b: every input
// tensor the method reads, read once, plus the float32 output written once. It returns 0
// for invalid input.
func Bytes(m Method, cfg Config, b BatchShape) float64 {
	if !m.Valid() || cfg.Validate() != nil || b.Validate() != nil {
		return 0
	}
	H := float64(cfg.Heads)
	lora, nope, rope, vd := float64(cfg.KVLoraRank), float64(cfg.QKNopeHeadDim), float64(cfg.QKRopeHeadDim), float64(cfg.VHeadDim)
	T, KV := float64(b.Tokens()), float64(b.KVTokens())
	elems := T*H*(nope+rope) + KV*(lora+rope) + H*lora*(nope+vd) + T*H*vd
	if !m.PreRoped() {
		elems += T // positions
	}
	if m.Sparse() {
		elems += T * float64(cfg.TopK)
	}
	return 4 * elems
}

// mhaWork estimates the flops of a decompressing method, for the parallel threshold.
func mhaWork(cfg Config, b BatchShape) float64 { return FLOPs(MHA, cfg, b) }
