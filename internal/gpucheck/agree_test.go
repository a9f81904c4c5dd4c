package gpucheck

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
)

// toBF16 rounds x to bf16 bits (round to nearest even).
func toBF16(x float64) uint16 {
	u := math.Float32bits(float32(x))
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func bfBytes(v []uint16) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v)) }

// TestMethodsAgreeWithMLA: the same DeepSeek attention computed three ways
// on one batch gives one result. From random latents c_kv and k_pe, the
// up-projections W_UK and W_UV and queries q_nope, q_pe, the test builds the
// decompressed MHA inputs (k = [c_kv W_UK, k_pe], v = c_kv W_UV) and the
// absorbed MLA inputs (q = [q_nope W_UK^T, q_pe] over the latent cache),
// runs MHA_ONE_SHOT, MHA_CHUNKED_KV and the MLA kernel (its latent output
// projected by W_UV), and compares: the choice of method changes speed,
// never results.
// The DeepSeek shapes TestMethodsAgreeWithMLA runs: heads, the nope and
// rope parts of a query/key head, the latent rank and the value head size.
const agreeHeads, agreeNope, agreeRope, agreeLora, agreeDV = 16, 128, 64, 512, 128

// agreeInputs are one batch of TestMethodsAgreeWithMLA: the random latents
// and up-projections, the decompressed MHA inputs and the absorbed MLA query.
type agreeInputs struct {
	ckv, kpe, wuv []float64
	q, k, v, qabs []uint16
}

func TestMethodsAgreeWithMLA(t *testing.T) {
	e := openEnv(t)
	seq := []int64{300, 517, 64}
	ql := []int64{40, 64, 64}
	var keys, tokens int64
	for i := range seq {
		keys += seq[i]
		tokens += ql[i]
	}
	in := makeAgreeInputs(seq, ql, keys, tokens)
	outs, lses := runMHAMethods(t, e, seq, ql, in)
	mla, mlse := runAbsorbedMLA(t, e, seq, ql, in, tokens)
	names := []string{"MHA_ONE_SHOT", "MHA_CHUNKED_KV"}
	for i, o := range outs {
		if d := Agreement(o, mla); d > devicecheck.MaxRelErr {
			t.Errorf("%s differs from MLA by %.2e (tolerance %.0e)", names[i], d, devicecheck.MaxRelErr)
		} else {
			t.Logf("%s vs MLA: %.2e", names[i], d)
		}
		var worst float64
		for r := range mlse {
			worst = math.Max(worst, math.Abs(float64(lses[i][r]-mlse[r]))/math.Max(1, math.Abs(float64(mlse[r]))))
		}
		if worst > 1e-2 {
			t.Errorf("%s's LSE differs from MLA's by %.2e", names[i], worst)
		} else {
			t.Logf("%s LSE vs MLA: %.2e", names[i], worst)
		}
	}
	if d := Agreement(outs[1], outs[0]); d > devicecheck.MaxRelErr {
		t.Errorf("MHA_CHUNKED_KV differs from MHA_ONE_SHOT by %.2e", d)
	}
}

// makeAgreeInputs draws the latents, up-projections and queries and builds
// the decompressed MHA inputs and the absorbed MLA query from them.
func makeAgreeInputs(seq, ql []int64, keys, tokens int64) agreeInputs {
	const heads, nope, rope, lora, dv = agreeHeads, agreeNope, agreeRope, agreeLora, agreeDV
	rng := rand.New(rand.NewPCG(7, 8))
	gen := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = devicecheck.BF16(toBF16(rng.NormFloat64() * scale))
		}
		return v
	}
	ckv := gen(int(keys)*lora, 1)
	kpe := gen(int(keys)*rope, 1)
	wuk := gen(heads*nope*lora, 1/math.Sqrt(lora)) // [h][nope][lora]
	wuv := gen(heads*lora*dv, 1/math.Sqrt(lora))   // [h][lora][dv]
	qnope := gen(int(tokens)*heads*nope, 1)
	qpe := gen(int(tokens)*heads*rope, 1)
	// Decompressed MHA inputs.
	q := make([]uint16, tokens*heads*192)
	k := make([]uint16, keys*heads*192)
	v := make([]uint16, keys*heads*dv)
	devicecheck.Parallel(int(tokens), func(ti int) {
		for h := range heads {
			for d := range nope {
				q[(int64(ti)*heads+int64(h))*192+int64(d)] = toBF16(qnope[(ti*heads+h)*nope+d])
			}
			for d := range rope {
				q[(int64(ti)*heads+int64(h))*192+nope+int64(d)] = toBF16(qpe[(ti*heads+h)*rope+d])
			}
		}
	})
	devicecheck.Parallel(int(keys), func(j int) {
		for h := range heads {
			base := (int64(j)*heads + int64(h)) * 192
			for d := range nope {
				var s float64
				for c := range lora {
					s += ckv[j*lora+c] * wuk[(h*nope+d)*lora+c]
				}
				k[base+int64(d)] = toBF16(s)
			}
			for d := range rope {
				k[base+nope+int64(d)] = toBF16(kpe[j*rope+d])
			}
			for d := range dv {
				var s float64
				for c := range lora {
					s += ckv[j*lora+c] * wuv[(h*lora+c)*dv+d]
				}
				v[(int64(j)*heads+int64(h))*dv+int64(d)] = toBF16(s)
			}
		}
	})
	// Absorbed MLA inputs.
	qabs := make([]uint16, tokens*heads*576)
	devicecheck.Parallel(int(tokens), func(ti int) {
		for h := range heads {
			base := (int64(ti)*heads + int64(h)) * 576
			for c := range lora {
				var s float64
				for d := range nope {
					s += qnope[(ti*heads+h)*nope+d] * wuk[(h*nope+d)*lora+c]
				}
				qabs[base+int64(c)] = toBF16(s)
			}
			for d := range rope {
				qabs[base+lora+int64(d)] = toBF16(qpe[(ti*heads+h)*rope+d])
			}
		}
	})
	return agreeInputs{ckv: ckv, kpe: kpe, wuv: wuv, q: q, k: k, v: v, qabs: qabs}
}

