package devicehost

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// PrefillScale is the softmax scale of the prefill cases: 1/sqrt(192).
var PrefillScale = 1 / math.Sqrt(192)

// PrefillCase is one ragged prefill batch for an MHA method.
type PrefillCase struct {
	Name          string
	Method        core.Method
	Heads         int
	SeqLens       []int64 // keys per request: prefix + new tokens
	QLens         []int64 // new tokens per request
	ChunkCapacity int
	Seed          uint64
}

// Describe returns a short description of c.
func (c PrefillCase) Describe() string {
	return fmt.Sprintf("%s heads %d batch %d seq %v q %v capacity %d", c.Method, c.Heads, len(c.SeqLens), short(c.SeqLens), short(c.QLens), c.ChunkCapacity)
}

func short(v []int64) string {
	if len(v) > 6 {
		return fmt.Sprintf("%v...(%d)", v[:6], len(v))
	}
	return fmt.Sprint(v)
}

func (c PrefillCase) request(dev core.DeviceInfo) core.PlanRequest {
	return core.PlanRequest{
		Backend: "fa3", Method: c.Method, DType: "bf16",
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: PrefillScale},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, ChunkCapacity: c.ChunkCapacity},
		Device: dev,
	}
}

func (c PrefillCase) CatalogKernel() core.Kernel {
	name := "flash_attn_varlen_func"
	if c.Method == core.MHAChunkedKV {
		name += "+merge_state"
	}
	return core.Kernel{Name: name, Method: c.Method, DTypes: []string{"bf16"}, HeadDims: []int{192, 128}}
}

// PrefillBatch is a prefill case's tensors on the device. The keys and
// values of every request (prefix then new tokens) are generated once in
// KFull/VFull, the one-shot layout; the chunked layout's k, v, k_prefix and
// v_prefix are copies of slices of them, so every method sees the same
// numbers.
type PrefillBatch struct {
	Case                PrefillCase
	Req                 core.PlanRequest
	Tokens, Keys        int64
	Q, KFull, VFull     cudaexec.Buffer
	K, V, KPre, VPre    cudaexec.Buffer // chunked layout
	Out, LSE            cudaexec.Buffer
	qSeed, kSeed, vSeed uint64
	seqStart, tokStart  []int64
	ownK, ownV, ownPre  bool
}

// AllocPrefill puts c's tensors on the device.
func (e *Env) AllocPrefill(c PrefillCase) (*PrefillBatch, error) {
	b := &PrefillBatch{Case: c, qSeed: c.Seed*3 + 1, kSeed: c.Seed*3 + 2, vSeed: c.Seed*3 + 3}
	for i, n := range c.SeqLens {
		b.seqStart = append(b.seqStart, b.Keys)
		b.tokStart = append(b.tokStart, b.Tokens)
		b.Keys += n
		b.Tokens += c.QLens[i]
	}
	b.Req = c.request(e.Exec.Device())
	h := int64(c.Heads)
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		alloc := func(n int64) (cudaexec.Buffer, error) {
			p, err := x.Alloc(max(n, 16))
			return cudaexec.Buffer{Ptr: p, Bytes: n}, err
		}
		var err error
		for _, t := range []struct {
			dst  *cudaexec.Buffer
			n    int64
			seed uint64
		}{{&b.Q, b.Tokens * h * 192, b.qSeed}, {&b.KFull, b.Keys * h * 192, b.kSeed}, {&b.VFull, b.Keys * h * 128, b.vSeed}} {
			if *t.dst, err = alloc(t.n * 2); err != nil {
				return err
			}
			if err := e.Fill(x, t.dst.Ptr, t.n, t.seed); err != nil {
				return err
			}
		}
		if b.Out, err = alloc(b.Tokens * h * 128 * 2); err != nil {
			return err
		}
		if b.LSE, err = alloc(b.Tokens * h * 4); err != nil {
			return err
		}
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		if c.Method != core.MHAChunkedKV {
			b.K, b.V = b.KFull, b.VFull
			return nil
		}
		// The chunked layout: new tokens' keys in k/v, prefixes in k_prefix/v_prefix.
		pre := b.Keys - b.Tokens
		if b.K, err = alloc(b.Tokens * h * 192 * 2); err != nil {
			return err
		}
		if b.V, err = alloc(b.Tokens * h * 128 * 2); err != nil {
			return err
		}
		if b.KPre, err = alloc(pre * h * 192 * 2); err != nil {
			return err
		}
		if b.VPre, err = alloc(pre * h * 128 * 2); err != nil {
			return err
		}
		b.ownK = true
		return b.SplitChunked(x)
	})
	if err != nil {
		b.Free(e)
		return nil, err
	}
	return b, nil
}

