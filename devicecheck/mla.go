package devicecheck

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// MLA is an absorbed-MLA batch over sglang's paged bf16 latent cache
// (queries and keys 576 wide, values the first 512 of a key): decode (one
// query token a request), target verify (a few) or extend (many), each
// request's query tokens the last of its keys, causal among themselves.
// Its pages are shuffled over a cache with a few pages to spare.
type MLA struct {
	Name     string
	Heads    int
	PageSize int
	SeqLens  []int64
	QLens    []int64
	Seed     uint64
	// Graph asks for a plan that holds for the batch size; with MaxSeqLen,
	// the bound of the lengths: the plan then schedules on the device, and
	// the page table gives each request room for MaxSeqLen keys.
	Graph     bool
	MaxSeqLen int64
	// Split binds the queries as the two tensors of a request with
	// QuerySplit, q_nope and q_rope, as sglang's DeepSeek layers pass
	// them.
	Split bool
}

// Scale is the softmax scale of the MLA batches (DeepSeek-V3's,
// 1/sqrt(192) times its YaRN mscale squared).
const Scale = 0.1352337788608801

// Describe returns a short description of c.
func (c MLA) Describe() string {
	lo, hi := slices.Min(c.SeqLens), slices.Max(c.SeqLens)
	return fmt.Sprintf("heads %d page %d batch %d qlen %d seq %d..%d graph %t split %t", c.Heads, c.PageSize, len(c.SeqLens), c.QLens[0], lo, hi, c.Graph, c.Split)
}

// Request returns the plan request of c over a cache of numPages pages,
// without a backend.
func (c MLA) Request(dev core.DeviceInfo, numPages int) core.PlanRequest {
	return core.PlanRequest{
		Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: Scale},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, PageSize: c.PageSize, NumPages: numPages, MaxSeqLen: c.MaxSeqLen},
		Device: dev, Graph: c.Graph, QuerySplit: c.Split,
	}
}

// MLABatch is an MLA batch's tensors on the device.
type MLABatch struct {
	Case     MLA
	Req      core.PlanRequest
	Tokens   int64
	Pages    []int32 // kv_indices
	Indptr   []int32
	NumPages int
	// Q (or, Split, QNope and QRope), KV (a cache per layer), Indptr,
	// Indices, SeqLens, QOIndptr, Out, LSE.
	Q, QNope, QRope, Indp, Ind, Seq, QO, Out, LSE cudaexec.Buffer
	KV                                            []cudaexec.Buffer
	qSeed, kvSeed                                 uint64
	env                                           *Env
}

// Alloc puts c's tensors on the device: copies KV caches of the same
// shape (distinct layers), pages shuffled.
func (c MLA) Alloc(e *Env, copies int) (Batch, error) { return e.AllocMLA(c, copies) }

// AllocMLA is c.Alloc, as the *MLABatch it is.
func (e *Env) AllocMLA(c MLA, copies int) (*MLABatch, error) {
	if err := checkLens(c.SeqLens, c.QLens); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 7))
	b := &MLABatch{Case: c, qSeed: c.Seed*2 + 1, kvSeed: c.Seed*2 + 2, env: e}
	pt := newPageTable(c.SeqLens, c.QLens, c.PageSize, c.Graph, c.MaxSeqLen, rng)
	b.Tokens, b.Indptr, b.Pages, b.NumPages = pt.tokens, pt.indptr, pt.pages, pt.numPages
	seq, qo := pt.seq, pt.qo
	b.Req = c.Request(e.Device(), b.NumPages)
	h := int64(c.Heads)
	err := e.Do(func(x *cuda.Ctx) error {
		var err error
		if err := b.allocQueries(x); err != nil {
			return err
		}
		kvElems := int64(b.NumPages) * int64(c.PageSize) * 576
		for i := range copies {
			kv, err := alloc(x, kvElems*2)
			if err != nil {
				return err
			}
			b.KV = append(b.KV, kv)
			if err := e.Fill(x, kv.Ptr, kvElems, b.kvSeed+uint64(i)*0x1000193); err != nil {
				return err
			}
		}
		for _, t := range []struct {
			dst *cudaexec.Buffer
			src []int32
		}{{&b.Indp, b.Indptr}, {&b.Ind, b.Pages}, {&b.Seq, seq}, {&b.QO, qo}} {
			if *t.dst, err = alloc(x, int64(4*max(len(t.src), 1))); err != nil {
				return err
			}
			if err := x.CopyIn(t.dst.Ptr, i32bytes(t.src)); err != nil {
				return err
			}
		}
		if b.Out, err = alloc(x, b.Tokens*h*512*2); err != nil {
			return err
		}
		if b.LSE, err = alloc(x, b.Tokens*h*4); err != nil {
			return err
		}
		return x.SyncStream(e.stream)
	})
	if err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// allocQueries puts the queries on the device: q, or q_nope and q_rope,
