package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// tensors64 is a float64 copy of rotated inputs for the gonum baselines.
type tensors64 struct {
	qn, qp, ckv, kpe, wkc, wvc []float64
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func newTensors64(t Tensors) tensors64 {
	return tensors64{to64(t.QNope), to64(t.QPe), to64(t.CKV), to64(t.KPe), to64(t.WKC), to64(t.WVC)}
}

// maskedSoftmax scales row i of s ([rows, cols]) and softmaxes its first limit(i) entries,
// zeroing the rest.
func maskedSoftmax(s blas64.General, scale float64, limit func(i int) int) {
	for i := range s.Rows {
		row := s.Data[i*s.Stride : i*s.Stride+s.Cols]
		n := limit(i)
		m := math.Inf(-1)
		for j := range n {
			row[j] *= scale
			m = math.Max(m, row[j])
		}
		z := 0.0
		for j := range n {
			row[j] = math.Exp(row[j] - m)
			z += row[j]
		}
		for j := range n {
			row[j] /= z
		}
		clear(row[n:])
	}
}

// gonumMHA is the decompressing formulation on gonum's float64 BLAS: per request,
// K_nope = C·W_kc^T for all heads in one Gemm, V per head, then S = Q·K^T, causal
// softmax, O = P·V per head. Inputs are rotated; out is [T, H, v].
func gonumMHA(cfg Config, b BatchShape, t tensors64, out []float64) {
	H, lora, nope, rope, vd := cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	kv0, tok0 := 0, 0
	for r := range b.Requests() {
		seq, pre := b.SeqLens[r], b.PrefixLens[r]
		nw := seq - pre
		c := blas64.General{Rows: seq, Cols: lora, Stride: lora, Data: t.ckv[kv0*lora:]}
		kn := blas64.General{Rows: seq, Cols: H * nope, Stride: H * nope, Data: make([]float64, seq*H*nope)}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, c, blas64.General{Rows: H * nope, Cols: lora, Stride: lora, Data: t.wkc}, 0, kn)
		v := make([]float64, seq*H*vd)
		kpe := blas64.General{Rows: seq, Cols: rope, Stride: rope, Data: t.kpe[kv0*rope:]}
		s := blas64.General{Rows: nw, Cols: seq, Stride: seq, Data: make([]float64, nw*seq)}
		for h := range H {
			vh := blas64.General{Rows: seq, Cols: vd, Stride: H * vd, Data: v[h*vd:]}
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, c, blas64.General{Rows: lora, Cols: vd, Stride: vd, Data: t.wvc[h*lora*vd:]}, 0, vh)
			qn := blas64.General{Rows: nw, Cols: nope, Stride: H * nope, Data: t.qn[(tok0*H+h)*nope:]}
			qp := blas64.General{Rows: nw, Cols: rope, Stride: H * rope, Data: t.qp[(tok0*H+h)*rope:]}
			blas64.Gemm(blas.NoTrans, blas.Trans, 1, qn, blas64.General{Rows: seq, Cols: nope, Stride: H * nope, Data: kn.Data[h*nope:]}, 0, s)
			blas64.Gemm(blas.NoTrans, blas.Trans, 1, qp, kpe, 1, s)
			maskedSoftmax(s, cfg.SoftmaxScale, func(i int) int { return pre + i + 1 })
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, s, vh, 0, blas64.General{Rows: nw, Cols: vd, Stride: H * vd, Data: out[(tok0*H+h)*vd:]})
		}
		kv0 += seq
		tok0 += nw
	}
}

// gonumMLA is the absorbed formulation on gonum's float64 BLAS: per request and head,
// Q_lat = Q_nope·W_kc, S = Q_lat·C^T + Q_pe·K_pe^T, causal softmax, L = P·C, O = L·W_vc.
func gonumMLA(cfg Config, b BatchShape, t tensors64, out []float64) {
	H, lora, nope, rope, vd := cfg.Heads, cfg.KVLoraRank, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	kv0, tok0 := 0, 0
	for r := range b.Requests() {
		seq, pre := b.SeqLens[r], b.PrefixLens[r]
		nw := seq - pre
		c := blas64.General{Rows: seq, Cols: lora, Stride: lora, Data: t.ckv[kv0*lora:]}
		kpe := blas64.General{Rows: seq, Cols: rope, Stride: rope, Data: t.kpe[kv0*rope:]}
		qlat := blas64.General{Rows: nw, Cols: lora, Stride: lora, Data: make([]float64, nw*lora)}
		lat := blas64.General{Rows: nw, Cols: lora, Stride: lora, Data: make([]float64, nw*lora)}
		s := blas64.General{Rows: nw, Cols: seq, Stride: seq, Data: make([]float64, nw*seq)}
		for h := range H {
			qn := blas64.General{Rows: nw, Cols: nope, Stride: H * nope, Data: t.qn[(tok0*H+h)*nope:]}
			qp := blas64.General{Rows: nw, Cols: rope, Stride: H * rope, Data: t.qp[(tok0*H+h)*rope:]}
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, qn, blas64.General{Rows: nope, Cols: lora, Stride: lora, Data: t.wkc[h*nope*lora:]}, 0, qlat)
			blas64.Gemm(blas.NoTrans, blas.Trans, 1, qlat, c, 0, s)
			blas64.Gemm(blas.NoTrans, blas.Trans, 1, qp, kpe, 1, s)
			maskedSoftmax(s, cfg.SoftmaxScale, func(i int) int { return pre + i + 1 })
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, s, c, 0, lat)
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, lat, blas64.General{Rows: lora, Cols: vd, Stride: vd, Data: t.wvc[h*lora*vd:]}, 0, blas64.General{Rows: nw, Cols: vd, Stride: H * vd, Data: out[(tok0*H+h)*vd:]})
		}
		kv0 += seq
		tok0 += nw
	}
}

