package devicecheck

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Quant is an MLA batch of the sparse kernels (TopK > 0: each query token
// over its own top-k of the request's keys, DeepSeek sparse attention) or
// of the dense kernels over an FP8 cache.
type Quant struct {
	Name     string
	Heads    int
	PageSize int
	SeqLens  []int64
	QLens    []int64
	// TopK is the width of each token's top-k; 0: dense.
	TopK int
	// FP8 stores the cache in fp8_e4m3: for a dense batch 576 e4m3 values
	// per token and KVScale, for a sparse one DeepSeek-V3.2's layout.
	FP8 bool
	// Pad is the share of each top-k row left -1 beyond the keys a token
	// can see (a token that sees fewer keys than TopK pads the rest).
	Pad  float64
	Seed uint64
	// Graph asks for a plan that holds for the batch size; with MaxSeqLen,
	// the bound of the lengths, a dense plan then schedules on the device
	// (MLA.Graph), and the page table gives each request room for
	// MaxSeqLen keys.
	Graph     bool
	MaxSeqLen int64
	// Split binds the queries as q_nope and q_rope (MLA.Split).
	Split bool
}

// KVScale is the layer scale of the dense FP8 batches.
const KVScale = 0.75

// Describe returns a short description of c.
func (c Quant) Describe() string {
	kv := "bf16"
	if c.FP8 {
		kv = "fp8"
	}
	return fmt.Sprintf("heads %d page %d batch %d qlen %d seq %d..%d topk %d kv %s graph %t max %d split %t", c.Heads, c.PageSize, len(c.SeqLens), c.QLens[0],
		slices.Min(c.SeqLens), slices.Max(c.SeqLens), c.TopK, kv, c.Graph, c.MaxSeqLen, c.Split)
}

// QuantBatch is a Quant batch's tensors on the device and what the
// reference needs of them.
type QuantBatch struct {
	Case      Quant
	Req       core.PlanRequest
	Tokens    int64
	Pages     []int32 // the page table, request by request
	Indptr    []int32
	TopK      []int32 // [Tokens, TopK] slots, -1 pads
	Buffers   map[string]cudaexec.Buffer
	KVCopies  []cudaexec.Buffer // the layers' caches
	qSeed     uint64
	kvSeed    uint64
	rowBytes  int64
	cacheRows int64
	env       *Env
}

// sparseKeys draws token t's keys: up to TopK distinct positions in
// [0, visible), as slots of the request's pages, with -1 pads in random
// places.
func sparseKeys(rng *rand.Rand, visible int64, topk int, pad float64, slot func(int64) int32) []int32 {
	n := min(int64(topk), visible)
	if n == int64(topk) && pad > 0 {
		n = max(1, int64(float64(topk)*(1-pad)))
	}
	chosen := map[int64]bool{}
	var pos []int64
	if n*2 > visible {
		for _, p := range rng.Perm(int(visible))[:n] {
			pos = append(pos, int64(p))
		}
	} else {
		for int64(len(pos)) < n {
			p := rng.Int64N(visible)
			if !chosen[p] {
				chosen[p] = true
				pos = append(pos, p)
			}
		}
	}
	row := make([]int32, topk)
	for i := range row {
		row[i] = -1
	}
	for i, p := range pos {
		row[i] = slot(p)
	}
	rng.Shuffle(len(row), func(i, j int) { row[i], row[j] = row[j], row[i] })
	return row
}

// drawTopK draws every query token's top-k row among the keys it sees,
// as slots of its request's pages.
func (b *QuantBatch) drawTopK(rng *rand.Rand) {
	c := b.Case
	for i, n := range c.SeqLens {
		pages := b.Pages[b.Indptr[i]:b.Indptr[i+1]]
		slot := func(p int64) int32 { return pages[p/int64(c.PageSize)]*int32(c.PageSize) + int32(p%int64(c.PageSize)) }
		for t := range c.QLens[i] {
			visible := n - c.QLens[i] + t + 1
			b.TopK = append(b.TopK, sparseKeys(rng, visible, c.TopK, c.Pad, slot)...)
		}
	}
}

// Request returns the plan request of c over a cache of numPages pages,
// without a backend.
func (c Quant) Request(dev core.DeviceInfo, numPages int) core.PlanRequest {
	kvd := "bf16"
	if c.FP8 {
		kvd = "fp8_e4m3"
	}
	return core.PlanRequest{
		Method: core.MLA, DType: "bf16", KVDType: kvd,
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: Scale, TopK: c.TopK},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, PageSize: c.PageSize, NumPages: numPages, MaxSeqLen: c.MaxSeqLen},
		Device: dev, Graph: c.Graph, QuerySplit: c.Split,
	}
}