// launchOnce plans b for backend (its request with the changes of edit,
// when set) through the Host's Source, poisons b's outputs, launches the
// plan once (launchOn) and returns the outputs.
func launchOnce(t *testing.T, e *rig, b devicecheck.Batch, backend string, edit func(*core.PlanRequest)) ([]uint16, []float32) {
	t.Helper()
	req := b.Request()
	req.Backend = backend
	if edit != nil {
		edit(&req)
	}
	p, err := e.Host.Plan(t.Context(), &req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := launchOn(e, b, p); err != nil {
		t.Fatal(err)
	}
	o, l, err := e.Outputs(b)
	if err != nil {
		t.Fatal(err)
	}
	return o, l
}

// runMHAMethods runs MHA_ONE_SHOT and MHA_CHUNKED_KV on the decompressed
// inputs and returns their outputs and LSEs, in that order.
func runMHAMethods(t *testing.T, e *rig, seq, ql []int64, in agreeInputs) ([][]uint16, [][]float32) {
	t.Helper()
	const heads = agreeHeads
	q, k, v := in.q, in.k, in.v
	var outs [][]uint16
	var lses [][]float32
	for _, m := range []core.Method{core.MHAOneShot, core.MHAChunkedKV} {
		c := devicecheck.Prefill{Method: m, Heads: heads, SeqLens: seq, QLens: ql, ChunkCapacity: 192, Seed: 1}
		b, err := e.AllocPrefill(c)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		err = e.Do(func(x *cuda.Ctx) error {
			for _, up := range []struct {
				dst uint64
				src []uint16
			}{{b.Q.Ptr, q}, {b.KFull.Ptr, k}, {b.VFull.Ptr, v}} {
				if err := x.CopyIn(up.dst, bfBytes(up.src)); err != nil {
					return err
				}
			}
			if m == core.MHAChunkedKV {
				return b.SplitChunked(x)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		o, l := launchOnce(t, e, b, dense, nil)
		outs, lses = append(outs, o), append(lses, l)
	}
	return outs, lses
}

// runAbsorbedMLA runs the MLA kernel over the latent cache (page size 1,
// pages shuffled) and returns its output projected by W_UV and its LSE.
func runAbsorbedMLA(t *testing.T, e *rig, seq, ql []int64, in agreeInputs, tokens int64) ([]uint16, []float32) {
	t.Helper()
	const heads, rope, lora, dv = agreeHeads, agreeRope, agreeLora, agreeDV
	ckv, kpe, wuv, qabs := in.ckv, in.kpe, in.wuv, in.qabs
	mc := devicecheck.MLA{Heads: heads, PageSize: 1, SeqLens: seq, QLens: ql, Seed: 2}
	mb, err := e.AllocMLA(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Free()
	cache := make([]uint16, int64(mb.NumPages)*576)
	var off int64
	for r, n := range seq {
		for j := range n {
			row := int64(mb.Pages[int64(mb.Indptr[r])+j]) * 576
			for c := range lora {
				cache[row+int64(c)] = toBF16(ckv[(off+j)*lora+int64(c)])
			}
			for d := range rope {
				cache[row+lora+int64(d)] = toBF16(kpe[(off+j)*rope+int64(d)])
			}
		}
		off += n
	}
	err = e.Do(func(x *cuda.Ctx) error {
		if err := x.CopyIn(mb.Q.Ptr, bfBytes(qabs)); err != nil {
			return err
		}
		return x.CopyIn(mb.KV[0].Ptr, bfBytes(cache))
	})
	if err != nil {
		t.Fatal(err)
	}
	latent, mlse := launchOnce(t, e, mb, dense, func(r *core.PlanRequest) { r.Dims.SoftmaxScale = devicecheck.PrefillScale })
	mla := make([]uint16, tokens*heads*dv) // latent x W_UV, rounded as the MHA outputs are
	devicecheck.Parallel(int(tokens*heads), func(row int) {
		h := row % heads
		for d := range dv {
			var s float64
			for c := range lora {
				s += devicecheck.BF16(latent[int64(row)*512+int64(c)]) * wuv[(h*lora+c)*dv+d]
			}
			mla[int64(row)*dv+int64(d)] = toBF16(s)
		}
	})
	return mla, mlse
}
