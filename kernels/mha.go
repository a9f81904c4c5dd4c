package kernels

import (
	"fmt"
	"math"

	"github.com/attnplug/attnplug/core"
)

// mhaScratch is one worker's scratch for the decompressing (MHA-style) kernels.
type mhaScratch struct {
	kn, vv  []float32 // decompressed k_nope [n, nope] and v [n, vd] of one head
	scores  []float64
	o       []float64
	wvcT    []float32 // w_vc of one head transposed to [vd, lora]
	wvcHead int
}

func newMHAScratch(cfg Config, rows int) *mhaScratch {
	return &mhaScratch{
		kn:      make([]float32, rows*cfg.QKNopeHeadDim),
		vv:      make([]float32, rows*cfg.VHeadDim),
		scores:  make([]float64, rows),
		o:       make([]float64, cfg.VHeadDim),
		wvcT:    make([]float32, cfg.KVLoraRank*cfg.VHeadDim),
		wvcHead: -1,
	}
}

// transposeWVC fills s.wvcT with head h of w_vc as [vd, lora] rows.
func (s *mhaScratch) transposeWVC(cfg Config, wvc []float32, h int) {
	if s.wvcHead == h {
		return
	}
	lora, vd := cfg.KVLoraRank, cfg.VHeadDim
	w := wvc[h*lora*vd : (h+1)*lora*vd]
	for l := range lora {
		for e := range vd {
			s.wvcT[e*lora+l] = w[l*vd+e]
		}
	}
	s.wvcHead = h
}

// decompress writes k_nope [n, nope] and v [n, vd] of head h for the n latent rows c
// ([n, lora]) into kn and vv: k_nope = c·w_kc[h]^T, v = c·w_vc[h]. s.wvcT must hold head h.
func decompress(cfg Config, c []float32, n int, wkc []float32, h int, s *mhaScratch, kn, vv []float32) {
	lora, nope, vd := cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.VHeadDim
	rowsTimes := func(wrows []float32, width int, dst []float32) {
		j := 0
		for ; j+4 <= n; j += 4 {
			c0 := c[j*lora : (j+1)*lora]
			c1 := c[(j+1)*lora : (j+2)*lora]
			c2 := c[(j+2)*lora : (j+3)*lora]
			c3 := c[(j+3)*lora : (j+4)*lora]
			for d := range width {
				s0, s1, s2, s3 := dot32x4(wrows[d*lora:(d+1)*lora], c0, c1, c2, c3)
				dst[j*width+d] = float32(s0)
				dst[(j+1)*width+d] = float32(s1)
				dst[(j+2)*width+d] = float32(s2)
				dst[(j+3)*width+d] = float32(s3)
			}
		}
		for ; j < n; j++ {
			cj := c[j*lora : (j+1)*lora]
			for d := range width {
				dst[j*width+d] = float32(dot32(wrows[d*lora:(d+1)*lora], cj))
			}
		}
	}
	rowsTimes(wkc[h*nope*lora:(h+1)*nope*lora], nope, kn)
	rowsTimes(s.wvcT, vd, vv)
}

// attendRows computes the normalised softmax(scale*q·k)·v over n key rows into o and
// returns the log-sum-exp: k rows are [kn[j] ‖ kpe[j]], v rows vv[j]; q is [qn ‖ qp].
func attendRows(cfg Config, qn, qp, kn, kpe, vv []float32, n int, scores, o []float64) float64 {
	nope, rope, vd := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	sc := scores[:n]
	for j := range sc {
		sc[j] = cfg.SoftmaxScale * (dot32(qn, kn[j*nope:(j+1)*nope]) + dot32(qp, kpe[j*rope:(j+1)*rope]))
	}
	m, z := softmaxInPlace(sc)
	clear(o)
	for j, w := range sc {
		axpy64(o, w, vv[j*vd:(j+1)*vd])
	}
	inv := 1 / z
	for e := range o {
		o[e] *= inv
	}
	return m + math.Log(z)
}