// SplitChunked copies KFull/VFull into the chunked layout: each request's
// prefix into k_prefix/v_prefix, its new tokens into k/v.
func (b *PrefillBatch) SplitChunked(x *cuda.Ctx) error {
	c := b.Case
	h := int64(c.Heads)
	var pOff int64
	for i, n := range c.SeqLens {
		p := n - c.QLens[i]
		for _, t := range []struct {
			full, pre, nw cudaexec.Buffer
			w             int64
		}{{b.KFull, b.KPre, b.K, h * 192 * 2}, {b.VFull, b.VPre, b.V, h * 128 * 2}} {
			if p > 0 {
				if err := x.Copy(t.pre.Ptr+uint64(pOff*t.w), t.full.Ptr+uint64(b.seqStart[i]*t.w), p*t.w); err != nil {
					return err
				}
			}
			if err := x.Copy(t.nw.Ptr+uint64(b.tokStart[i]*t.w), t.full.Ptr+uint64((b.seqStart[i]+p)*t.w), c.QLens[i]*t.w); err != nil {
				return err
			}
		}
		pOff += p
	}
	return x.Synchronize()
}

// Free releases the batch's device memory.
func (b *PrefillBatch) Free(e *Env) {
	e.Dev.Do(func(x *cuda.Ctx) error {
		for _, p := range []cudaexec.Buffer{b.Q, b.KFull, b.VFull, b.Out, b.LSE} {
			x.Free(p.Ptr)
		}
		if b.ownK {
			for _, p := range []cudaexec.Buffer{b.K, b.V, b.KPre, b.VPre} {
				x.Free(p.Ptr)
			}
		}
		return nil
	})
}

// Tensors returns the bindings in launch.Tensors' order.
func (b *PrefillBatch) Tensors() []cudaexec.Buffer {
	if b.Case.Method == core.MHAChunkedKV {
		return []cudaexec.Buffer{b.Q, b.K, b.V, b.KPre, b.VPre, b.Out, b.LSE}
	}
	return []cudaexec.Buffer{b.Q, b.K, b.V, b.Out, b.LSE}
}

// PreparePrefill plans b and prepares the plan.
func (e *Env) PreparePrefill(b *PrefillBatch) (*cudaexec.Prepared, error) {
	p, err := devkernels.Plan(b.Case.CatalogKernel(), &b.Req)
	if err != nil {
		return nil, err
	}
	return e.Exec.Prepare(&b.Req, p)
}

// RunPrefill poisons the outputs and launches p once.
func (e *Env) RunPrefill(b *PrefillBatch, p *cudaexec.Prepared) error {
	return e.Dev.Do(func(x *cuda.Ctx) error {
		if err := x.Fill16(b.Out.Ptr, 0x7fc0, b.Out.Bytes/2); err != nil {
			return err
		}
		if err := x.Fill32(b.LSE.Ptr, 0x7fc00000, b.LSE.Bytes/4); err != nil {
			return err
		}
		if err := x.Synchronize(); err != nil {
			return err
		}
		if err := p.Launch(x, e.stream, b.Tensors()); err != nil {
			return err
		}
		return x.SyncStream(e.stream)
	})
}

