package kernels

import (
	"math"
	"math/rand/v2"
)

// RandomTensors returns deterministic pseudo-random inputs for cfg and b drawn from rng,
// laid out in one flat buffer by Layout (so the returned slices alias one allocation):
// q_nope, q_pe, c_kv, k_pe uniform in [-1, 1); w_kc and w_vc uniform in
// [-1, 1)/sqrt(KVLoraRank); Positions[t] = PrefixLens[r]+i; q_pe and k_pe NOT rotated
// (use ApplyRoPE for the pre-roped methods). When cfg.TopK > 0, each token's TopKIndices
// row holds min(TopK, causal length) distinct causally visible positions in random slots,
// the other slots -1.
func RandomTensors(rng *rand.Rand, cfg Config, b BatchShape) (Tensors, error) {
	l, err := Layout(cfg, b)
	if err != nil {
		return Tensors{}, err
	}
	buf := make([]float32, l.Elems)
	t, _, err := l.Split(buf)
	if err != nil {
		return Tensors{}, err
	}
	fill := func(x []float32, scale float64) {
		for i := range x {
			x[i] = float32((2*rng.Float64() - 1) * scale)
		}
	}
	fill(t.QNope, 1)
	fill(t.QPe, 1)
	fill(t.CKV, 1)
	fill(t.KPe, 1)
	ws := 1 / math.Sqrt(float64(cfg.KVLoraRank))
	fill(t.WKC, ws)
	fill(t.WVC, ws)
	ix := newBatchIndex(b)
	var perm []int32
	for r := range b.Requests() {
		pre, seq := b.PrefixLens[r], b.SeqLens[r]
		for i := range seq - pre {
			tok := ix.tokStart[r] + i
			t.Positions[tok] = int32(pre + i)
			if cfg.TopK == 0 {
				continue
			}
			n := pre + i + 1
			perm = perm[:0]
			for j := range n {
				perm = append(perm, int32(j))
			}
			k := min(n, cfg.TopK)
			for a := range k { // partial Fisher-Yates: perm[:k] is a random k-subset
				c := a + rng.IntN(n-a)
				perm[a], perm[c] = perm[c], perm[a]
			}
			row := t.TopKIndices[tok*cfg.TopK : (tok+1)*cfg.TopK]
			copy(row, perm[:k])
			for a := k; a < len(row); a++ {
				row[a] = -1
			}
			rng.Shuffle(len(row), func(x, y int) { row[x], row[y] = row[y], row[x] })
		}
	}
	return t, nil
}