// mhaCausal attends every new token of request r, head h, over the request's KV rows
// (decompressed into kn, vv; rotary keys kpe), new token i seeing the first prefix+i+1
// rows, and writes the float32 output rows to out.
func mhaCausal(cfg Config, b BatchShape, ix *batchIndex, t *Tensors, r, h int, kn, vv, kpe []float32, s *mhaScratch, out []float32) {
	H, nope, rope, vd := cfg.Heads, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	pre, seq := b.PrefixLens[r], b.SeqLens[r]
	for i := range seq - pre {
		tok := ix.tokStart[r] + i
		qo := tok*H + h
		attendRows(cfg, t.QNope[qo*nope:(qo+1)*nope], t.QPe[qo*rope:(qo+1)*rope], kn, kpe, vv, pre+i+1, s.scores, s.o)
		dst := out[qo*vd : (qo+1)*vd]
		for e, x := range s.o {
			dst[e] = float32(x)
		}
	}
}

// runMHA decompresses each request's whole KV per head and attends causally (MHA, MHA_NPU).
func runMHA(cfg Config, b BatchShape, ix *batchIndex, t *Tensors, out []float32) {
	H, lora, rope := cfg.Heads, cfg.KVLoraRank, cfg.QKRopeHeadDim
	maxSeq := 0
	for _, s := range b.SeqLens {
		maxSeq = max(maxSeq, s)
	}
	// Items run request-major so a worker reuses its transposed w_vc only by chance;
	// head-major keeps it: item = h*R + r.
	R := b.Requests()
	parallel(R*H, mhaWork(cfg, b), func() func(int) {
		s := newMHAScratch(cfg, maxSeq)
		return func(item int) {
			h, r := item/R, item%R
			s.transposeWVC(cfg, t.WVC, h)
			kvs, seq := ix.kvStart[r], b.SeqLens[r]
			decompress(cfg, t.CKV[kvs*lora:(kvs+seq)*lora], seq, t.WKC, h, s, s.kn, s.vv)
			mhaCausal(cfg, b, ix, t, r, h, s.kn, s.vv, t.KPe[kvs*rope:(kvs+seq)*rope], s, out)
		}
	})
}

// runMHAOneShot decompresses the latents of the whole batch (prefix and new) for every
// head in one pass into [H, KV, ...] buffers, then attends causally (MHA_ONE_SHOT).
func runMHAOneShot(cfg Config, b BatchShape, ix *batchIndex, t *Tensors, out []float32) {
	H, lora, nope, rope, vd := cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	KV, R := b.KVTokens(), b.Requests()
	kn := make([]float32, H*KV*nope)
	vv := make([]float32, H*KV*vd)
	decompWork := 2 * float64(KV) * float64(H) * float64(lora) * float64(nope+vd)
	parallel(H, decompWork, func() func(int) {
		s := newMHAScratch(cfg, 0)
		return func(h int) {
			s.transposeWVC(cfg, t.WVC, h)
			decompress(cfg, t.CKV, KV, t.WKC, h, s, kn[h*KV*nope:(h+1)*KV*nope], vv[h*KV*vd:(h+1)*KV*vd])
		}
	})
	maxSeq := 0
	for _, s := range b.SeqLens {
		maxSeq = max(maxSeq, s)
	}
	parallel(R*H, mhaWork(cfg, b)-decompWork, func() func(int) {
		s := newMHAScratch(cfg, maxSeq)
		return func(item int) {
			h, r := item/R, item%R
			kvs, seq := ix.kvStart[r], b.SeqLens[r]
			mhaCausal(cfg, b, ix, t, r, h,
				kn[(h*KV+kvs)*nope:(h*KV+kvs+seq)*nope], vv[(h*KV+kvs)*vd:(h*KV+kvs+seq)*vd],
				t.KPe[kvs*rope:(kvs+seq)*rope], s, out)
		}
	})
}

