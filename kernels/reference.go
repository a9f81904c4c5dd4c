package kernels

import "math"

// Reference computes the dense causal attention output [T, Heads, VHeadDim] entirely in
// float64, the plain way: decompress k_nope and v per head from c_kv, rotate q_pe and k_pe
// (t holds them NOT yet rotated, as for the fused-RoPE methods), softmax over every KV
// token at or before the query's position in its request. It is the test oracle.
func Reference(cfg Config, b BatchShape, t Tensors) ([]float64, error) {
	return reference(cfg, b, &t, false, nil)
}

// SparseReference is Reference restricted, per query token, to the KV positions listed
// in t.TopKIndices (-1 entries are padding); indices are validated as for the sparse methods.
func SparseReference(cfg Config, b BatchShape, t Tensors) ([]float64, error) {
	return reference(cfg, b, &t, true, nil)
}

// reference implements Reference and SparseReference; when lse is non-nil it receives the
// log-sum-exp of the scaled scores per [T, Heads] row.
func reference(cfg Config, b BatchShape, t *Tensors, sparse bool, lse []float64) ([]float64, error) {
	if err := validateInputs(cfg, b, t, -1, sparse); err != nil {
		return nil, err
	}
	ix := newBatchIndex(b)
	H, nope, rope, lora, vd := cfg.Heads, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.KVLoraRank, cfg.VHeadDim
	qk := nope + rope
	freqs := ropeFreqs(rope, cfg.RopeBase)
	out := make([]float64, b.Tokens()*H*vd)
	q := make([]float64, qk)
	acc := make([]float64, vd)
	for r := range b.Requests() {
		seq, pre := b.SeqLens[r], b.PrefixLens[r]
		kvs := ix.kvStart[r]
		kpe := make([]float64, seq*rope)
		for j := range seq {
			o := (kvs + j) * rope
			ropeInto(kpe[j*rope:(j+1)*rope], t.KPe[o:o+rope], kvPosition(b, &ix, t, r, j), freqs)
		}
		k := make([]float64, seq*qk)
		v := make([]float64, seq*vd)
		scores := make([]float64, seq)
		keys := make([]int, 0, seq)
		for h := range H {
			for j := range seq {
				c := t.CKV[(kvs+j)*lora : (kvs+j+1)*lora]
				for d := range nope {
					w := t.WKC[(h*nope+d)*lora : (h*nope+d+1)*lora]
					s := 0.0
					for l := range lora {
						s += float64(w[l]) * float64(c[l])
					}
					k[j*qk+d] = s
				}
				copy(k[j*qk+nope:(j+1)*qk], kpe[j*rope:(j+1)*rope])
				for e := range vd {
					s := 0.0
					for l := range lora {
						s += float64(c[l]) * float64(t.WVC[(h*lora+l)*vd+e])
					}
					v[j*vd+e] = s
				}
			}
			for i := range seq - pre {
				tok := ix.tokStart[r] + i
				qpos := pre + i
				qo := tok*H + h
				for d := range nope {
					q[d] = float64(t.QNope[qo*nope+d])
				}
				ropeInto(q[nope:], t.QPe[qo*rope:(qo+1)*rope], int(t.Positions[tok]), freqs)
				keys = keys[:0]
				if sparse {
					for _, j := range t.TopKIndices[tok*cfg.TopK : (tok+1)*cfg.TopK] {
						if j >= 0 {
							keys = append(keys, int(j))
						}
					}
				} else {
					for j := 0; j <= qpos; j++ {
						keys = append(keys, j)
					}
				}
				m := math.Inf(-1)
				for n, j := range keys {
					s := 0.0
					for d := range qk {
						s += q[d] * k[j*qk+d]
					}
					s *= cfg.SoftmaxScale
					scores[n] = s
					m = math.Max(m, s)
				}
				clear(acc)
				z := 0.0
				for n, j := range keys {
					w := math.Exp(scores[n] - m)
					z += w
					for e := range vd {
						acc[e] += w * v[j*vd+e]
					}
				}
				for e := range vd {
					out[qo*vd+e] = acc[e] / z
				}
				if lse != nil {
					lse[qo] = m + math.Log(z)
				}
			}
		}
	}
	return out, nil
}

// RelError returns the max-norm relative error max_i|got_i-want_i| / max_i|want_i|; it is
// the absolute max error when want is all zeros, and +Inf when the lengths differ or got
// holds a NaN or infinity.
func RelError(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	maxDiff, maxWant := 0.0, 0.0
	for i, g := range got {
		gd := float64(g)
		if math.IsNaN(gd) || math.IsInf(gd, 0) {
			return math.Inf(1)
		}
		maxDiff = math.Max(maxDiff, math.Abs(gd-want[i]))
		maxWant = math.Max(maxWant, math.Abs(want[i]))
	}
	if maxWant == 0 {
		return maxDiff
	}
	return maxDiff / maxWant
}
