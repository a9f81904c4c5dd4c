package devicehost

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// quantSource fills FP8 caches on the device from the same hashes as
// fill_bf16: fill_e4m3 writes e4m3(v / scale) for a flat cache (sglang's
// MLA pool in fp8_e4m3), fill_dsa writes DeepSeek-V3.2's 656-byte tokens
// (512 e4m3 of v / s, s a hashed scale per 128 values, the 4 scales in
// float32, then 64 bf16 rope values).
const quantSource = `
__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ unsigned short hash_bf16(unsigned long long seed, long long i) {
    unsigned long long h = mix(seed + (unsigned long long)i * 0x9e3779b97f4a7c15ULL);
    unsigned int sign = (unsigned int)(h >> 63);
    unsigned int e = (unsigned int)(h >> 60) & 3u;
    unsigned int m = (unsigned int)(h >> 53) & 127u;
    return (unsigned short)((sign << 15) | ((126u - e) << 7) | m);
}
__device__ __forceinline__ float bits_bf16(unsigned short b) { return __int_as_float((int)b << 16); }
__device__ __forceinline__ unsigned char to_e4m3(float v) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(v));
    return (unsigned char)(r & 0xff);
}
// The scale of tile t of token tok: (0.5 + u) / 448, u uniform in [0, 1).
__device__ __forceinline__ float dsa_scale(unsigned long long seed, long long tok, int t) {
    unsigned long long h = mix(seed ^ 0x5ca1eULL + (unsigned long long)(tok * 4 + t) * 0x9e3779b97f4a7c15ULL);
    return (0.5f + (float)(h >> 40) * (1.0f / 16777216.0f)) / 448.0f;
}
extern "C" __global__ void fill_e4m3(unsigned char* p, long long n, unsigned long long seed, float inv_scale) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = to_e4m3(bits_bf16(hash_bf16(seed, i)) * inv_scale);
}
extern "C" __global__ void fill_dsa(unsigned char* p, long long tokens, unsigned long long seed) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < tokens * 656; i += stride) {
        long long tok = i / 656;
        int b = (int)(i - tok * 656);
        unsigned char v;
        if (b < 512) {
            v = to_e4m3(bits_bf16(hash_bf16(seed, tok * 512 + b)) / dsa_scale(seed, tok, b >> 7));
        } else if (b < 528) {
            float s = dsa_scale(seed, tok, (b - 512) >> 2);
            v = (unsigned char)(__float_as_uint(s) >> (8 * ((b - 512) & 3)));
        } else {
            unsigned short r = hash_bf16(seed + 1, tok * 64 + ((b - 528) >> 1));
            v = (unsigned char)(r >> (8 * ((b - 528) & 1)));
        }
        p[i] = v;
    }
}
`

// QuantCase is one decode batch of the sparse kernels (TopK > 0: each
// query token over its own top-k of the request's keys) or of the dense
// kernels over an FP8 cache.
type QuantCase struct {
	Name     string
	Heads    int
	PageSize int
	SeqLens  []int64
	QLens    []int64
	// TopK is the width of each token's top-k; 0: dense.
	TopK int
	// FP8 stores the cache in fp8_e4m3: for a dense case 576 e4m3 values
	// per token and KVScale, for a sparse case DeepSeek-V3.2's layout.
	FP8 bool
	// Pad is the share of each top-k row left -1 beyond the keys a token
	// can see (a token that sees fewer keys than TopK pads the rest).
	Pad   float64
	Seed  uint64
	Graph bool
}

// KVScale is the layer scale of the dense FP8 cases.
const KVScale = 0.75

// Kernel returns the catalog entry a case plans: dsa's sparse MLA, or
// fa3's dense MLA decode.
func (c QuantCase) Kernel() core.Kernel {
	if c.TopK > 0 {
		return core.Kernel{Name: "flash_mla_sparse_fwd", Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{576, 512}, PageSizes: []int{c.PageSize}, Sparse: true}
	}
	return core.Kernel{Name: "flash_attn_with_kvcache", Method: core.MLA, DTypes: []string{"bf16", "fp8_e4m3"}, HeadDims: []int{576, 512}, PageSizes: []int{1, 16, 64}}
}

