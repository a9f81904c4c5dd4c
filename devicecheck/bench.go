package devicecheck

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
)

// Floors are the device's ceilings, measured in the run that uses them.
type Floors struct {
	Device string `json:"device"`
	// CopyTBs is a device-to-device copy's bandwidth, bytes read plus
	// written, in TB/s.
	CopyTBs float64 `json:"copy_tb_s"`
	// MatmulTFLOPs is the bf16 matrix product rate (8192^3, random data)
	// through cuBLAS, in TFLOP/s; 0 when cuBLAS is missing.
	MatmulTFLOPs float64 `json:"matmul_tflop_s"`
	// MatmulLibrary is the cuBLAS library used, or why none was.
	MatmulLibrary string `json:"matmul_library"`
}

// MeasureFloors measures the copy bandwidth and the bf16 matrix peak.
func (e *Env) MeasureFloors() (Floors, error) {
	f := Floors{Device: e.Device().Name}
	err := e.Do(func(x *cuda.Ctx) error {
		const n = 2 << 30
		src, err := x.Alloc(n)
		if err != nil {
			return err
		}
		defer x.Free(src)
		dst, err := x.Alloc(n)
		if err != nil {
			return err
		}
		defer x.Free(dst)
		if err := e.Fill(x, src, n/2, 99); err != nil {
			return err
		}
		best := math.Inf(1)
		for range 6 {
			ms, err := e.timeOnce(x, func() error { return x.CopyAsync(dst, src, n, e.stream) })
			if err != nil {
				return err
			}
			best = math.Min(best, ms)
		}
		f.CopyTBs = 2 * n / (best / 1000) / 1e12

		blas, err := x.NewBLAS(e.stream)
		if err != nil {
			f.MatmulLibrary = err.Error()
			return nil
		}
		defer blas.Close()
		f.MatmulLibrary = blas.Library()
		const d = 8192
		var m [3]uint64
		for i := range m {
			if m[i], err = x.Alloc(d * d * 2); err != nil {
				return err
			}
			defer x.Free(m[i])
			if err := e.Fill(x, m[i], d*d, uint64(100+i)); err != nil {
				return err
			}
		}
		var ts []float64
		for r := range 13 {
			ms, err := e.timeOnce(x, func() error { return blas.GemmBF16(d, d, d, m[0], m[1], m[2]) })
			if err != nil {
				return err
			}
			if r >= 3 {
				ts = append(ts, ms)
			}
		}
		f.MatmulTFLOPs = 2 * d * d * d / (median(ts).Median / 1000) / 1e12
		return nil
	})
	return f, err
}

// BenchConfig is what attnplug bench --gpu runs: the shapes, the backends
// whose plans run them (through the Env's Source), torch and the targets.
type BenchConfig struct {
	// Decode, Prefill and Quant are the shapes (DecodeShapes,
	// PrefillShapes, QuantShapes).
	Decode  []MLA
	Prefill []Prefill
	Quant   []Quant
	// Dense is the backend whose plans run the dense decode, the dense FP8
	// decode and the prefill; Sparse the one whose plans run the sparse
	// rows (DeepSeek sparse attention).
	Dense, Sparse string
	// Python is a python3 with torch, or "" for none.
	Python string
	// Targets are the targets the rows are judged against (LoadTargets);
	// none: no judgement.
	Targets []Target
}

