package devicehost

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Env is a Host with what checks its kernels: kernels that fill tensors
// from a hash of their index on the device, and a stream of its own. Dev
// and Exec are the Host's device and executor.
type Env struct {
	Host    *Host
	Dev     *cuda.Device
	Exec    *cudaexec.Executor
	Modules []core.KernelModule
	fillMod cuda.Module
	fill    cuda.Function
	advance cuda.Function
	stream  cuda.Stream
	// The FP8 cache fills (sparse.go), loaded at first use.
	quantMod          cuda.Module
	fillE4M3, fillDSA cuda.Function
}

// Open opens CUDA device 0, compiles the device kernels of package
// devkernels for it in this process and loads them: the kernels
// themselves, with no plugin (attnplug bench --gpu, the GPU tests). The
// error wraps cuda.ErrUnavailable on a machine without a GPU and
// core.ErrNoPlan when no NVRTC is found.
func Open() (*Env, error) {
	e, err := OpenDevice()
	if err != nil {
		return nil, err
	}
	var b devkernels.Builder
	mods, err := b.Modules(e.Exec.Device())
	if err == nil {
		err = e.Load(mods)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// OpenDevice opens CUDA device 0 with no kernel modules loaded and no
// Source: the caller loads the modules it has (Load).
func OpenDevice() (*Env, error) { return OpenWith(nil) }

// OpenWith opens CUDA device 0 as a Host whose modules and plans come
// from src (Host.Plan), as attnplug run --device cuda does with its
// registry.
func OpenWith(src Source) (*Env, error) {
	h, err := OpenHost(src)
	if err != nil {
		return nil, err
	}
	e := &Env{Host: h, Dev: h.CUDA(), Exec: h.Executor()}
	if err := e.loadFill(); err != nil {
		h.Close()
		if errors.Is(err, cuda.ErrNoNVRTC) {
			err = fmt.Errorf("%w: %w", core.ErrNoPlan, err)
		}
		return nil, err
	}
	return e, nil
}

// Load loads modules into the executor (each name once, pinned by hash).
func (e *Env) Load(mods []core.KernelModule) error {
	if err := e.Exec.Load(mods); err != nil {
		return err
	}
	for _, m := range mods {
		if !slices.ContainsFunc(e.Modules, func(x core.KernelModule) bool { return x.Name == m.Name }) {
			e.Modules = append(e.Modules, m)
		}
	}
	return nil
}

func (e *Env) loadFill() error {
	info := e.Dev.Info()
	ptx, err := cuda.CompilePTX(fillSource, "fill.cu", fmt.Sprintf("--gpu-architecture=compute_%d%d", info.Major, info.Minor))
	if err != nil {
		return err
	}
	return e.Dev.Do(func(c *cuda.Ctx) error {
		m, err := c.LoadModule([]byte(ptx))
		if err != nil {
			return err
		}
		e.fillMod = m
		if e.fill, err = c.Function(m, "fill_bf16"); err != nil {
			return err
		}
		if e.advance, err = c.Function(m, "advance_i32"); err != nil {
			return err
		}
		e.stream, err = c.NewStream()
		return err
	})
}

// Close releases the device.
func (e *Env) Close() error {
	e.Dev.Do(func(c *cuda.Ctx) error {
		if e.stream != 0 {
			c.DestroyStream(e.stream)
		}
		if e.quantMod != 0 {
			c.UnloadModule(e.quantMod)
		}
		if e.fillMod != 0 {
			return c.UnloadModule(e.fillMod)
		}
		return nil
	})
	return e.Host.Close()
}

// Stream is the Env's stream.
func (e *Env) Stream() cuda.Stream { return e.stream }

// Fill writes n hashed bf16 values of seed at p (on the Env's stream).
func (e *Env) Fill(c *cuda.Ctx, p uint64, n int64, seed uint64) error {
	return e.launchArgs(c, e.fill, uint32(min((n+255)/256, 4096)), p, uint64(n), seed)
}

// launchArgs launches f over blocks blocks of 256 threads on the Env's
// stream, each argument in an 8-byte slot (an f32 in its low bytes).
func (e *Env) launchArgs(x *cuda.Ctx, f cuda.Function, blocks uint32, args ...uint64) error {
	ptrs := make([]unsafe.Pointer, len(args))
	for i := range args {
		ptrs[i] = unsafe.Pointer(&args[i])
	}
	var pin runtime.Pinner
	pin.Pin(&args[0])
	pin.Pin(&ptrs[0])
	defer pin.Unpin()
	return x.Launch(f, [3]uint32{blocks, 1, 1}, [3]uint32{256, 1, 1}, 0, e.stream, &ptrs[0])
}

// Case is one MLA decode batch.
type Case struct {
	Name     string
	Heads    int
	PageSize int
	SeqLens  []int64
	QLens    []int64
	Seed     uint64
	Graph    bool
	// MaxSeqLen, with Graph, declares the bound of the lengths: the plan
	// then holds for the batch size and schedules on the device, and the
	// page table gives each request room for MaxSeqLen keys.
	MaxSeqLen int64
	// Kernel is the catalog kernel planned (default flash_attn_with_kvcache).
	Kernel string
}

// Scale is the softmax scale of the cases (DeepSeek-V3's, 1/sqrt(192)
// times its YaRN mscale squared).
const Scale = 0.1352337788608801

// Batch is a case's tensors on the device.
type Batch struct {
	Case     Case
	Req      core.PlanRequest
	Tokens   int64
	Pages    []int32 // kv_indices
	Indptr   []int32
	NumPages int
	// Q, KV (Copies caches), Indptr, Indices, SeqLens, QOIndptr, Out, LSE.
	Q, Indp, Ind, Seq, QO, Out, LSE cudaexec.Buffer
	KV                              []cudaexec.Buffer
	qSeed, kvSeed                   uint64
}

// Request returns the plan request of c on dev.
func (c Case) Request(dev core.DeviceInfo, numPages int) core.PlanRequest {
	return core.PlanRequest{
		Backend: "fa3", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: c.Heads, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: Scale},
		Shape:  core.PlanShape{SeqLens: c.SeqLens, QLens: c.QLens, PageSize: c.PageSize, NumPages: numPages, MaxSeqLen: c.MaxSeqLen},
		Device: dev, Graph: c.Graph,
	}
}

// Alloc puts c's tensors on the device: copies KV caches of the same
// shape (distinct layers), pages shuffled.
func (e *Env) Alloc(c Case, copies int) (*Batch, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 7))
	b := &Batch{Case: c, qSeed: c.Seed*2 + 1, kvSeed: c.Seed*2 + 2}
	b.Indptr = []int32{0}
	var need int
	qo := []int32{0}
	for i, n := range c.SeqLens {
		b.Tokens += c.QLens[i]
		if c.Graph && c.MaxSeqLen > 0 {
			n = c.MaxSeqLen // room for every step's keys
		}
		need += int((n + int64(c.PageSize) - 1) / int64(c.PageSize))
		b.Indptr = append(b.Indptr, int32(need))
		qo = append(qo, int32(b.Tokens))
	}
	seq := make([]int32, len(c.SeqLens))
	for i, n := range c.SeqLens {
		seq[i] = int32(n)
	}
	b.NumPages = need + 3
	perm := rng.Perm(b.NumPages)
	b.Pages = make([]int32, need)
	for i := range b.Pages {
		b.Pages[i] = int32(perm[i])
	}
	b.Req = c.Request(e.Exec.Device(), b.NumPages)
	h := int64(c.Heads)
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		alloc := func(n int64) (cudaexec.Buffer, error) {
			p, err := x.Alloc(n)
			return cudaexec.Buffer{Ptr: p, Bytes: n}, err
		}
		var err error
		if b.Q, err = alloc(b.Tokens * h * 576 * 2); err != nil {
			return err
		}
		if err := e.Fill(x, b.Q.Ptr, b.Tokens*h*576, b.qSeed); err != nil {
			return err
		}
		kvElems := int64(b.NumPages) * int64(c.PageSize) * 576
		for i := 0; i < copies; i++ {
			kv, err := alloc(kvElems * 2)
			if err != nil {
				return err
			}
			b.KV = append(b.KV, kv)
			if err := e.Fill(x, kv.Ptr, kvElems, b.kvSeed+uint64(i)*0x1000193); err != nil {
				return err
			}
		}
		if b.Indp, err = alloc(int64(4 * len(b.Indptr))); err != nil {
			return err
		}
		if err := x.CopyIn(b.Indp.Ptr, i32bytes(b.Indptr)); err != nil {
			return err
		}
		if b.Ind, err = alloc(int64(4 * max(len(b.Pages), 1))); err != nil {
			return err
		}
		if err := x.CopyIn(b.Ind.Ptr, i32bytes(b.Pages)); err != nil {
			return err
		}
		if b.Seq, err = alloc(int64(4 * len(seq))); err != nil {
			return err
		}
		if err := x.CopyIn(b.Seq.Ptr, i32bytes(seq)); err != nil {
			return err
		}
		if b.QO, err = alloc(int64(4 * len(qo))); err != nil {
			return err
		}
		if err := x.CopyIn(b.QO.Ptr, i32bytes(qo)); err != nil {
			return err
		}
		if b.Out, err = alloc(b.Tokens * h * 512 * 2); err != nil {
			return err
		}
		if b.LSE, err = alloc(b.Tokens * h * 4); err != nil {
			return err
		}
		return x.SyncStream(e.stream)
	})
	if err != nil {
		b.Free(e)
		return nil, err
	}
	return b, nil
}