// Describe returns a short description of c.
func (c QuantCase) Describe() string {
	kv := "bf16"
	if c.FP8 {
		kv = "fp8"
	}
	return fmt.Sprintf("heads %d page %d batch %d qlen %d seq %d..%d topk %d kv %s graph %t", c.Heads, c.PageSize, len(c.SeqLens), c.QLens[0],
		slices.Min(c.SeqLens), slices.Max(c.SeqLens), c.TopK, kv, c.Graph)
}

// QuantBatch is a QuantCase's tensors on the device and what the reference
// needs of them.
type QuantBatch struct {
	Case      QuantCase
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

// AllocQuant puts c's tensors on the device: copies caches (layers), pages
// shuffled, the top-k rows drawn per token.
func (e *Env) AllocQuant(c QuantCase, copies int) (*QuantBatch, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 9))
	b := &QuantBatch{Case: c, qSeed: c.Seed*2 + 1, kvSeed: c.Seed*2 + 2, Buffers: map[string]cudaexec.Buffer{}}
	b.Indptr = []int32{0}
	qo := []int32{0}
	var need int
	for i, n := range c.SeqLens {
		b.Tokens += c.QLens[i]
		need += int((n + int64(c.PageSize) - 1) / int64(c.PageSize))
		b.Indptr = append(b.Indptr, int32(need))
		qo = append(qo, int32(b.Tokens))
	}
	numPages := need + 3
	perm := rng.Perm(numPages)
	b.Pages = make([]int32, need)
	for i := range b.Pages {
		b.Pages[i] = int32(perm[i])
	}
	seq := make([]int32, len(c.SeqLens))
	for i, n := range c.SeqLens {
		seq[i] = int32(n)
	}
	if c.TopK > 0 {
		b.drawTopK(rng)
	}
	kvd := "bf16"
	if c.FP8 {
		kvd = "fp8_e4m3"
	}
	b.Req = core.PlanRequest{
		Backend: "fa3", Method: core.MLA, DType: "bf16", KVDType: kvd,
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: Scale, TopK: c.TopK},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, PageSize: c.PageSize, NumPages: numPages},
		Device: e.Exec.Device(), Graph: c.Graph,
	}
	if c.TopK > 0 {
		b.Req.Backend = "dsa"
	}
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
	if c.FP8 {
		if err := e.loadQuant(); err != nil { // before Do: it runs on the device's thread itself
			return nil, err
		}
	}
	err = e.Dev.Do(func(x *cuda.Ctx) error {
		for _, s := range specs {
			if s.Name == "kv_cache" {
				for i := range copies {
					p, err := x.Alloc(s.Bytes())
					if err != nil {
						return err
					}
					b.KVCopies = append(b.KVCopies, cudaexec.Buffer{Ptr: p, Bytes: s.Bytes()})
					if err := e.fillCache(x, b, p, b.kvSeed+uint64(i)*0x1000193); err != nil {
						return err
					}
				}
				continue
			}
			p, err := x.Alloc(max(s.Bytes(), 4))
			if err != nil {
				return err
			}
			b.Buffers[s.Name] = cudaexec.Buffer{Ptr: p, Bytes: s.Bytes()}
			switch {
			case s.Name == "q":
				err = e.Fill(x, p, s.Bytes()/2, b.qSeed)
			case s.Name == "kv_scale":
				err = x.CopyIn(p, binary.LittleEndian.AppendUint32(nil, math.Float32bits(KVScale)))
			case host[s.Name] != nil:
				err = x.CopyIn(p, i32bytes(host[s.Name]))
			}
			if err != nil {
				return err
			}
		}
		return x.SyncStream(e.stream)
	})
	if err != nil {
		b.Free(e)
		return nil, err
	}
	return b, nil
}