// TestGonumBaselines checks the benchmark baselines against the fp64 reference.
func TestGonumBaselines(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	cfg := smallConfig(rng)
	b := BatchShape{SeqLens: []int{7, 12, 3}, PrefixLens: []int{0, 9, 2}}
	raw, err := RandomTensors(rng, cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Reference(cfg, b, raw)
	if err != nil {
		t.Fatal(err)
	}
	roped, err := ApplyRoPE(cfg, b, raw)
	if err != nil {
		t.Fatal(err)
	}
	t64 := newTensors64(roped)
	for name, f := range map[string]func(Config, BatchShape, tensors64, []float64){"gonumMHA": gonumMHA, "gonumMLA": gonumMLA} {
		got := make([]float64, len(want))
		f(cfg, b, t64, got)
		got32 := make([]float32, len(got))
		for i, x := range got {
			got32[i] = float32(x)
		}
		if e := RelError(got32, want); e > tol {
			t.Errorf("%s: RelError = %.3g, want <= %g", name, e, tol)
		}
	}
}

// BenchmarkCopy measures memory bandwidth with copy over a 64 MiB float32 buffer; GB/s
// counts bytes read plus bytes written.
func BenchmarkCopy(b *testing.B) {
	const n = 16 << 20
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
	b.ReportMetric(float64(b.N)*2*4*n/b.Elapsed().Seconds()/1e9, "GB/s")
}

// benchShape is one DeepSeek-V3 batch shape of the benchmarks.
type benchShape struct {
	name     string
	seq, pre []int
	capacity int // ChunkCapacity override (0: DeepSeekV3's)
	methods  []Method
}

func repeat(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

var (
	absorbedMethods = []Method{MLA, MLANPU, MLAFusedRopeROCm, MLAFusedRopeCPU, DSANPU, DSAMLA}
	benchShapes     = []benchShape{
		{name: "decode_b4_ctx512", seq: repeat(512, 4), pre: repeat(511, 4), methods: absorbedMethods},
		{name: "decode_b1_ctx4096", seq: []int{4096}, pre: []int{4095}, methods: absorbedMethods},
		{name: "prefill_b1_64", seq: []int{64}, pre: []int{0}, methods: Methods()},
		{name: "extend_b1_pre96_new32_cap32", seq: []int{128}, pre: []int{96}, capacity: 32, methods: Methods()},
	}
)

func reportMetrics(b *testing.B, m Method, cfg Config, bs BatchShape) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(bs.Tokens())/sec, "tokens/s")
	b.ReportMetric(FLOPs(m, cfg, bs)/sec/1e9, "GFLOP/s")
	b.ReportMetric(Bytes(m, cfg, bs)/sec/1e9, "GB/s")
}

// BenchmarkKernels runs every method on DeepSeek-V3 shapes (128 heads, lora 512).
func BenchmarkKernels(b *testing.B) {
	for si, sh := range benchShapes {
		cfg := DeepSeekV3()
		if sh.capacity > 0 {
			cfg.ChunkCapacity = sh.capacity
		}
		bs := BatchShape{SeqLens: sh.seq, PrefixLens: sh.pre}
		var raw, roped Tensors
		setup := func(b *testing.B) {
			if raw.QNope != nil {
				return
			}
			var err error
			if raw, err = RandomTensors(rand.New(rand.NewPCG(uint64(si), 0)), cfg, bs); err != nil {
				b.Fatal(err)
			}
			if roped, err = ApplyRoPE(cfg, bs, raw); err != nil {
				b.Fatal(err)
			}
		}
		out := make([]float32, bs.Tokens()*cfg.Heads*cfg.VHeadDim)
		for _, m := range sh.methods {
			b.Run(fmt.Sprintf("%s/%s", sh.name, m), func(b *testing.B) {
				setup(b)
				in := roped
				if !m.PreRoped() {
					in = raw
				}
				b.ResetTimer()
				for b.Loop() {
					if err := Run(m, cfg, bs, in, out); err != nil {
						b.Fatal(err)
					}
				}
				reportMetrics(b, m, cfg, bs)
			})
		}
	}
}

// BenchmarkGonum runs the gonum BLAS formulations (float64) on the same shapes; FLOPs
// and bytes are those of MHA and MLA (bytes counted at float32 size, as for the kernels).
func BenchmarkGonum(b *testing.B) {
	for si, sh := range benchShapes {
		cfg := DeepSeekV3()
		bs := BatchShape{SeqLens: sh.seq, PrefixLens: sh.pre}
		var t64 tensors64
		setup := func(b *testing.B) {
			if t64.qn != nil {
				return
			}
			raw, err := RandomTensors(rand.New(rand.NewPCG(uint64(si), 0)), cfg, bs)
			if err != nil {
				b.Fatal(err)
			}
			roped, err := ApplyRoPE(cfg, bs, raw)
			if err != nil {
				b.Fatal(err)
			}
			t64 = newTensors64(roped)
		}
		out := make([]float64, bs.Tokens()*cfg.Heads*cfg.VHeadDim)
		for _, f := range []struct {
			m   Method
			run func(Config, BatchShape, tensors64, []float64)
		}{{MHA, gonumMHA}, {MLA, gonumMLA}} {
			if f.m == MHA && sh.methods[0] != MHA {
				continue // decode shapes: only the absorbed formulation
			}
			b.Run(fmt.Sprintf("%s/%s", sh.name, f.m), func(b *testing.B) {
				setup(b)
				b.ResetTimer()
				for b.Loop() {
					f.run(cfg, bs, t64, out)
				}
				reportMetrics(b, f.m, cfg, bs)
			})
		}
	}
}