// PrefixChunks returns sglang's chunking of the cached prefix for MHA_CHUNKED_KV:
// chunkLen = ChunkCapacity / requests (prefix_chunk_len) and
// chunks = ceil(max(PrefixLens) / chunkLen) (num_prefix_chunks); chunk c covers prefix
// positions [c*chunkLen, min((c+1)*chunkLen, PrefixLens[r])) of every request r.
func PrefixChunks(cfg Config, b BatchShape) (chunkLen, chunks int, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, err
	}
	if err := b.Validate(); err != nil {
		return 0, 0, err
	}
	chunkLen = cfg.ChunkCapacity / b.Requests()
	if chunkLen == 0 {
		return 0, 0, core.NewFieldError("chunk_capacity", fmt.Sprintf("%d is smaller than the batch size %d (prefix_chunk_len would be 0)", cfg.ChunkCapacity, b.Requests()))
	}
	maxPre := 0
	for _, p := range b.PrefixLens {
		maxPre = max(maxPre, p)
	}
	return chunkLen, (maxPre + chunkLen - 1) / chunkLen, nil
}

// runMHAChunkedKV attends the new tokens causally over themselves, then over the cached
// prefix chunk by chunk, merging the partial outputs by their log-sum-exp
// (MHA_CHUNKED_KV). It returns the number of prefix chunks and the final LSE [T, H].
func runMHAChunkedKV(cfg Config, b BatchShape, ix *batchIndex, t *Tensors, out []float32) (chunkLen, chunks int, lse []float64, err error) {
	chunkLen, chunks, err = PrefixChunks(cfg, b)
	if err != nil {
		return 0, 0, nil, err
	}
	H, lora, nope, rope, vd := cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	T, R := b.Tokens(), b.Requests()
	acc := make([]float64, T*H*vd)
	lse = make([]float64, T*H)
	maxNew := 0
	for r := range R {
		maxNew = max(maxNew, b.SeqLens[r]-b.PrefixLens[r])
	}
	rows := max(maxNew, min(chunkLen, b.KVTokens()))
	work := mhaWork(cfg, b) / float64(chunks+1)

	// Pass 1: new tokens over themselves, causal.
	parallel(R*H, work, func() func(int) {
		s := newMHAScratch(cfg, rows)
		return func(item int) {
			h, r := item/R, item%R
			s.transposeWVC(cfg, t.WVC, h)
			pre, seq := b.PrefixLens[r], b.SeqLens[r]
			nw := seq - pre
			kv0 := ix.kvStart[r] + pre
			decompress(cfg, t.CKV[kv0*lora:(kv0+nw)*lora], nw, t.WKC, h, s, s.kn, s.vv)
			kpe := t.KPe[kv0*rope : (kv0+nw)*rope]
			for i := range nw {
				qo := (ix.tokStart[r]+i)*H + h
				lse[qo] = attendRows(cfg, t.QNope[qo*nope:(qo+1)*nope], t.QPe[qo*rope:(qo+1)*rope], s.kn, kpe, s.vv, i+1, s.scores, acc[qo*vd:(qo+1)*vd])
			}
		}
	})
	// Pass 2: each prefix chunk, no mask (every prefix token precedes every new token).
	for c := range chunks {
		parallel(R*H, work, func() func(int) {
			s := newMHAScratch(cfg, rows)
			return func(item int) {
				h, r := item/R, item%R
				pre, seq := b.PrefixLens[r], b.SeqLens[r]
				lo, hi := c*chunkLen, min((c+1)*chunkLen, pre)
				if lo >= hi {
					return
				}
				s.transposeWVC(cfg, t.WVC, h)
				n := hi - lo
				kv0 := ix.kvStart[r] + lo
				decompress(cfg, t.CKV[kv0*lora:(kv0+n)*lora], n, t.WKC, h, s, s.kn, s.vv)
				kpe := t.KPe[kv0*rope : (kv0+n)*rope]
				for i := range seq - pre {
					qo := (ix.tokStart[r]+i)*H + h
					l2 := attendRows(cfg, t.QNope[qo*nope:(qo+1)*nope], t.QPe[qo*rope:(qo+1)*rope], s.kn, kpe, s.vv, n, s.scores, s.o)
					mergeState(acc[qo*vd:(qo+1)*vd], &lse[qo], s.o, l2)
				}
			}
		})
	}
	for i, x := range acc {
		out[i] = float32(x)
	}
	return chunkLen, chunks, lse, nil
}