// Free releases the batch's device memory.
func (b *Batch) Free(e *Env) {
	e.Dev.Do(func(x *cuda.Ctx) error {
		for _, p := range append([]cudaexec.Buffer{b.Q, b.Indp, b.Ind, b.Seq, b.QO, b.Out, b.LSE}, b.KV...) {
			if p.Ptr != 0 {
				x.Free(p.Ptr)
			}
		}
		return nil
	})
}

// Tensors returns the bindings of layer (KV copy) i, in launch.Tensors'
// order.
func (b *Batch) Tensors(i int) []cudaexec.Buffer {
	return []cudaexec.Buffer{b.Q, b.KV[i%len(b.KV)], b.Indp, b.Ind, b.Seq, b.QO, b.Out, b.LSE}
}

// TensorsFor returns the bindings of layer i in the order of specs (a
// plan's tensors, by name), whatever order the plan lists them in.
func (b *Batch) TensorsFor(specs []core.TensorSpec, i int) ([]cudaexec.Buffer, error) {
	by := map[string]cudaexec.Buffer{"q": b.Q, "kv_cache": b.KV[i%len(b.KV)], "kv_indptr": b.Indp, "kv_indices": b.Ind,
		"seq_lens": b.Seq, "qo_indptr": b.QO, "out": b.Out, "lse": b.LSE}
	out := make([]cudaexec.Buffer, len(specs))
	for j, t := range specs {
		buf, ok := by[t.Name]
		if !ok {
			return nil, fmt.Errorf("the plan binds a tensor %q the MLA layout does not have", t.Name)
		}
		out[j] = buf
	}
	return out, nil
}

