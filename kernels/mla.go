package kernels

import "math"

// ropeTable holds interleaved (cos, sin) pairs per row for a set of positions.
type ropeTable struct {
	half int
	cs   []float64 // [rows, half, 2]
}

func newRopeTable(rows, rope int, base float64, pos func(i int) int) ropeTable {
	freqs := ropeFreqs(rope, base)
	half := rope / 2
	tb := ropeTable{half: half, cs: make([]float64, rows*rope)}
	for i := range rows {
		p := float64(pos(i))
		row := tb.cs[i*rope : (i+1)*rope]
		for k, f := range freqs {
			row[2*k+1], row[2*k] = math.Sincos(p * f)
		}
	}
	return tb
}

// rotate writes x rotated by row i of the table into dst (interleaved pairs).
func (tb ropeTable) rotate(dst []float64, x []float32, i int) {
	row := tb.cs[i*2*tb.half : (i+1)*2*tb.half]
	_ = dst[2*tb.half-1]
	x = x[:2*tb.half]
	for k := 0; k < tb.half; k++ {
		c, s := row[2*k], row[2*k+1]
		x0, x1 := float64(x[2*k]), float64(x[2*k+1])
		dst[2*k] = x0*c - x1*s
		dst[2*k+1] = x1*c + x0*s
	}
}

// dotRotated returns q·rot(x) where rot turns x by row i of the table, without storing rot(x).
func (tb ropeTable) dotRotated(q []float64, x []float32, i int) float64 {
	row := tb.cs[i*2*tb.half : (i+1)*2*tb.half]
	q = q[:2*tb.half]
	x = x[:2*tb.half]
	s := 0.0
	for k := 0; k < tb.half; k++ {
		c, sn := row[2*k], row[2*k+1]
		x0, x1 := float64(x[2*k]), float64(x[2*k+1])
		s += q[2*k]*(x0*c-x1*sn) + q[2*k+1]*(x1*c+x0*sn)
	}
	return s
}

// mlaOptions selects the variant of the absorbed kernel.
type mlaOptions struct {
	fusedRope bool // q_pe / k_pe arrive unrotated; rotate inside the kernel
	sparse    bool // keys are the top-k indices of each token
}

// runMLA is the absorbed (weight-absorbed, MQA-style) kernel behind MLA, MLA_NPU, the
// fused-RoPE methods and the sparse methods. Per (token, head): the latent query
// q_lat = q_nope·w_kc[h] (kv_lora_rank wide) joined with q_pe gives a
// (kv_lora_rank+qk_rope)-wide query; keys are [c_kv ‖ k_pe], values c_kv; the latent
// output goes through w_vc[h] to v_head_dim.
func runMLA(cfg Config, b BatchShape, ix *batchIndex, t *Tensors, out []float32, opt mlaOptions) {
	H, lora, nope, rope, vd := cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	T := b.Tokens()
	var kTab, qTab ropeTable
	if opt.fusedRope {
		kTab, qTab = mlaRopeTables(cfg, b, ix, t)
	}
	maxSeq := 0
	for _, s := range b.SeqLens {
		maxSeq = max(maxSeq, s)
	}
	maxKeys := maxSeq
	if opt.sparse {
		maxKeys = min(maxSeq, cfg.TopK)
	}
	work := FLOPs(MLA, cfg, b)
	parallel(T*H, work, func() func(int) {
		qlat := make([]float64, lora)
		qpe := make([]float64, rope)
		lat := make([]float64, lora)
		o := make([]float64, vd)
		scores := make([]float64, maxKeys)
		keys := make([]int, 0, maxKeys)
		return func(item int) {
			// Head-major items: consecutive items reuse w_kc[h] and w_vc[h] from cache.
			h, tok := item/T, item%T
			r := ix.reqOf[tok]
			pre := b.PrefixLens[r]
			qpos := pre + tok - ix.tokStart[r]
			kvs := ix.kvStart[r]
			qo := tok*H + h

			// Absorb w_kc into the query: q_lat[l] = sum_d q_nope[d] * w_kc[h,d,l].
			clear(qlat)
			qn := t.QNope[qo*nope : (qo+1)*nope]
			wkc := t.WKC[h*nope*lora : (h+1)*nope*lora]
			for d, x := range qn {
				axpy64(qlat, float64(x), wkc[d*lora:(d+1)*lora])
			}
			qp := t.QPe[qo*rope : (qo+1)*rope]
			if opt.fusedRope {
				qTab.rotate(qpe, qp, tok)
			} else {
				for d, x := range qp {
					qpe[d] = float64(x)
				}
			}

			keys = keys[:0]
			if opt.sparse {
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
			sc := scores[:len(keys)]
			for n, j := range keys {
				g := kvs + j
				s := dot64(qlat, t.CKV[g*lora:(g+1)*lora])
				if opt.fusedRope {
					s += kTab.dotRotated(qpe, t.KPe[g*rope:(g+1)*rope], g)
				} else {
					s += dot64(qpe, t.KPe[g*rope:(g+1)*rope])
				}
				sc[n] = cfg.SoftmaxScale * s
			}
			_, z := softmaxInPlace(sc)
			clear(lat)
			for n, j := range keys {
				g := kvs + j
				axpy64(lat, sc[n], t.CKV[g*lora:(g+1)*lora])
			}
			// Up-project the latent output through w_vc: o[e] = sum_l lat[l]/z * w_vc[h,l,e].
			clear(o)
			inv := 1 / z
			wvc := t.WVC[h*lora*vd : (h+1)*lora*vd]
			for l, x := range lat {
				axpy64(o, x*inv, wvc[l*vd:(l+1)*vd])
			}
			dst := out[qo*vd : (qo+1)*vd]
			for e, x := range o {
				dst[e] = float32(x)
			}
		}
	})
}

// mlaRopeTables is the cos/sin cache of the fused-RoPE kernels: one row
// per KV token (kTab) and per new token (qTab).
func mlaRopeTables(cfg Config, b BatchShape, ix *batchIndex, t *Tensors) (kTab, qTab ropeTable) {
	KV := b.KVTokens()
	kvReq := make([]int, KV)
	for r := range b.Requests() {
		for j := ix.kvStart[r]; j < ix.kvStart[r+1]; j++ {
			kvReq[j] = r
		}
	}
	kTab = newRopeTable(KV, cfg.QKRopeHeadDim, cfg.RopeBase, func(j int) int {
		r := kvReq[j]
		return kvPosition(b, ix, t, r, j-ix.kvStart[r])
	})
	qTab = newRopeTable(b.Tokens(), cfg.QKRopeHeadDim, cfg.RopeBase, func(tok int) int { return int(t.Positions[tok]) })
	return kTab, qTab
}