// fillCache fills one cache copy of b at p from seed (on the device's
// thread: the FP8 fills are loaded first, loadQuant).
func (e *Env) fillCache(x *cuda.Ctx, b *QuantBatch, p uint64, seed uint64) error {
	if !b.Case.FP8 {
		return e.Fill(x, p, b.cacheRows*576, seed)
	}
	n := b.cacheRows
	if b.Case.TopK == 0 {
		return e.launchArgs(x, e.fillE4M3, uint32(min((n*576+255)/256, 8192)), p, uint64(n*576), seed, uint64(math.Float32bits(1/KVScale)))
	}
	return e.launchArgs(x, e.fillDSA, uint32(min((n+255)/256, 8192)), p, uint64(n), seed)
}

// loadQuant compiles and loads quantSource once. Not from inside e.Dev.Do.
func (e *Env) loadQuant() error {
	if e.fillDSA != 0 {
		return nil
	}
	info := e.Dev.Info()
	ptx, err := cuda.CompilePTX(quantSource, "quant.cu", fmt.Sprintf("--gpu-architecture=compute_%d%d", info.Major, info.Minor))
	if err != nil {
		return err
	}
	return e.Dev.Do(func(c *cuda.Ctx) error {
		m, err := c.LoadModule([]byte(ptx))
		if err != nil {
			return err
		}
		e.quantMod = m
		if e.fillE4M3, err = c.Function(m, "fill_e4m3"); err != nil {
			return err
		}
		e.fillDSA, err = c.Function(m, "fill_dsa")
		return err
	})
}

// Free releases b's device memory.
func (b *QuantBatch) Free(e *Env) {
	e.Dev.Do(func(x *cuda.Ctx) error {
		for _, p := range b.Buffers {
			x.Free(p.Ptr)
		}
		for _, p := range b.KVCopies {
			x.Free(p.Ptr)
		}
		return nil
	})
}

// Tensors returns the bindings of layer i in the order of specs.
func (b *QuantBatch) Tensors(specs []core.TensorSpec, i int) ([]cudaexec.Buffer, error) {
	out := make([]cudaexec.Buffer, len(specs))
	for j, s := range specs {
		if s.Name == "kv_cache" {
			out[j] = b.KVCopies[i%len(b.KVCopies)]
			continue
		}
		buf, ok := b.Buffers[s.Name]
		if !ok {
			return nil, fmt.Errorf("the plan binds a tensor %q the case does not have", s.Name)
		}
		out[j] = buf
	}
	return out, nil
}

// PrepareQuant plans b's case and prepares the plan.
func (e *Env) PrepareQuant(b *QuantBatch) (*cudaexec.Prepared, error) {
	p, err := devkernels.Plan(b.Case.Kernel(), &b.Req)
	if err != nil {
		return nil, err
	}
	return e.Exec.Prepare(&b.Req, p)
}

// e4m3 is the value of an e4m3 byte (no NaN: the fills saturate).
func e4m3(v byte) float64 {
	s := 1.0
	if v&0x80 != 0 {
		s = -1
	}
	ex, m := int(v>>3)&15, float64(v&7)
	if ex == 0 {
		return s * m / 8 * math.Ldexp(1, -6)
	}
	return s * (1 + m/8) * math.Ldexp(1, ex-7)
}