// Alloc puts c's tensors on the device: copies caches (layers), pages
// shuffled, the top-k rows drawn per token.
func (c Quant) Alloc(e *Env, copies int) (Batch, error) { return e.AllocQuant(c, copies) }

// AllocQuant is c.Alloc, as the *QuantBatch it is.
func (e *Env) AllocQuant(c Quant, copies int) (*QuantBatch, error) {
	if err := checkLens(c.SeqLens, c.QLens); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 9))
	b := &QuantBatch{Case: c, qSeed: c.Seed*2 + 1, kvSeed: c.Seed*2 + 2, Buffers: map[string]cudaexec.Buffer{}, env: e}
	pt := newPageTable(c.SeqLens, c.QLens, c.PageSize, c.Graph, c.MaxSeqLen, rng)
	b.Tokens, b.Indptr, b.Pages = pt.tokens, pt.indptr, pt.pages
	numPages, seq, qo := pt.numPages, pt.seq, pt.qo
	if c.TopK > 0 {
		b.drawTopK(rng)
	}
	b.Req = c.Request(e.Device(), numPages)
	specs, err := launch.Tensors(&b.Req)
	if err != nil {
		return nil, err
	}
	b.cacheRows = int64(numPages) * int64(c.PageSize)
	for _, s := range specs {
		if s.Name == "kv_cache" {
			b.rowBytes = s.Bytes() / b.cacheRows
		}
	}
	host := map[string][]int32{"kv_indptr": b.Indptr, "kv_indices": b.Pages, "seq_lens": seq, "qo_indptr": qo, "topk_indices": b.TopK}
	err = e.Do(func(x *cuda.Ctx) error {
		for _, s := range specs {
			if s.Name == "kv_cache" {
				for i := range copies {
					kv, err := alloc(x, s.Bytes())
					if err != nil {
						return err
					}
					b.KVCopies = append(b.KVCopies, kv)
					if err := b.fillCache(x, kv.Ptr, b.kvSeed+uint64(i)*0x1000193); err != nil {
						return err
					}
				}
				continue
			}
			buf, err := alloc(x, max(s.Bytes(), 4))
			if err != nil {
				return err
			}
			buf.Bytes = s.Bytes()
			b.Buffers[s.Name] = buf
			seed, query := querySeeds[s.Name]
			switch {
			case query:
				err = e.Fill(x, buf.Ptr, s.Bytes()/2, b.qSeed+seed)
			case s.Name == "kv_scale":
				err = x.CopyIn(buf.Ptr, binary.LittleEndian.AppendUint32(nil, math.Float32bits(KVScale)))
			case host[s.Name] != nil:
				err = x.CopyIn(buf.Ptr, i32bytes(host[s.Name]))
			}
			if err != nil {
				return err
			}
		}
		return x.SyncStream(e.stream)
	})
	if err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// fillCache fills one cache copy of b at p from seed.
func (b *QuantBatch) fillCache(x *cuda.Ctx, p uint64, seed uint64) error {
	e, n := b.env, b.cacheRows
	switch {
	case !b.Case.FP8:
		return e.Fill(x, p, n*576, seed)
	case b.Case.TopK == 0:
		return e.fillE4M3Cache(x, p, n*576, seed, KVScale)
	}
	return e.fillDSACache(x, p, n, seed)
}

// Request is the batch's plan request.
func (b *QuantBatch) Request() core.PlanRequest { return b.Req }

// Layers is the number of cache copies.
func (b *QuantBatch) Layers() int { return len(b.KVCopies) }

// Outputs are out and lse.
func (b *QuantBatch) Outputs() (cudaexec.Buffer, cudaexec.Buffer) {
	return b.Buffers["out"], b.Buffers["lse"]
}

// Free releases b's device memory.
func (b *QuantBatch) Free() {
	var bufs []cudaexec.Buffer
	for _, p := range b.Buffers {
		bufs = append(bufs, p)
	}
	b.env.free(append(bufs, b.KVCopies...)...)
}

// Tensors are the tensors of layer (cache copy) i, by name.
func (b *QuantBatch) Tensors(i int) devicehost.Tensors {
	t := devicehost.Tensors{"kv_cache": b.KVCopies[i%len(b.KVCopies)]}
	for n, buf := range b.Buffers {
		t[n] = buf
	}
	return t
}