// Advance queues, on the Env's stream, a kernel that adds one to every
// request's entry of seq_lens on the device: a decode step's new token,
// with no copy from the host (it can be captured in a step's graph). The
// host's copy, b.Case.SeqLens, is the caller's to keep in step.
func (e *Env) Advance(x *cuda.Ctx, b *Batch) error {
	return e.launchArgs(x, e.advance, uint32((len(b.Case.SeqLens)+255)/256), b.Seq.Ptr, uint64(len(b.Case.SeqLens)))
}

// Poison fills the outputs with NaN and waits for the fill, which runs on
// the legacy stream (unordered with the Env's non-blocking one).
func (b *Batch) Poison(x *cuda.Ctx) error { return poison(x, b.Out, b.LSE) }

// poison fills a bf16 output and an f32 LSE with NaN and waits for the
// fill.
func poison(x *cuda.Ctx, out, lse cudaexec.Buffer) error {
	if err := x.Fill16(out.Ptr, 0x7fc0, out.Bytes/2); err != nil {
		return err
	}
	if err := x.Fill32(lse.Ptr, 0x7fc00000, lse.Bytes/4); err != nil {
		return err
	}
	return x.Synchronize()
}

// Check is a comparison with the fp64 reference.
type Check struct {
	// Rows is how many (token, head) rows were compared.
	Rows int
	// RelErr is ||out-ref|| / ||ref|| over those rows.
	RelErr float64
	// LSEErr is the largest |lse-ref| / max(1, |ref|).
	LSEErr float64
	// Unwritten counts output elements still NaN (poison) anywhere.
	Unwritten int
}

// Tolerances of Check: bf16 inputs and output, P rounded to bf16.
const (
	MaxRelErr = 1e-2
	MaxLSEErr = 1e-3
)

// OK reports whether ch is within the tolerances.
func (ch Check) OK() bool {
	return ch.Unwritten == 0 && ch.RelErr <= MaxRelErr && ch.LSEErr <= MaxLSEErr && !math.IsNaN(ch.RelErr)
}

func (ch Check) String() string {
	return fmt.Sprintf("rows %d rel_err %.2e lse_err %.2e unwritten %d", ch.Rows, ch.RelErr, ch.LSEErr, ch.Unwritten)
}