// keyRow is the dequantised key of one cache slot: 576 values, the first
// 512 the value row.
func (b *QuantBatch) keyRow(cache []byte, slot int64) []float64 {
	row := make([]float64, 576)
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

// VerifyQuant downloads the outputs (computed from cache copy layer) and
// compares up to maxRows random rows with the fp64 reference over the
// dequantised cache: the keys each token's top-k names (or, dense, every
// key it sees).
func (e *Env) VerifyQuant(b *QuantBatch, layer, maxRows int) (Check, error) {
	c := b.Case
	h := int64(c.Heads)
	out := make([]uint16, b.Tokens*h*512)
	lse := make([]float32, b.Tokens*h)
	kv := b.KVCopies[layer%len(b.KVCopies)]
	cache := make([]byte, kv.Bytes)
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		if err := x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*2), b.Buffers["out"].Ptr); err != nil {
			return err
		}
		if err := x.CopyOut(cache, kv.Ptr); err != nil {
			return err
		}
		return x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&lse[0])), len(lse)*4), b.Buffers["lse"].Ptr)
	})
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
		q := make([]float64, 576)
		for d := range q {
			q[d] = hashValue(b.qSeed, (tok*h+head)*576+int64(d))
		}
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
		want, wantLSE := attendRows(q, slots, func(s int64) []float64 { return b.keyRow(cache, s) })
		return rowRef{out: int64(g) * 512, lse: int64(g), want: want, wantLSE: wantLSE}
	}), nil
}

// attendRows is one row of absorbed MLA in float64 over the given keys.
func attendRows(q []float64, slots []int64, key func(int64) []float64) ([]float64, float64) {
	s := make([]float64, len(slots))
	mx := math.Inf(-1)
	keys := make([][]float64, len(slots))
	for j, sl := range slots {
		keys[j] = key(sl)
		var dot float64
		for d := range 576 {
			dot += q[d] * keys[j][d]
		}
		s[j] = dot * Scale
		mx = math.Max(mx, s[j])
	}
	out := make([]float64, 512)
	var sum float64
	for j := range slots {
		p := math.Exp(s[j] - mx)
		sum += p
		for d := range 512 {
			out[d] += p * keys[j][d]
		}
	}
	for d := range out {
		out[d] /= sum
	}
	return out, mx + math.Log(sum)
}

// PoisonQuant fills b's outputs with NaN and waits.
func (b *QuantBatch) PoisonQuant(x *cuda.Ctx) error {
	return poison(x, b.Buffers["out"], b.Buffers["lse"])
}

// LaunchQuant poisons b's outputs and launches p once on the first cache
// copy.
func (e *Env) LaunchQuant(b *QuantBatch, p *cudaexec.Prepared) error {
	return e.Dev.Do(func(x *cuda.Ctx) error {
		if err := b.PoisonQuant(x); err != nil {
			return err
		}
		ts, err := b.Tensors(p.Tensors(), 0)
		if err != nil {
			return err
		}
		return p.Launch(x, e.stream, ts)
	})
}

// TimeQuant captures iters launches of p (rotating over the cache copies)
// in a graph, replays it reps times after a warm-up and returns the time
// per launch.
func (e *Env) TimeQuant(b *QuantBatch, p *cudaexec.Prepared, iters, reps int) (Timing, error) {
	layers := make([][]cudaexec.Buffer, len(b.KVCopies))
	for i := range layers {
		var err error
		if layers[i], err = b.Tensors(p.Tensors(), i); err != nil {
			return Timing{}, err
		}
	}
	return e.timeLayers(p, layers, iters, reps)
}

// QuantBytes is what one launch of b's case reads at least: the query rows,
// the cached keys it attends to at their stored size (for a sparse case
// only the slots the indices select, once per token), and the outputs
// written.
func (b *QuantBatch) QuantBytes() float64 {
	c := b.Case
	h := float64(c.Heads)
	n := float64(b.Tokens) * h * (576*2 + 512*2 + 4)
	if c.TopK > 0 {
		for _, s := range b.TopK {
			if s >= 0 {
				n += float64(b.rowBytes)
			}
		}
		return n
	}
	for _, l := range c.SeqLens {
		n += float64(l) * float64(b.rowBytes)
	}
	return n
}

// QuantFLOPs is the work of b's case: 2 * heads * (576 + 512) per (query
// token, key) pair attended (the selected keys for a sparse case).
func (b *QuantBatch) QuantFLOPs() float64 {
	c := b.Case
	var pairs float64
	if c.TopK > 0 {
		for _, s := range b.TopK {
			if s >= 0 {
				pairs++
			}
		}
	} else {
		for i, l := range c.SeqLens {
			q := float64(c.QLens[i])
			pairs += q*float64(l) - q*(q-1)/2
		}
	}
	return 2 * float64(c.Heads) * (576 + 512) * pairs
}