// whose rows hold what queryRow gives.
func (b *MLABatch) allocQueries(x *cuda.Ctx) error {
	type query struct {
		name  string
		dst   *cudaexec.Buffer
		width int64
	}
	qs := []query{{"q", &b.Q, 576}}
	if b.Case.Split {
		qs = []query{{"q_nope", &b.QNope, 512}, {"q_rope", &b.QRope, 64}}
	}
	rows := b.Tokens * int64(b.Case.Heads)
	for _, q := range qs {
		var err error
		if *q.dst, err = alloc(x, rows*q.width*2); err != nil {
			return err
		}
		if err := b.env.Fill(x, q.dst.Ptr, rows*q.width, b.qSeed+querySeeds[q.name]); err != nil {
			return err
		}
	}
	return nil
}

// querySeeds are the seeds of the query tensors of the MLA layout, as
// offsets from a batch's query seed: each query row is queryRow's.
var querySeeds = map[string]uint64{"q": 0, "q_nope": 0, "q_rope": 1}

// queryRow returns query row g (token-major: token*heads + head) of the
// MLA batches of query seed seed: 576 values of the hash, or, split, 512
// of q_nope's then 64 of q_rope's.
func queryRow(seed uint64, split bool, g int64) []float64 {
	q := make([]float64, 576)
	if !split {
		return hashRow(seed, g*576, q)
	}
	hashRow(seed+querySeeds["q_nope"], g*512, q[:512])
	hashRow(seed+querySeeds["q_rope"], g*64, q[512:])
	return q
}

// pageTable is a batch's paged cache as the host lays it out: each
// request's pages (room for MaxSeqLen keys where a graph plan has that
// bound, for every step's keys), drawn at random from numPages (three more
// than the table uses), and the lengths as int32 tensors.
type pageTable struct {
	tokens   int64
	indptr   []int32 // kv_indptr
	pages    []int32 // kv_indices
	numPages int
	seq, qo  []int32 // seq_lens, qo_indptr
}

func newPageTable(seqLens, qLens []int64, pageSize int, graph bool, maxSeqLen int64, rng *rand.Rand) pageTable {
	pt := pageTable{indptr: []int32{0}, qo: []int32{0}, seq: make([]int32, len(seqLens))}
	var need int
	for i, n := range seqLens {
		pt.seq[i] = int32(n)
		pt.tokens += qLens[i]
		if graph && maxSeqLen > 0 {
			n = maxSeqLen // room for every step's keys
		}
		need += int((n + int64(pageSize) - 1) / int64(pageSize))
		pt.indptr = append(pt.indptr, int32(need))
		pt.qo = append(pt.qo, int32(pt.tokens))
	}
	pt.numPages = need + 3
	perm := rng.Perm(pt.numPages)
	pt.pages = make([]int32, need)
	for i := range pt.pages {
		pt.pages[i] = int32(perm[i])
	}
	return pt
}

// checkLens refuses lengths no batch can have: none, a request with fewer
// keys than query tokens, or lists of different lengths.
func checkLens(seq, q []int64) error {
	if len(seq) == 0 || len(q) != len(seq) {
		return core.NewFieldError("seq_lens", fmt.Sprintf("%d requests with %d query lengths", len(seq), len(q)))
	}
	for i, n := range seq {
		if q[i] < 1 || n < q[i] {
			return core.NewFieldError("seq_lens", fmt.Sprintf("request %d has %d keys and %d query tokens", i, n, q[i]))
		}
	}
	return nil
}

// Request is the batch's plan request.
func (b *MLABatch) Request() core.PlanRequest { return b.Req }

// Layers is the number of KV caches.
func (b *MLABatch) Layers() int { return len(b.KV) }

// Outputs are out and lse.
func (b *MLABatch) Outputs() (cudaexec.Buffer, cudaexec.Buffer) { return b.Out, b.LSE }

// Free releases the batch's device memory.
func (b *MLABatch) Free() {
	b.env.free(append([]cudaexec.Buffer{b.Q, b.QNope, b.QRope, b.Indp, b.Ind, b.Seq, b.QO, b.Out, b.LSE}, b.KV...)...)
}

