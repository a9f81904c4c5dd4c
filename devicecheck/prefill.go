package devicecheck

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// PrefillScale is the softmax scale of the prefill batches: 1/sqrt(192).
var PrefillScale = 1 / math.Sqrt(192)

// Prefill is a ragged prefill batch for an MHA method (MHA, MHA_ONE_SHOT,
// MHA_CHUNKED_KV) with DeepSeek's MHA dims (queries and keys 192 wide,
// values 128): request i has SeqLens[i] keys, of which the last QLens[i]
// are its new tokens, causal among themselves. With PrefixChunk (of
// MHA_CHUNKED_KV: a prefix chunk's pass) request i has SeqLens[i] keys of
// the chunk, 0 allowed, and QLens[i] new tokens that see every one.
type Prefill struct {
	Name          string
	Method        core.Method
	Heads         int
	SeqLens       []int64 // keys per request: prefix + new tokens
	QLens         []int64 // new tokens per request
	ChunkCapacity int
	PrefixChunk   bool
	Seed          uint64
}

// Describe returns a short description of c.
func (c Prefill) Describe() string {
	what := c.Method.String()
	if c.PrefixChunk {
		what += " prefix chunk"
	}
	return fmt.Sprintf("%s heads %d batch %d seq %v q %v capacity %d", what, c.Heads, len(c.SeqLens), short(c.SeqLens), short(c.QLens), c.ChunkCapacity)
}

func short(v []int64) string {
	if len(v) > 6 {
		return fmt.Sprintf("%v...(%d)", v[:6], len(v))
	}
	return fmt.Sprint(v)
}

// Request returns the plan request of c, without a backend.
func (c Prefill) Request(dev core.DeviceInfo) core.PlanRequest {
	return core.PlanRequest{
		Method: c.Method, DType: "bf16",
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: PrefillScale},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, ChunkCapacity: c.ChunkCapacity, PrefixChunk: c.PrefixChunk},
		Device: dev,
	}
}

// CausalFLOPs is the work of a prefill batch counted on the causal pairs:
// 2 * heads * pairs * (192 + 128).
func (c Prefill) CausalFLOPs() float64 {
	var pairs float64
	for i, n := range c.SeqLens {
		q := float64(c.QLens[i])
		if c.PrefixChunk {
			pairs += q * float64(n) // every key of the chunk
			continue
		}
		p := float64(n) - q
		pairs += q*p + q*(q+1)/2
	}
	return 2 * float64(c.Heads) * pairs * (192 + 128)
}

// PrefillBatch is a prefill batch's tensors on the device. The keys and
// values of every request (prefix then new tokens) are generated once in
// KFull/VFull, the one-shot layout; the chunked layout's k, v, k_prefix and
// v_prefix are copies of slices of them, so every method sees the same
// numbers.
type PrefillBatch struct {
	Case                Prefill
	Req                 core.PlanRequest
	Tokens, Keys        int64
	Q, KFull, VFull     cudaexec.Buffer
	K, V, KPre, VPre    cudaexec.Buffer // chunked layout
	Out, LSE            cudaexec.Buffer
	qSeed, kSeed, vSeed uint64
	seqStart, tokStart  []int64
	ownK                bool
	env                 *Env
}

// Alloc puts c's tensors on the device (a prefill has no cache: copies is
// ignored).
func (c Prefill) Alloc(e *Env, copies int) (Batch, error) { return e.AllocPrefill(c) }