// QuantResult is one row of the sparse and FP8 benchmark. Bytes count the
// query rows, the cached keys the kernel must read at their stored size
// (for a sparse row only the slots the indices select, once per query
// token; 656 bytes for DeepSeek-V3.2's FP8 tokens, 576 for a dense FP8
// cache, 1152 in bf16) and the outputs; FLOPs count 2 x heads x (576 +
// 512) per (query token, key attended).
type QuantResult struct {
	Name   string  `json:"name"`
	Heads  int     `json:"heads"`
	Batch  int     `json:"batch"`
	Tokens int64   `json:"query_tokens"`
	TopK   int     `json:"top_k"`
	KV     string  `json:"kv_cache"`
	Cached string  `json:"cached"`
	Plan   string  `json:"plan"`
	US     float64 `json:"us"`
	Spread float64 `json:"spread"`
	Bytes  float64 `json:"bytes"`
	FLOPs  float64 `json:"flops"`
	TBs    float64 `json:"tb_s"`
	TFLOPs float64 `json:"tflop_s"`
	// OfCopy and OfMatmul are TBs and TFLOPs over the floors.
	OfCopy   float64 `json:"of_copy_bandwidth"`
	OfMatmul float64 `json:"of_matmul_peak"`
	// BF16US is the same shape over a bf16 cache (dense FP8 rows), VsBF16
	// BF16US over US.
	BF16US float64 `json:"bf16_us,omitempty"`
	VsBF16 float64 `json:"speedup_vs_bf16,omitempty"`
	Check  string  `json:"check"`
	Error  string  `json:"error,omitempty"`
}

// QuantShapes are the sparse and FP8 benchmark's shapes whose names contain
// only: DeepSeek-V3.2's sparse decode (top-2048 of 16k cached tokens, 16
// and 128 heads, batch 1 to 128, bf16 and FP8 caches), the dense decode
// over an FP8 cache (8k cached, timed against the bf16 cache too), and the
// sparse prefill (1k and 4k new tokens, 128 heads).
func QuantShapes(only string) []QuantCase {
	rep := func(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }
	var cs []QuantCase
	for _, fp8 := range []bool{false, true} {
		kv := "bf16"
		if fp8 {
			kv = "fp8"
		}
		for _, h := range []int{16, 128} {
			for _, b := range []int{1, 16, 64, 128} {
				cs = append(cs, QuantCase{Name: fmt.Sprintf("sparse %s h%d b%d", kv, h, b), Heads: h, PageSize: 64,
					SeqLens: rep(b, 16384), QLens: rep(b, 1), TopK: 2048, FP8: fp8, Seed: 21, Graph: true})
			}
		}
	}
	for _, c := range []struct{ h, b int }{{16, 16}, {16, 64}, {16, 128}, {128, 64}} {
		cs = append(cs, QuantCase{Name: fmt.Sprintf("fp8 decode h%d b%d", c.h, c.b), Heads: c.h, PageSize: 64,
			SeqLens: rep(c.b, 8192), QLens: rep(c.b, 1), FP8: true, Seed: 22, Graph: true})
	}
	for _, n := range []int64{1024, 4096} {
		cs = append(cs, QuantCase{Name: fmt.Sprintf("sparse prefill %dk", n/1024), Heads: 128, PageSize: 64,
			SeqLens: []int64{8192}, QLens: []int64{n}, TopK: 2048, Seed: 23})
	}
	out := cs[:0]
	for _, c := range cs {
		if strings.Contains(c.Name, only) {
			out = append(out, c)
		}
	}
	return out
}

