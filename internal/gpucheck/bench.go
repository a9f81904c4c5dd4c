package gpucheck

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"sort"
	"time"

	"github.com/attnplug/attnplug/cuda"
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
	f := Floors{Device: e.Dev.Info().Name}
	err := e.Dev.Do(func(x *cuda.Ctx) error {
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
		sort.Float64s(ts)
		f.MatmulTFLOPs = 2 * d * d * d / (ts[len(ts)/2] / 1000) / 1e12
		return nil
	})
	return f, err
}

// timeOnce times f's work on the Env's stream, in milliseconds.
func (e *Env) timeOnce(x *cuda.Ctx, f func() error) (float64, error) {
	start, err := x.NewEvent()
	if err != nil {
		return 0, err
	}
	defer x.DestroyEvent(start)
	end, err := x.NewEvent()
	if err != nil {
		return 0, err
	}
	defer x.DestroyEvent(end)
	if err := x.SyncStream(e.stream); err != nil {
		return 0, err
	}
	if err := x.Record(start, e.stream); err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	if err := x.Record(end, e.stream); err != nil {
		return 0, err
	}
	ms, err := x.Elapsed(start, end)
	return float64(ms), err
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
// batch of each head count.
func DecodeShapes() []Case {
	var cs []Case
	for _, h := range []int{16, 128} {
		for _, b := range []int{1, 16, 64, 128} {
			for _, s := range []int64{4096, 16384} {
				cs = append(cs, Case{Name: fmt.Sprintf("h%d_b%d_s%d", h, b, s), Heads: h, PageSize: 64, SeqLens: repeatLen(b, s), QLens: repeatLen(b, 1), Seed: uint64(h*1000 + b + int(s))})
			}
		}
		// Ragged: 64 requests from 64 to 32k tokens, log-uniform.
		c := Case{Name: fmt.Sprintf("h%d_ragged64", h), Heads: h, PageSize: 64, Seed: uint64(h)}
		for i := range 64 {
			c.SeqLens = append(c.SeqLens, int64(64*math.Pow(512, float64((i*37)%64)/63)))
			c.QLens = append(c.QLens, 1)
		}
		cs = append(cs, c)
	}
	return cs
}

func repeatLen(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// Bench checks and times every case: a case whose check fails reports the
// failure and no time.
func (e *Env) Bench(cases []Case, f Floors) []BenchResult {
	var out []BenchResult
	for _, c := range cases {
		out = append(out, e.benchOne(c, f))
	}
	return out
}

func (e *Env) benchOne(c Case, f Floors) BenchResult {
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
	b, err := e.Alloc(c, copies)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.Free(e)
	p, err := e.Prepare(b)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer p.Close()
	r.Plan = p.Plan().Note
	if err := e.Dev.Do(func(x *cuda.Ctx) error {
		if err := b.Poison(x); err != nil {
			return err
		}
		return p.Launch(x, e.stream, b.Tensors(0))
	}); err != nil {
		r.Error = err.Error()
		return r
	}
	ch, err := e.Verify(b, 0, 16)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Check = ch.String()
	if !ch.OK() {
		r.Error = fmt.Sprintf("%v: %v", ErrCheckFailed, ch)
		return r
	}
	t, err := e.Time(b, p, max(copies, 20), 9)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.US, r.Spread = t.Median, t.Spread
	tokens := b.Tokens * int64(c.Heads)
	byteCount := float64(kvBytes + tokens*576*2 + tokens*512*2 + tokens*4)
	var flops float64
	for i, n := range c.SeqLens {
		flops += 2 * float64(c.QLens[i]*int64(c.Heads)) * float64(n) * (576 + 512)
	}
	r.TBs = byteCount / (r.US * 1e-6) / 1e12
	r.TFLOPs = flops / (r.US * 1e-6) / 1e12
	r.OfCopy = r.TBs / f.CopyTBs
	if f.MatmulTFLOPs > 0 {
		r.OfMatmul = r.TFLOPs / f.MatmulTFLOPs
		r.FloorUS = math.Max(byteCount/(f.CopyTBs*1e12), flops/(f.MatmulTFLOPs*1e12)) * 1e6
	} else {
		r.FloorUS = byteCount / (f.CopyTBs * 1e12) * 1e6
	}
	return r
}

//go:embed torch_bench.py
var torchScript string

// TorchFigures are what the torch script measured.
type TorchFigures struct {
	Torch        string             `json:"torch"`
	CopyTBs      float64            `json:"copy_tb_s"`
	MatmulTFLOPs float64            `json:"matmul_tflop_s"`
	DecodeUS     map[string]float64 `json:"decode_us"`
	Error        string             `json:"error,omitempty"`
}

// RunTorch runs torch's bmm-softmax-bmm decode on the cases' shapes (and
// its own copy and matrix figures) with python3, when python3 with torch
// and a GPU is there; the error says why not.
func RunTorch(ctx context.Context, python string, cases []Case) (*TorchFigures, error) {
	type shape struct {
		Name    string  `json:"name"`
		Heads   int     `json:"heads"`
		SeqLens []int64 `json:"seq_lens"`
		Scale   float64 `json:"scale"`
	}
	var shapes []shape
	for _, c := range cases {
		shapes = append(shapes, shape{c.Name, c.Heads, c.SeqLens, Scale})
	}
	in, _ := json.Marshal(shapes)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", torchScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", python, err, lastLines(stderr.String(), 5))
	}
	var tf TorchFigures
	if err := json.Unmarshal(lastLine(out), &tf); err != nil {
		return nil, fmt.Errorf("torch script output: %w", err)
	}
	if tf.Error != "" {
		return nil, fmt.Errorf("torch script: %s", tf.Error)
	}
	return &tf, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

func lastLines(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// Report is the GPU benchmark's result: the floors and torch's figures of
// the same run, and every shape.
type Report struct {
	When    string        `json:"when"`
	Floors  Floors        `json:"floors"`
	Torch   *TorchFigures `json:"torch,omitempty"`
	NoTorch string        `json:"torch_skipped,omitempty"`
	Decode  []BenchResult `json:"decode"`
}

// RunBench opens the device, measures the floors, checks and times every
// case, and runs torch's figures when python (a python3 with torch) runs.
func RunBench(ctx context.Context, python string, cases []Case) (*Report, error) {
	e, err := Open()
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rep := &Report{When: time.Now().UTC().Format(time.RFC3339)}
	if rep.Floors, err = e.MeasureFloors(); err != nil {
		return nil, err
	}
	rep.Decode = e.Bench(cases, rep.Floors)
	if python != "" {
		tf, err := RunTorch(ctx, python, cases)
		if err != nil {
			rep.NoTorch = err.Error()
		} else {
			rep.Torch = tf
			for i := range rep.Decode {
				r := &rep.Decode[i]
				if t := tf.DecodeUS[r.Name]; t > 0 && r.US > 0 {
					r.TorchUS, r.VsTorch = t, t/r.US
				}
			}
		}
	}
	return rep, nil
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
	fmt.Fprintf(w, "%-16s %5s %5s %-20s %9s %7s %8s %7s %8s %9s %9s %8s\n", "shape", "heads", "batch", "cached", "us", "TB/s", "TFLOP/s", "%copy", "%matmul", "floor us", "torch us", "vs torch")
	for _, r := range rep.Decode {
		if r.Error != "" {
			fmt.Fprintf(w, "%-16s %5d %5d %-20s  not reported: %s\n", r.Name, r.Heads, r.Batch, r.Cached, r.Error)
			continue
		}
		fmt.Fprintf(w, "%-16s %5d %5d %-20s %9.1f %7.2f %8.1f %6.0f%% %7.0f%% %9.1f %9.1f %7.2fx\n", r.Name, r.Heads, r.Batch, r.Cached,
			r.US, r.TBs, r.TFLOPs, 100*r.OfCopy, 100*r.OfMatmul, r.FloorUS, r.TorchUS, r.VsTorch)
	}
}