// Tensors are the tensors of layer (KV cache) i, by the MLA layout's names.
func (b *MLABatch) Tensors(i int) devicehost.Tensors {
	t := devicehost.Tensors{"q": b.Q, "kv_cache": b.KV[i%len(b.KV)], "kv_indptr": b.Indp, "kv_indices": b.Ind,
		"seq_lens": b.Seq, "qo_indptr": b.QO, "out": b.Out, "lse": b.LSE}
	if b.Case.Split {
		delete(t, "q")
		t["q_nope"], t["q_rope"] = b.QNope, b.QRope
	}
	return t
}

// Advance queues, on the Env's stream, the kernel that adds one to every
// request's entry of seq_lens on the device: a decode step's new token,
// with no copy from the host (it can be captured in a step's graph). The
// host's copy, b.Case.SeqLens, is the caller's to keep in step.
func (b *MLABatch) Advance(x *cuda.Ctx) error {
	return b.env.advanceLens(x, b.Seq.Ptr, len(b.Case.SeqLens))
}

// Poison fills the outputs with NaN and waits for the fill.
func (b *MLABatch) Poison(x *cuda.Ctx) error { return poison(x, b.Out, b.LSE) }

// Cost is what a launch moves at least (the queries, the keys once, the
// outputs and LSE) and the FLOPs of its two products over every (query
// token, key seen) pair.
func (b *MLABatch) Cost() Cost {
	c := b.Case
	var keys int64
	var flops float64
	for i, n := range c.SeqLens {
		keys += n
		// Each query token sees the keys up to its own: the prefix and the
		// tokens before it.
		q := c.QLens[i]
		seen := float64(q*(n-q)) + float64(q*(q+1))/2
		flops += 2 * float64(c.Heads) * seen * (576 + 512)
	}
	tokens := b.Tokens * int64(c.Heads)
	return Cost{Bytes: float64(keys*576*2 + tokens*576*2 + tokens*512*2 + tokens*4), FLOPs: flops}
}

// Verify downloads the outputs (computed from KV cache layer) and compares
// up to maxRows random rows with the fp64 reference.
func (b *MLABatch) Verify(layer, maxRows int) (Check, error) {
	c := b.Case
	h := int64(c.Heads)
	out, lse, err := b.env.download(b.Out, b.LSE)
	if err != nil {
		return Check{}, err
	}
	// Rows to check: random, plus the first and last of the batch.
	rng := rand.New(rand.NewPCG(c.Seed, 11))
	type row struct{ req, t, head int }
	var rows []row
	total := int(b.Tokens * h)
	reqOf := make([]int, 0, b.Tokens)
	tokOf := make([]int, 0, b.Tokens)
	for i, q := range c.QLens {
		for t := range int(q) {
			reqOf = append(reqOf, i)
			tokOf = append(tokOf, t)
		}
	}
	pick := func(g int) { rows = append(rows, row{reqOf[g/int(h)], tokOf[g/int(h)], g % int(h)}) }
	pick(0)
	pick(total - 1)
	for len(rows) < min(maxRows, total) {
		pick(rng.IntN(total))
	}
	kvSeed := b.kvSeed + uint64(layer%len(b.KV))*0x1000193
	qStart := make([]int64, len(c.QLens))
	for i := 1; i < len(c.QLens); i++ {
		qStart[i] = qStart[i-1] + c.QLens[i-1]
	}
	return compareRows(out, lse, len(rows), func(k int) rowRef {
		r := rows[k]
		tok := qStart[r.req] + int64(r.t)
		q := queryRow(b.qSeed, c.Split, tok*h+int64(r.head))
		seen := c.SeqLens[r.req] - c.QLens[r.req] + int64(r.t) + 1 // keys the token sees
		pages := b.Pages[b.Indptr[r.req]:b.Indptr[r.req+1]]
		ps := int64(c.PageSize)
		key := func(j int64, buf []float64) []float64 {
			return hashRow(kvSeed, (int64(pages[j/ps])*ps+j%ps)*576, buf)
		}
		value := func(j int64, buf []float64) []float64 { return key(j, buf[:512]) }
		want, wantLSE := attend(q, seen, Scale, key, value)
		return rowRef{out: (tok*h + int64(r.head)) * 512, lse: tok*h + int64(r.head), want: want, wantLSE: wantLSE}
	}), nil
}