// BenchResult is one decode shape's figures.
type BenchResult struct {
	Name     string  `json:"name"`
	Heads    int     `json:"heads"`
	Batch    int     `json:"batch"`
	QLen     int64   `json:"q_len"`
	Cached   string  `json:"cached"`
	PageSize int     `json:"page_size"`
	Plan     string  `json:"plan"`
	US       float64 `json:"us"`
	Spread   float64 `json:"spread"`
	TBs      float64 `json:"tb_s"`
	TFLOPs   float64 `json:"tflop_s"`
	// OfCopy and OfMatmul are TBs and TFLOPs over the floors.
	OfCopy   float64 `json:"of_copy_bandwidth"`
	OfMatmul float64 `json:"of_matmul_peak"`
	// Floor is the larger of bytes over the copy bandwidth and FLOPs
	// over the matrix peak, in microseconds.
	FloorUS float64 `json:"floor_us"`
	Check   string  `json:"check"`
	// StepUS is a decode step of StepLayers layers, graph-replayed: the
	// plan's scheduler once, then the layers; StepOverUS is how much it
	// takes beyond StepLayers times US, StepRatio StepUS over that.
	StepLayers int     `json:"step_layers,omitempty"`
	StepUS     float64 `json:"step_us,omitempty"`
	StepOverUS float64 `json:"step_over_layers_us,omitempty"`
	StepRatio  float64 `json:"step_vs_layers,omitempty"`
	// TorchUS is torch's bmm-softmax-bmm on the same shapes, when torch
	// ran; 0 otherwise.
	TorchUS float64 `json:"torch_us,omitempty"`
	// VsTorch is TorchUS over US.
	VsTorch float64 `json:"speedup_vs_torch,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// DecodeShapes are the benchmark's DeepSeek-V3 decode shapes: heads 16
// and 128 (per GPU under tensor parallelism 8, and without it), batch 1,
// 16, 64, 128, cached 4096 and 16384 tokens, page size 64, plus a ragged
// batch of each head count, batch 1 and 16 over 4096 cached tokens with
// the queries split as sglang's DeepSeek layers pass them (MLA.Split, the
// rows named _split), and absorbed-MLA extends of 130 to 8192 query
// tokens a request over a cached prefix. Each is planned as a serving loop
// plans it: a graph plan for the batch size (and query lengths) with a
// bound on the lengths, scheduled on the device.
func DecodeShapes() []MLA {
	var cs []MLA
	for _, h := range []int{16, 128} {
		for _, b := range []int{1, 16, 64, 128} {
			for _, s := range []int64{4096, 16384} {
				cs = append(cs, MLA{Name: fmt.Sprintf("h%d_b%d_s%d", h, b, s), Heads: h, PageSize: 64, SeqLens: repeatLen(b, s), QLens: repeatLen(b, 1), Seed: uint64(h*1000 + b + int(s)),
					Graph: true, MaxSeqLen: s})
			}
		}
		// Ragged: 64 requests from 64 to 32k tokens, log-uniform.
		c := MLA{Name: fmt.Sprintf("h%d_ragged64", h), Heads: h, PageSize: 64, Seed: uint64(h), Graph: true}
		for i := range 64 {
			c.SeqLens = append(c.SeqLens, int64(64*math.Pow(512, float64((i*37)%64)/63)))
			c.QLens = append(c.QLens, 1)
		}
		c.MaxSeqLen = slices.Max(c.SeqLens)
		cs = append(cs, c)
		for _, b := range []int{1, 16} {
			cs = append(cs, MLA{Name: fmt.Sprintf("h%d_b%d_s4096_split", h, b), Heads: h, PageSize: 64, SeqLens: repeatLen(b, 4096), QLens: repeatLen(b, 1),
				Seed: uint64(h*1000 + b + 4096), Graph: true, MaxSeqLen: 4096, Split: true})
		}
	}
	// Absorbed-MLA extends over a cached prefix (sglang's MLA for an extend
	// under the chunked-prefix threshold): a prefix-cache hit's short
	// extends, and chunks of a chunked prefill up to its 8192 tokens.
	for _, x := range []struct {
		h, b    int
		q, seen int64
	}{{16, 16, 130, 2048}, {16, 4, 1024, 4096}, {16, 1, 8192, 16384}, {128, 1, 2048, 4096}} {
		cs = append(cs, MLA{Name: fmt.Sprintf("h%d_extend_b%d_q%d", x.h, x.b, x.q), Heads: x.h, PageSize: 64, SeqLens: repeatLen(x.b, x.seen), QLens: repeatLen(x.b, x.q),
			Seed: uint64(x.h + x.b + int(x.q)), Graph: true, MaxSeqLen: x.seen})
	}
	return cs
}

// StepLayers is the layers of the benchmark's decode step: DeepSeek-V3's.
const StepLayers = 61

func repeatLen(n int, v int64) []int64 { return slices.Repeat([]int64{v}, n) }

// benchDecode checks and times c, planned by backend, against the floors.
func (e *Env) benchDecode(ctx context.Context, backend string, c MLA, f Floors) BenchResult {
	var keys int64
	for _, n := range c.SeqLens {
		keys += n
	}
	r := BenchResult{Name: c.Name, Heads: c.Heads, Batch: len(c.SeqLens), QLen: c.QLens[0], PageSize: c.PageSize}
	r.Cached = fmt.Sprint(c.SeqLens[0])
	if c.SeqLens[0] != c.SeqLens[len(c.SeqLens)-1] {
		r.Cached = fmt.Sprintf("ragged, %d in all", keys)
	}
	// Enough KV copies that a pass over them is several times the L2, as
	// the 61 layers of a forward pass are.
	kvBytes := keys * 576 * 2
	copies := int(min(max((512<<20)/max(kvBytes, 1), 1), 61))
	run, err := e.Run(ctx, backend, c, copies, 16)
	if run != nil {
		defer run.Close()
		r.Plan, r.Check = run.Prepared.Plan().Note, run.Check.String()
	}
	if err != nil {
		r.Error = err.Error()
		return r
	}
	t, err := run.Time(max(copies, 20), 9)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.US, r.Spread = t.Median, t.Spread
	if st, err := run.StepTime(StepLayers, 5); err == nil {
		r.StepLayers, r.StepUS = StepLayers, st.Median
		r.StepOverUS = st.Median - StepLayers*r.US
		r.StepRatio = st.Median / (StepLayers * r.US)
	}
	cost := run.Batch.Cost()
	r.TBs = cost.Bytes / (r.US * 1e-6) / 1e12
	r.TFLOPs = cost.FLOPs / (r.US * 1e-6) / 1e12
	r.OfCopy = r.TBs / f.CopyTBs
	if f.MatmulTFLOPs > 0 {
		r.OfMatmul = r.TFLOPs / f.MatmulTFLOPs
		r.FloorUS = math.Max(cost.Bytes/(f.CopyTBs*1e12), cost.FLOPs/(f.MatmulTFLOPs*1e12)) * 1e6
	} else {
		r.FloorUS = cost.Bytes / (f.CopyTBs * 1e12) * 1e6
	}
	return r
}

// Report is the GPU benchmark's result: the floors and torch's figures of
// the same run, and every shape.
type Report struct {
	When    string          `json:"when"`
	Floors  Floors          `json:"floors"`
	Torch   *TorchFigures   `json:"torch,omitempty"`
	NoTorch string          `json:"torch_skipped,omitempty"`
	Decode  []BenchResult   `json:"decode"`
	Prefill []PrefillResult `json:"prefill,omitempty"`
	Merge   *MergeResult    `json:"merge_state,omitempty"`
	// Quant are the sparse MLA and FP8 cache rows.
	Quant []QuantResult `json:"sparse_fp8,omitempty"`
	// Goals are the targets the run's rows are judged against (Judge).
	Goals []Goal `json:"goals,omitempty"`
}

// RunBench measures the floors, checks and times every shape of cfg (the
// plans from the Env's Source: cfg.Dense's and cfg.Sparse's), runs torch's
// figures when cfg.Python runs, and judges the rows against cfg.Targets.
func RunBench(ctx context.Context, e *Env, cfg BenchConfig) (*Report, error) {
	rep := &Report{When: time.Now().UTC().Format(time.RFC3339)}
	var err error
	if rep.Floors, err = e.MeasureFloors(); err != nil {
		return nil, err
	}
	for _, c := range cfg.Decode {
		rep.Decode = append(rep.Decode, e.benchDecode(ctx, cfg.Dense, c, rep.Floors))
	}
	rep.Quant = e.benchQuant(ctx, cfg, rep.Floors)
	if len(cfg.Prefill) > 0 {
		rep.Prefill = e.benchPrefill(ctx, cfg.Dense, cfg.Prefill, rep.Floors)
		m := e.benchMerge(16384*128, rep.Floors)
		rep.Merge = &m
	}
	if cfg.Python != "" {
		rep.addTorch(ctx, cfg)
	}
	rep.Goals = Judge(rep, cfg.Targets)
	return rep, nil
}

// addTorch runs torch's figures of cfg's shapes and puts each beside its
// row, or says why torch did not run.
func (rep *Report) addTorch(ctx context.Context, cfg BenchConfig) {
	tf, err := RunTorch(ctx, cfg.Python, cfg.Decode, cfg.Prefill)
	if err != nil {
		rep.NoTorch = err.Error()
		return
	}
	rep.Torch = tf
	for i := range rep.Decode {
		r := &rep.Decode[i]
		if t := tf.DecodeUS[r.Name]; t > 0 && r.US > 0 {
			r.TorchUS, r.VsTorch = t, t/r.US
		}
	}
	for i := range rep.Prefill {
		r := &rep.Prefill[i]
		if t := tf.PrefillUS[r.Name]; t > 0 && r.US > 0 {
			r.TorchUS, r.VsTorch = t, t/r.US
		}
	}
}

// WriteTable writes rep for people.
func (rep *Report) WriteTable(w io.Writer) {
	f := rep.Floors
	fmt.Fprintf(w, "%s, %s: copy %.2f TB/s, bf16 matmul %.0f TFLOP/s (%s)\n", f.Device, rep.When, f.CopyTBs, f.MatmulTFLOPs, f.MatmulLibrary)
	if rep.Torch != nil {
		fmt.Fprintf(w, "torch %s: copy %.2f TB/s, matmul %.0f TFLOP/s\n", rep.Torch.Torch, rep.Torch.CopyTBs, rep.Torch.MatmulTFLOPs)
	} else if rep.NoTorch != "" {
		fmt.Fprintf(w, "torch: not run: %s\n", rep.NoTorch)
	}
	rep.writeDecode(w)
	rep.writePrefill(w)
	rep.writeQuant(w)
	rep.writeGoals(w)
}

// writeDecode writes the MLA decode rows of rep for people.
func (rep *Report) writeDecode(w io.Writer) {
	if len(rep.Decode) == 0 {
		return
	}
	fmt.Fprintf(w, "\nMLA decode (bf16, 576/512, page 64; graph plans for the batch size, scheduled on the device)\n")
	fmt.Fprintf(w, "%-16s %5s %5s %-20s %9s %7s %8s %7s %8s %9s %9s %8s %11s %9s\n", "shape", "heads", "batch", "cached", "us", "TB/s", "TFLOP/s", "%copy", "%matmul", "floor us", "torch us", "vs torch", "61-layer us", "over 61x")
	for _, r := range rep.Decode {
		if r.Error != "" {
			fmt.Fprintf(w, "%-16s %5d %5d %-20s  not reported: %s\n", r.Name, r.Heads, r.Batch, r.Cached, r.Error)
			continue
		}
		fmt.Fprintf(w, "%-16s %5d %5d %-20s %9.1f %7.2f %8.1f %6.0f%% %7.0f%% %9.1f %9.1f %7.2fx %11.1f %+8.1f%%\n", r.Name, r.Heads, r.Batch, r.Cached,
			r.US, r.TBs, r.TFLOPs, 100*r.OfCopy, 100*r.OfMatmul, r.FloorUS, r.TorchUS, r.VsTorch, r.StepUS, 100*(r.StepRatio-1))
	}
}

// PrefillShapes are the benchmark's prefill shapes: one request of 1k, 4k,
// 8k and 16k new tokens, a ragged batch, and a chunked case (16k of prefix
// in chunks of 4k, plus 2k new tokens), with 128 and 16 heads.
func PrefillShapes() []Prefill {
	var cs []Prefill
	for _, h := range []int{128, 16} {
		for _, n := range []int64{1024, 4096, 8192, 16384} {
			cs = append(cs, Prefill{Name: fmt.Sprintf("h%d_prefill_%dk", h, n/1024), Method: core.MHAOneShot, Heads: h, SeqLens: []int64{n}, QLens: []int64{n}, Seed: uint64(n)})
		}
		rag := []int64{512, 8192, 1024, 3000, 6000, 700, 2048, 4096}
		cs = append(cs, Prefill{Name: fmt.Sprintf("h%d_prefill_ragged", h), Method: core.MHAOneShot, Heads: h, SeqLens: rag, QLens: rag, Seed: 9})
		cs = append(cs, Prefill{Name: fmt.Sprintf("h%d_chunked_16k+2k", h), Method: core.MHAChunkedKV, Heads: h, SeqLens: []int64{18432}, QLens: []int64{2048}, ChunkCapacity: 4096, Seed: 10})
	}
	return cs
}

// PrefillResult is one prefill shape's figures.
type PrefillResult struct {
	Name     string  `json:"name"`
	Method   string  `json:"method"`
	Heads    int     `json:"heads"`
	Plan     string  `json:"plan"`
	US       float64 `json:"us"`
	Spread   float64 `json:"spread"`
	TFLOPs   float64 `json:"tflop_s"`
	OfMatmul float64 `json:"of_matmul_peak"`
	Check    string  `json:"check"`
	TorchUS  float64 `json:"torch_sdpa_us,omitempty"`
	VsTorch  float64 `json:"speedup_vs_torch,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// benchPrefill checks and times every prefill shape, planned by backend.
func (e *Env) benchPrefill(ctx context.Context, backend string, cases []Prefill, f Floors) []PrefillResult {
	var out []PrefillResult
	for _, c := range cases {
		r := PrefillResult{Name: c.Name, Method: c.Method.String(), Heads: c.Heads}
		func() {
			run, err := e.Run(ctx, backend, c, 1, 8)
			if run != nil {
				defer run.Close()
				r.Plan, r.Check = run.Prepared.Plan().Note, run.Check.String()
			}
			if err != nil {
				r.Error = err.Error()
				return
			}
			t, err := run.Time(1, 7)
			if err != nil {
				r.Error = err.Error()
				return
			}
			r.US, r.Spread = t.Median, t.Spread
			r.TFLOPs = c.CausalFLOPs() / (r.US * 1e-6) / 1e12
			if f.MatmulTFLOPs > 0 {
				r.OfMatmul = r.TFLOPs / f.MatmulTFLOPs
			}
		}()
		out = append(out, r)
	}
	return out
}

// MergeResult is merge_state's figures on one size.
type MergeResult struct {
	Rows   int64   `json:"rows"`
	US     float64 `json:"us"`
	TBs    float64 `json:"tb_s"`
	OfCopy float64 `json:"of_copy_bandwidth"`
	Check  string  `json:"check"`
	Error  string  `json:"error,omitempty"`
}

// benchMerge checks merge_state, the prefill module's entry the prefill
// plans loaded, on rows rows of 128 (16k tokens x 128 heads is 2M) against
// the float64 merge, then times it.
func (e *Env) benchMerge(rows int64, f Floors) MergeResult {
	r := MergeResult{Rows: rows}
	var image []byte
	for _, m := range e.Host.Executor().Modules() {
		if m.Name == devkernels.ModuleMHAPrefill {
			image = m.Image
		}
	}
	if image == nil {
		r.Error = "no prefill module was loaded"
		return r
	}
	err := e.Do(func(x *cuda.Ctx) error {
		mod, err := x.LoadModule(image)
		if err != nil {
			return err
		}
		defer x.UnloadModule(mod)
		fn, err := x.Function(mod, devkernels.EntryMergeState)
		if err != nil {
			return err
		}
		var bufs [4]uint64
		sizes := [4]int64{rows * 256, rows * 4, rows * 256, rows * 4}
		for i := range bufs {
			if bufs[i], err = x.Alloc(sizes[i]); err != nil {
				return err
			}
			defer x.Free(bufs[i])
		}
		const lseA, lseB = 1.5, 0.25
		for _, step := range []error{
			e.Fill(x, bufs[0], rows*128, 31), e.Fill(x, bufs[2], rows*128, 32),
			x.Fill32(bufs[1], math.Float32bits(lseA), rows), x.Fill32(bufs[3], math.Float32bits(lseB), rows),
			x.Synchronize(),
		} {
			if step != nil {
				return step
			}
		}
		launch := func() error {
			return e.launchArgs(x, fn, uint32((rows+15)/16), bufs[0], bufs[1], bufs[2], bufs[3], uint64(rows))
		}
		if err := launch(); err != nil {
			return err
		}
		if err := x.SyncStream(e.stream); err != nil {
			return err
		}
		n := min(rows, 4096)
		got := make([]uint16, n*128)
		if err := x.CopyOut(bytesOf(got), bufs[0]); err != nil {
			return err
		}
		gl := make([]float32, n)
		if err := x.CopyOut(bytesOf(gl), bufs[1]); err != nil {
			return err
		}
		wb := math.Exp(lseB - lseA)
		var num, den, lerr float64
		for i := range int64(len(got)) {
			want := (hashValue(31, i) + wb*hashValue(32, i)) / (1 + wb)
			num += (BF16(got[i]) - want) * (BF16(got[i]) - want)
			den += want * want
		}
		for _, v := range gl {
			lerr = math.Max(lerr, math.Abs(float64(v)-(lseA+math.Log1p(wb))))
		}
		ch := Check{Rows: int(n), RelErr: math.Sqrt(num / den), LSEErr: lerr}
		r.Check = ch.String()
		if !ch.OK() {
			return fmt.Errorf("%w: %v", ErrCheckFailed, ch)
		}
		ts, err := e.repeat(x, 15, 1, launch)
		if err != nil {
			return err
		}
		r.US = median(ts).Median
		return nil
	})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.TBs = float64(rows*(3*256+12)) / (r.US * 1e-6) / 1e12
	r.OfCopy = r.TBs / f.CopyTBs
	return r
}

func (rep *Report) writePrefill(w io.Writer) {
	if len(rep.Prefill) > 0 {
		fmt.Fprintf(w, "\nprefill (bf16, q/k 192, v 128, causal; TFLOP/s on the causal work)\n")
		fmt.Fprintf(w, "%-22s %-15s %9s %8s %8s %10s %8s\n", "shape", "method", "us", "TFLOP/s", "%matmul", "sdpa us", "vs sdpa")
		for _, r := range rep.Prefill {
			if r.Error != "" {
				fmt.Fprintf(w, "%-22s %-15s not reported: %s\n", r.Name, r.Method, r.Error)
				continue
			}
			fmt.Fprintf(w, "%-22s %-15s %9.1f %8.1f %7.0f%% %10.1f %7.2fx\n", r.Name, r.Method, r.US, r.TFLOPs, 100*r.OfMatmul, r.TorchUS, r.VsTorch)
		}
	}
	if m := rep.Merge; m != nil {
		if m.Error != "" {
			fmt.Fprintf(w, "merge_state: not reported: %s\n", m.Error)
		} else {
			fmt.Fprintf(w, "merge_state, %d rows of 128: %.1f us, %.2f TB/s, %.0f%% of the copy bandwidth (%s)\n", m.Rows, m.US, m.TBs, 100*m.OfCopy, m.Check)
		}
	}
}

// Shapes returns the decode, prefill and sparse/FP8 shapes of the
// benchmark that only selects (Only; all of them for "").
func Shapes(only string) ([]MLA, []Prefill, []Quant) {
	decode := slices.DeleteFunc(DecodeShapes(), func(c MLA) bool { return !Only(c.Name, only) })
	prefill := slices.DeleteFunc(PrefillShapes(), func(c Prefill) bool { return !Only(c.Name, only) })
	return decode, prefill, QuantShapes(only)
}

// Only reports whether a shape's name is among those only selects: names
// containing only, or any of its comma-separated parts ("" selects every
// shape).
func Only(name, only string) bool {
	if only == "" {
		return true
	}
	for part := range strings.SplitSeq(only, ",") {
		if part != "" && strings.Contains(name, part) {
			return true
		}
	}
	return false
}