// Verify downloads the outputs (computed from KV copy layer) and compares
// up to maxRows random rows with the fp64 reference.
func (e *Env) Verify(b *Batch, layer, maxRows int) (Check, error) {
	c := b.Case
	h := int64(c.Heads)
	out := make([]uint16, b.Tokens*h*512)
	lse := make([]float32, b.Tokens*h)
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		if err := x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(out)*2), b.Out.Ptr); err != nil {
			return err
		}
		return x.CopyOut(unsafe.Slice((*byte)(unsafe.Pointer(&lse[0])), len(lse)*4), b.LSE.Ptr)
	})
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
		q := make([]float64, 576)
		base := (tok*h + int64(r.head)) * 576
		for d := range q {
			q[d] = hashValue(b.qSeed, base+int64(d))
		}
		limit := c.SeqLens[r.req] - c.QLens[r.req] + int64(r.t) // last key seen
		want, wantLSE := reference(q, limit+1, c.PageSize, b.Pages[b.Indptr[r.req]:b.Indptr[r.req+1]], kvSeed)
		return rowRef{out: (tok*h + int64(r.head)) * 512, lse: tok*h + int64(r.head), want: want, wantLSE: wantLSE}
	}), nil
}

// rowRef is the float64 reference of one sampled output row: where the
// row and its LSE are in the outputs, and what they should be.
type rowRef struct {
	out, lse int64
	want     []float64
	wantLSE  float64
}

// compareRows checks n sampled rows, whose references ref computes (called
// concurrently), and counts the poison left anywhere in out and lse.
func compareRows(out []uint16, lse []float32, n int, ref func(k int) rowRef) Check {
	var ch Check
	for _, v := range out {
		if v&0x7f80 == 0x7f80 && v&0x7f != 0 {
			ch.Unwritten++
		}
	}
	for _, v := range lse {
		if math.IsNaN(float64(v)) {
			ch.Unwritten++
		}
	}
	num := make([]float64, n)
	den := make([]float64, n)
	lerr := make([]float64, n)
	Parallel(n, func(k int) {
		r := ref(k)
		for d, w := range r.want {
			diff := BF16(out[r.out+int64(d)]) - w
			num[k] += diff * diff
			den[k] += w * w
		}
		got := float64(lse[r.lse])
		lerr[k] = math.Abs(got-r.wantLSE) / math.Max(1, math.Abs(r.wantLSE))
		if math.IsNaN(got) {
			lerr[k] = math.Inf(1)
		}
	})
	var sn, sd float64
	for k := range n {
		sn += num[k]
		sd += den[k]
		ch.LSEErr = math.Max(ch.LSEErr, lerr[k])
	}
	ch.Rows = n
	ch.RelErr = math.Sqrt(sn / sd)
	return ch
}

// parallel runs f(0), ..., f(n-1) on every CPU.
func Parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// reference is one row of absorbed MLA in float64: softmax(scale q·k) v
// over the first n keys of the request whose pages are pages.
func reference(q []float64, n int64, pageSize int, pages []int32, kvSeed uint64) ([]float64, float64) {
	s := make([]float64, n)
	mx := math.Inf(-1)
	row := func(j int64) int64 {
		return int64(pages[j/int64(pageSize)])*int64(pageSize) + j%int64(pageSize)
	}
	for j := range n {
		base := row(j) * 576
		var dot float64
		for d := range 576 {
			dot += q[d] * hashValue(kvSeed, base+int64(d))
		}
		s[j] = dot * Scale
		mx = math.Max(mx, s[j])
	}
	var sum float64
	out := make([]float64, 512)
	for j := range n {
		p := math.Exp(s[j] - mx)
		sum += p
		base := row(j) * 576
		for d := range 512 {
			out[d] += p * hashValue(kvSeed, base+int64(d))
		}
	}
	for d := range out {
		out[d] /= sum
	}
	return out, mx + math.Log(sum)
}