// keyRow is the dequantised key of one cache slot: 576 values, the first
// 512 the value row.
func (b *QuantBatch) keyRow(cache []byte, slot int64, row []float64) []float64 {
	src := cache[slot*b.rowBytes : (slot+1)*b.rowBytes]
	switch {
	case !b.Case.FP8:
		for d := range row {
			row[d] = BF16(binary.LittleEndian.Uint16(src[2*d:]))
		}
	case b.Case.TopK == 0:
		for d := range row {
			row[d] = e4m3(src[d]) * KVScale
		}
	default:
		for d := range 512 {
			s := math.Float32frombits(binary.LittleEndian.Uint32(src[512+4*(d/128):]))
			row[d] = e4m3(src[d]) * float64(s)
		}
		for d := 512; d < 576; d++ {
			row[d] = BF16(binary.LittleEndian.Uint16(src[528+2*(d-512):]))
		}
	}
	return row
}

// Verify downloads the outputs (computed from cache copy layer) and
// compares up to maxRows random rows with the fp64 reference over the
// dequantised cache: the keys each token's top-k names (or, dense, every
// key it sees).
func (b *QuantBatch) Verify(layer, maxRows int) (Check, error) {
	c, e := b.Case, b.env
	h := int64(c.Heads)
	kv := b.KVCopies[layer%len(b.KVCopies)]
	cache := make([]byte, kv.Bytes)
	out, lse, err := e.download(b.Buffers["out"], b.Buffers["lse"])
	if err == nil {
		err = e.Do(func(x *cuda.Ctx) error { return x.CopyOut(cache, kv.Ptr) })
	}
	if err != nil {
		return Check{}, err
	}
	reqOf := make([]int, 0, b.Tokens)
	tokOf := make([]int64, 0, b.Tokens)
	for i, q := range c.QLens {
		for t := range q {
			reqOf = append(reqOf, i)
			tokOf = append(tokOf, t)
		}
	}
	total := int(b.Tokens * h)
	rng := rand.New(rand.NewPCG(c.Seed, 13))
	rows := []int{0, total - 1}
	for len(rows) < min(maxRows, total) {
		rows = append(rows, rng.IntN(total))
	}
	return compareRows(out, lse, len(rows), func(k int) rowRef {
		g := rows[k]
		tok, head := int64(g)/h, int64(g)%h
		q := queryRow(b.qSeed, c.Split, tok*h+head)
		var slots []int64
		if c.TopK > 0 {
			for _, s := range b.TopK[tok*int64(c.TopK) : (tok+1)*int64(c.TopK)] {
				if s >= 0 {
					slots = append(slots, int64(s))
				}
			}
		} else {
			r := reqOf[tok]
			pages := b.Pages[b.Indptr[r]:b.Indptr[r+1]]
			for j := range c.SeqLens[r] - c.QLens[r] + tokOf[tok] + 1 {
				slots = append(slots, int64(pages[j/int64(c.PageSize)])*int64(c.PageSize)+j%int64(c.PageSize))
			}
		}
		key := func(j int64, buf []float64) []float64 { return b.keyRow(cache, slots[j], buf) }
		value := func(j int64, buf []float64) []float64 { return key(j, buf)[:512] }
		want, wantLSE := attend(q, int64(len(slots)), Scale, key, value)
		return rowRef{out: int64(g) * 512, lse: int64(g), want: want, wantLSE: wantLSE}
	}), nil
}

// Cost is what one launch of b's batch reads at least: the query rows, the
// cached keys it attends to at their stored size (for a sparse batch only
// the slots the indices select, once per token), and the outputs written;
// and the FLOPs: 2 * heads * (576 + 512) per (query token, key) pair
// attended (the selected keys for a sparse batch).
func (b *QuantBatch) Cost() Cost {
	c := b.Case
	h := float64(c.Heads)
	bytes := float64(b.Tokens) * h * (576*2 + 512*2 + 4)
	var pairs float64
	if c.TopK > 0 {
		for _, s := range b.TopK {
			if s >= 0 {
				bytes += float64(b.rowBytes)
				pairs++
			}
		}
	} else {
		for i, l := range c.SeqLens {
			bytes += float64(l) * float64(b.rowBytes)
			q := float64(c.QLens[i])
			pairs += q*float64(l) - q*(q-1)/2
		}
	}
	return Cost{Bytes: bytes, FLOPs: 2 * h * (576 + 512) * pairs}
}