// BenchQuant checks (8 sampled rows against the float64 reference) and
// times every case in captured graphs, against the floors f.
func (e *Env) BenchQuant(cases []QuantCase, f Floors) []QuantResult {
	out := make([]QuantResult, 0, len(cases))
	for _, c := range cases {
		r := QuantResult{Name: c.Name, Heads: c.Heads, Batch: len(c.SeqLens), TopK: c.TopK, KV: "bf16",
			Cached: fmt.Sprintf("%d", slices.Max(c.SeqLens))}
		if c.FP8 {
			r.KV = "fp8_e4m3"
		}
		us, b, err := e.timeQuant(c, &r)
		if err == nil && c.FP8 && c.TopK == 0 {
			twin := c
			twin.FP8 = false
			var tr QuantResult
			if r.BF16US, _, err = e.timeQuant(twin, &tr); err == nil && us > 0 {
				r.VsBF16 = r.BF16US / us
			}
		}
		if err != nil {
			r.Error = err.Error()
			out = append(out, r)
			continue
		}
		r.US, r.Tokens, r.Bytes, r.FLOPs = us, b.Tokens, b.QuantBytes(), b.QuantFLOPs()
		r.TBs, r.TFLOPs = r.Bytes/us/1e6, r.FLOPs/us/1e6
		if f.CopyTBs > 0 {
			r.OfCopy = r.TBs / f.CopyTBs
		}
		if f.MatmulTFLOPs > 0 {
			r.OfMatmul = r.TFLOPs / f.MatmulTFLOPs
		}
		out = append(out, r)
	}
	return out
}

// timeQuant allocates c (two cache copies, as layers), plans it, checks
// one launch and times it; it fills r's plan, spread and check.
func (e *Env) timeQuant(c QuantCase, r *QuantResult) (float64, *QuantBatch, error) {
	b, err := e.AllocQuant(c, 2)
	if err != nil {
		return 0, nil, err
	}
	defer b.Free(e)
	p, err := e.PrepareQuant(b)
	if err != nil {
		return 0, nil, err
	}
	defer p.Close()
	r.Plan = p.Plan().Note
	if err := e.LaunchQuant(b, p); err != nil {
		return 0, nil, err
	}
	ch, err := e.VerifyQuant(b, 0, 8)
	if err != nil {
		return 0, nil, err
	}
	r.Check = ch.String()
	if !ch.OK() {
		return 0, nil, fmt.Errorf("%w: %s", ErrCheckFailed, ch)
	}
	t, err := e.TimeQuant(b, p, 20, 7)
	if err != nil {
		return 0, nil, err
	}
	r.Spread = t.Spread
	return t.Median, b, nil
}

// writeQuant writes the sparse and FP8 rows of rep for people.
func (rep *Report) writeQuant(w io.Writer) {
	if len(rep.Quant) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsparse MLA (top-k) and FP8 caches (576/512, page 64; bytes: the keys attended at their stored size)\n")
	fmt.Fprintf(w, "%-24s %5s %5s %6s %-9s %9s %7s %8s %7s %8s %9s %8s\n", "shape", "heads", "batch", "top_k", "cache", "us", "TB/s", "TFLOP/s", "%copy", "%matmul", "bf16 us", "vs bf16")
	for _, r := range rep.Quant {
		if r.Error != "" {
			fmt.Fprintf(w, "%-24s %5d %5d %6d %-9s  not reported: %s\n", r.Name, r.Heads, r.Batch, r.TopK, r.KV, r.Error)
			continue
		}
		twin := fmt.Sprintf("%9s %8s", "-", "-")
		if r.BF16US > 0 {
			twin = fmt.Sprintf("%9.1f %7.2fx", r.BF16US, r.VsBF16)
		}
		fmt.Fprintf(w, "%-24s %5d %5d %6d %-9s %9.1f %7.2f %8.1f %6.0f%% %7.0f%% %s\n", r.Name, r.Heads, r.Batch, r.TopK, r.KV,
			r.US, r.TBs, r.TFLOPs, 100*r.OfCopy, 100*r.OfMatmul, twin)
	}
}