func i32bytes(v []int32) []byte {
	if len(v) == 0 {
		return []byte{0, 0, 0, 0}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// Kernel returns the catalog entry a case plans: an MLA kernel of the
// fa3 or flashinfer catalogs.
func (c Case) CatalogKernel() core.Kernel {
	name := c.Kernel
	if name == "" {
		name = "flash_attn_with_kvcache"
	}
	ps := map[string][]int{"flash_attn_with_kvcache": {1, 16, 64}, "BatchMLAPagedAttentionWrapper": {1}, "flash_mla_with_kvcache": {64}}[name]
	return core.Kernel{Name: name, Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512}, PageSizes: ps}
}

// Prepare plans b and prepares the plan.
func (e *Env) Prepare(b *Batch) (*cudaexec.Prepared, error) {
	p, err := devkernels.Plan(b.Case.CatalogKernel(), &b.Req)
	if err != nil {
		return nil, err
	}
	return e.Exec.Prepare(&b.Req, p)
}

// Timing is a kernel's time per launch.
type Timing struct {
	// Median is the median over the repetitions, in microseconds.
	Median float64
	// Spread is (max-min)/median over the repetitions.
	Spread float64
}

// Time captures iters launches (rotating over the batch's KV copies, as
// the layers of a forward pass do) in a CUDA graph, as a serving host runs
// a decode step, replays it reps times after a warm-up and returns the time
// per launch: the device's time, not the host's launch rate.
func (e *Env) Time(b *Batch, p *cudaexec.Prepared, iters, reps int) (Timing, error) {
	layers := make([][]cudaexec.Buffer, len(b.KV))
	for i := range layers {
		layers[i] = b.Tensors(i)
	}
	return e.timeLayers(p, layers, iters, reps)
}

// timeLayers captures iters launches of p, rotating over layers (each a
// layer's tensors), in a CUDA graph, replays it reps times after a warm-up
// and returns the time per launch. A plan with a scheduler (PerBatch
// launches) runs it once, before the capture: the graph times the layers'
// launches alone.
func (e *Env) timeLayers(p *cudaexec.Prepared, layers [][]cudaexec.Buffer, iters, reps int) (Timing, error) {
	var ts []float64
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		if err := p.LaunchBatch(x, e.stream, layers[0]); err != nil {
			return err
		}
		g, err := x.Capture(e.stream, func() error {
			for i := range iters {
				if err := p.LaunchLayer(x, e.stream, layers[i%len(layers)]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer x.DestroyGraph(g)
		ts, err = e.repeat(x, reps, float64(iters), func() error { return x.LaunchGraph(g, e.stream) })
		return err
	})
	if err != nil {
		return Timing{}, err
	}
	return median(ts), nil
}

// repeat times f (work queued on the Env's stream) once to warm up and
// then reps times, and returns each time in microseconds over per.
func (e *Env) repeat(x *cuda.Ctx, reps int, per float64, f func() error) ([]float64, error) {
	var ts []float64
	for r := -1; r < reps; r++ {
		ms, err := e.timeOnce(x, f)
		if err != nil {
			return nil, err
		}
		if r >= 0 {
			ts = append(ts, ms*1000/per)
		}
	}
	return ts, nil
}

// StepTime captures a decode step of layers layers as a serving host runs
// it, the plan's PerBatch launches (the scheduler) once and then every
// layer's launches (rotating over the batch's KV copies), replays it reps
// times after a warm-up, and returns the time of a step in microseconds.
func (e *Env) StepTime(b *Batch, p *cudaexec.Prepared, layers, reps int) (Timing, error) {
	var ts []float64
	err := e.Dev.Do(func(x *cuda.Ctx) error {
		g, err := x.Capture(e.stream, func() error {
			if err := p.LaunchBatch(x, e.stream, b.Tensors(0)); err != nil {
				return err
			}
			for l := range layers {
				if err := p.LaunchLayer(x, e.stream, b.Tensors(l)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer x.DestroyGraph(g)
		ts, err = e.repeat(x, reps, 1, func() error { return x.LaunchGraph(g, e.stream) })
		return err
	})
	if err != nil {
		return Timing{}, err
	}
	return median(ts), nil
}

// ErrCheckFailed marks a case whose outputs are outside the tolerances.
var ErrCheckFailed = errors.New("outputs differ from the fp64 reference")

// Describe returns a short description of c.
func (c Case) Describe() string {
	lo, hi := slices.Min(c.SeqLens), slices.Max(c.SeqLens)
	return fmt.Sprintf("heads %d page %d batch %d qlen %d seq %d..%d graph %t", c.Heads, c.PageSize, len(c.SeqLens), c.QLens[0], lo, hi, c.Graph)
}

// Launch poisons b's outputs and launches p once on layer 0's tensors.
func (e *Env) Launch(b *Batch, p *cudaexec.Prepared) error {
	return e.Dev.Do(func(x *cuda.Ctx) error {
		if err := b.Poison(x); err != nil {
			return err
		}
		return p.Launch(x, e.stream, b.Tensors(0))
	})
}