// Outputs downloads out (bf16 bits) and lse.
func (e *Env) Outputs(b *PrefillBatch) ([]uint16, []float32, error) {
	out := make([]uint16, b.Out.Bytes/2)
	lse := make([]float32, b.LSE.Bytes/4)
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		if err := x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*2), b.Out.Ptr); err != nil {
			return err
		}
		return x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&lse[0])), len(lse)*4), b.LSE.Ptr)
	})
	return out, lse, err
}

// VerifyPrefill compares up to maxRows random (token, head) rows of the
// outputs with the fp64 reference: each query attends to its request's
// prefix and to the new tokens up to itself.
func (e *Env) VerifyPrefill(b *PrefillBatch, out []uint16, lse []float32, maxRows int) Check {
	c := b.Case
	h := int64(c.Heads)
	type row struct{ req, t, head int64 }
	rng := rand.New(rand.NewPCG(c.Seed, 17))
	var rows []row
	pick := func(g int64) {
		tok := g / h
		r := int64(0)
		for r+1 < int64(len(b.tokStart)) && b.tokStart[r+1] <= tok {
			r++
		}
		rows = append(rows, row{r, tok - b.tokStart[r], g % h})
	}
	total := b.Tokens * h
	pick(0)
	pick(total - 1)
	for int64(len(rows)) < min(int64(maxRows), total) {
		pick(rng.Int64N(total))
	}
	return compareRows(out, lse, len(rows), func(k int) rowRef {
		r := rows[k]
		tok := b.tokStart[r.req] + r.t
		q := make([]float64, 192)
		for d := range q {
			q[d] = hashValue(b.qSeed, (tok*h+r.head)*192+int64(d))
		}
		n := c.SeqLens[r.req] - c.QLens[r.req] + r.t + 1 // keys seen
		s := make([]float64, n)
		mx := math.Inf(-1)
		for j := range n {
			base := ((b.seqStart[r.req]+j)*h + r.head) * 192
			var dot float64
			for d := range 192 {
				dot += q[d] * hashValue(b.kSeed, base+int64(d))
			}
			s[j] = dot * PrefillScale
			mx = math.Max(mx, s[j])
		}
		var sum float64
		want := make([]float64, 128)
		for j := range n {
			p := math.Exp(s[j] - mx)
			sum += p
			base := ((b.seqStart[r.req]+j)*h + r.head) * 128
			for d := range 128 {
				want[d] += p * hashValue(b.vSeed, base+int64(d))
			}
		}
		for d := range want {
			want[d] /= sum
		}
		return rowRef{out: (tok*h + r.head) * 128, lse: tok*h + r.head, want: want, wantLSE: mx + math.Log(sum)}
	})
}

// TimePrefill times p's launches on b (median of reps), in microseconds.
func (e *Env) TimePrefill(b *PrefillBatch, p *cudaexec.Prepared, reps int) (Timing, error) {
	var ts []float64
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		t := b.Tensors()
		var err error
		ts, err = e.repeat(x, reps, 1, func() error { return p.Launch(x, e.stream, t) })
		return err
	})
	if err != nil {
		return Timing{}, err
	}
	return median(ts), nil
}

// median returns the median of ts and their spread.
func median(ts []float64) Timing {
	s := slices.Sorted(slices.Values(ts))
	m := s[len(s)/2]
	return Timing{Median: m, Spread: (s[len(s)-1] - s[0]) / m}
}

// CausalFLOPs is the work of a prefill batch counted on the causal pairs:
// 2 * heads * pairs * (192 + 128).
func (c PrefillCase) CausalFLOPs() float64 {
	var pairs float64
	for i, n := range c.SeqLens {
		q := float64(c.QLens[i])
		p := float64(n) - q
		pairs += q*p + q*(q+1)/2
	}
	return 2 * float64(c.Heads) * pairs * (192 + 128)
}