// AllocPrefill is c.Alloc, as the *PrefillBatch it is.
func (e *Env) AllocPrefill(c Prefill) (*PrefillBatch, error) {
	if err := c.checkLens(); err != nil {
		return nil, err
	}
	b := &PrefillBatch{Case: c, qSeed: c.Seed*3 + 1, kSeed: c.Seed*3 + 2, vSeed: c.Seed*3 + 3, env: e}
	for i, n := range c.SeqLens {
		b.seqStart = append(b.seqStart, b.Keys)
		b.tokStart = append(b.tokStart, b.Tokens)
		b.Keys += n
		b.Tokens += c.QLens[i]
	}
	b.Req = c.Request(e.Device())
	h := int64(c.Heads)
	err := e.Do(func(x *cuda.Ctx) error {
		var err error
		for _, t := range []struct {
			dst  *cudaexec.Buffer
			n    int64
			seed uint64
		}{{&b.Q, b.Tokens * h * 192, b.qSeed}, {&b.KFull, b.Keys * h * 192, b.kSeed}, {&b.VFull, b.Keys * h * 128, b.vSeed}} {
			if *t.dst, err = alloc(x, t.n*2); err != nil {
				return err
			}
			if err := e.Fill(x, t.dst.Ptr, t.n, t.seed); err != nil {
				return err
			}
		}
		if b.Out, err = alloc(x, b.Tokens*h*128*2); err != nil {
			return err
		}
		if b.LSE, err = alloc(x, b.Tokens*h*4); err != nil {
			return err
		}
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		if c.Method != core.MHAChunkedKV || c.PrefixChunk {
			b.K, b.V = b.KFull, b.VFull
			return nil
		}
		// The chunked layout: new tokens' keys in k/v, prefixes in k_prefix/v_prefix.
		b.ownK = true
		pre := b.Keys - b.Tokens
		for _, t := range []struct {
			dst *cudaexec.Buffer
			n   int64
		}{{&b.K, b.Tokens * h * 192 * 2}, {&b.V, b.Tokens * h * 128 * 2}, {&b.KPre, pre * h * 192 * 2}, {&b.VPre, pre * h * 128 * 2}} {
			if *t.dst, err = alloc(x, t.n); err != nil {
				return err
			}
		}
		return b.SplitChunked(x)
	})
	if err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// checkLens refuses lengths c cannot have: each request's query tokens at
// least one and at most its keys (a prefix chunk's: any keys, one in all).
func (c Prefill) checkLens() error {
	if !c.PrefixChunk {
		return checkLens(c.SeqLens, c.QLens)
	}
	if len(c.SeqLens) == 0 || len(c.QLens) != len(c.SeqLens) {
		return core.NewFieldError("seq_lens", fmt.Sprintf("%d requests with %d query lengths", len(c.SeqLens), len(c.QLens)))
	}
	var keys int64
	for i, n := range c.SeqLens {
		if n < 0 || c.QLens[i] < 1 {
			return core.NewFieldError("seq_lens", fmt.Sprintf("request %d has %d keys in the chunk and %d query tokens", i, n, c.QLens[i]))
		}
		keys += n
	}
	if keys == 0 {
		return core.NewFieldError("seq_lens", "a prefix chunk without a key")
	}
	return nil
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
func (b *PrefillBatch) Free() {
	bufs := []cudaexec.Buffer{b.Q, b.KFull, b.VFull, b.Out, b.LSE}
	if b.ownK {
		bufs = append(bufs, b.K, b.V, b.KPre, b.VPre)
	}
	b.env.free(bufs...)
}

// Request is the batch's plan request.
func (b *PrefillBatch) Request() core.PlanRequest { return b.Req }

// Layers is 1: a prefill's tensors are its own.
func (b *PrefillBatch) Layers() int { return 1 }

// Outputs are out and lse.
func (b *PrefillBatch) Outputs() (cudaexec.Buffer, cudaexec.Buffer) { return b.Out, b.LSE }

// Tensors are the batch's tensors by name (every layer's are the same).
func (b *PrefillBatch) Tensors(int) devicehost.Tensors {
	t := devicehost.Tensors{"q": b.Q, "k": b.K, "v": b.V, "out": b.Out, "lse": b.LSE}
	if b.Case.Method == core.MHAChunkedKV && !b.Case.PrefixChunk {
		t["k_prefix"], t["v_prefix"] = b.KPre, b.VPre
	}
	return t
}

// Cost is the causal work of the batch (CausalFLOPs) and the bytes of its
// tensors, each once.
func (b *PrefillBatch) Cost() Cost {
	h := float64(b.Case.Heads)
	bytes := float64(b.Tokens)*h*(192*2+128*2+4) + float64(b.Keys)*h*(192+128)*2
	return Cost{Bytes: bytes, FLOPs: b.Case.CausalFLOPs()}
}

// Verify compares up to maxRows random (token, head) rows of the outputs
// with the fp64 reference: each query attends to its request's prefix and
// to the new tokens up to itself.
func (b *PrefillBatch) Verify(_, maxRows int) (Check, error) {
	out, lse, err := b.env.download(b.Out, b.LSE)
	if err != nil {
		return Check{}, err
	}
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
		q := hashRow(b.qSeed, (tok*h+r.head)*192, make([]float64, 192))
		seen := c.SeqLens[r.req] - c.QLens[r.req] + r.t + 1
		if c.PrefixChunk {
			seen = c.SeqLens[r.req]
		}
		ref := rowRef{out: (tok*h + r.head) * 128, lse: tok*h + r.head}
		if seen == 0 { // a request without keys in the chunk: a zero row, an LSE of -inf
			ref.want, ref.wantLSE = make([]float64, 128), math.Inf(-1)
			return ref
		}
		key := func(j int64, buf []float64) []float64 {
			return hashRow(b.kSeed, ((b.seqStart[r.req]+j)*h+r.head)*192, buf)
		}
		value := func(j int64, buf []float64) []float64 {
			return hashRow(b.vSeed, ((b.seqStart[r.req]+j)*h+r.head)*128, buf[:128])
		}
		ref.want, ref.wantLSE = attend(q, seen, PrefillScale, key, value)
		return ref
	}), nil
}
