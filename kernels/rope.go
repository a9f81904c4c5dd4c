package kernels

import "math"

// ropeFreqs returns the rotary inverse frequencies base^(-2p/dim) for p in [0, dim/2).
func ropeFreqs(dim int, base float64) []float64 {
	f := make([]float64, dim/2)
	for p := range f {
		f[p] = math.Pow(base, -float64(2*p)/float64(dim))
	}
	return f
}

// ropeInto writes x rotated at position pos into dst, GPT-J / interleaved style
// (sglang is_neox_style=False): pair (x[2p], x[2p+1]) turns by pos*freqs[p].
func ropeInto(dst []float64, x []float32, pos int, freqs []float64) {
	_ = dst[len(x)-1]
	for p, f := range freqs {
		s, c := math.Sincos(float64(pos) * f)
		x0, x1 := float64(x[2*p]), float64(x[2*p+1])
		dst[2*p] = x0*c - x1*s
		dst[2*p+1] = x1*c + x0*s
	}
}

// kvPosition returns the RoPE position of KV token j of request r: j for cached prefix
// tokens, the new token's Positions entry otherwise.
func kvPosition(b BatchShape, ix *batchIndex, t *Tensors, r, j int) int {
	p := b.PrefixLens[r]
	if j < p {
		return j
	}
	return int(t.Positions[ix.tokStart[r]+j-p])
}

// ApplyRoPE returns a copy of t whose QPe and KPe are rotated (computed in float64,
// rounded to float32), turning fused-RoPE inputs into the inputs the other methods take;
// q_pe of token t turns by Positions[t], k_pe of KV token j of a request by j for prefix
// tokens and by the new token's Positions entry otherwise. Other slices are shared with t.
func ApplyRoPE(cfg Config, b BatchShape, t Tensors) (Tensors, error) {
	if err := validateInputs(cfg, b, &t, -1, false); err != nil {
		return Tensors{}, err
	}
	ix := newBatchIndex(b)
	rope, H := cfg.QKRopeHeadDim, cfg.Heads
	freqs := ropeFreqs(rope, cfg.RopeBase)
	tmp := make([]float64, rope)
	out := t
	out.QPe = make([]float32, len(t.QPe))
	out.KPe = make([]float32, len(t.KPe))
	for tok := range b.Tokens() {
		for h := range H {
			o := (tok*H + h) * rope
			ropeInto(tmp, t.QPe[o:o+rope], int(t.Positions[tok]), freqs)
			for d, x := range tmp {
				out.QPe[o+d] = float32(x)
			}
		}
	}
	for r := range b.Requests() {
		for j := range b.SeqLens[r] {
			o := (ix.kvStart[r] + j) * rope
			ropeInto(tmp, t.KPe[o:o+rope], kvPosition(b, &ix, &t, r, j), freqs)
			for d, x := range tmp {
				out.KPe[o+d] = float32(x)
			}
		}
	}
	return out, nil
}
