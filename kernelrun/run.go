package kernelrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/shm"
)

// Options are what attnplug run's flags give: the default tensor
// dimensions, how tensors are made when a line gives none, the limits on
// what a line may ask, and where kernels run.
type Options struct {
	// Dims are the dimensions of a line that gives none; ChunkCapacity
	// and TopK are set per line.
	Dims kernels.Config
	// TopK is the DSA indexer top-k of DSA layers; 0 runs them dense.
	TopK int
	// RandomTensors generates the tensors of lines that give none, seeded
	// by Seed plus the line number.
	RandomTensors bool
	Seed          uint64
	// MaxKVTokens refuses a batch with more KV tokens (sum of seq_lens).
	MaxKVTokens int
	// MaxTensorBytes bounds the shared-memory buffer of a line's tensors
	// (and what a kernel decompresses from them).
	MaxTensorBytes int64
	// MaxLine is the longest request line Stream accepts (0:
	// jsonl.MaxLineBytes).
	MaxLine int
	// Device runs the kernels on the CUDA device; nil: the CPU.
	Device *Device
}

// DefaultOptions are attnplug run's defaults: small MLA dimensions, the
// DeepSeek-V3.2 top-k, 16K KV tokens and 1 GiB of tensors a line.
func DefaultOptions() Options {
	return Options{
		Dims: kernels.Config{Heads: 2, KVLoraRank: 16, QKNopeHeadDim: 8, QKRopeHeadDim: 4, VHeadDim: 8,
			SoftmaxScale: 1 / math.Sqrt(12), RopeBase: 10000},
		TopK: 2048, Seed: 1, MaxKVTokens: 1 << 14, MaxTensorBytes: 1 << 30, MaxLine: 64 << 20,
	}
}

// Stream answers every JSON Lines request of in on out, one line at a
// time, as attnplug run does, and returns how many lines were refused (a
// line answered with its error). Each line is decided by reg and its
// kernel run on its tensors (Run); the answers are flushed whenever no
// further input is waiting. It ends early, with an error, when in or out
// fails or ctx ends.
func Stream(ctx context.Context, reg *registry.Registry, in io.Reader, out io.Writer, o Options) (refused int, err error) {
	r := jsonl.NewReader(in, o.MaxLine)
	w := bufio.NewWriter(out)
	for {
		line, n, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && n == 0 {
			w.Flush()
			return refused, fmt.Errorf("run: read requests: %w", err)
		}
		var a *Answer
		if err == nil {
			a, err = runLine(ctx, reg, o, line, n)
		}
		if ctx.Err() != nil {
			w.Flush()
			return refused, fmt.Errorf("run: %w", ctx.Err())
		}
		var b []byte
		if err == nil {
			b, err = appendAnswer(nil, a)
		}
		if err != nil {
			refused++
			b = jsonl.AppendError(nil, n, err)
		}
		w.Write(b)
		if !r.Buffered() {
			if err := w.Flush(); err != nil {
				return refused, fmt.Errorf("run: write answers: %w", err)
			}
		}
	}
	return refused, w.Flush()
}

// appendAnswer appends the answer line of a (with its newline) to dst, or
// returns the error that keeps a from being written as JSON: the caller
// then writes an error line in its place, never an empty one.
func appendAnswer(dst []byte, a *Answer) ([]byte, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return dst, fmt.Errorf("answer: %w", err)
	}
	return append(append(dst, b...), '\n'), nil
}

// Answer is one answer line of attnplug run: a dispatch answer and what
// running the kernel gave. Its JSON field names are attnplug run's output.
type Answer struct {
	Method   string `json:"method"`
	Handler  string `json:"handler"`
	Plugin   string `json:"plugin"`
	Fallback string `json:"fallback,omitempty"`
	// Kernel is the catalog name of the kernel that ran, Library what it
	// stands for.
	Kernel  string `json:"kernel"`
	Library string `json:"library"`
	// Emulated: the reference CPU kernels ran the kernel's math.
	Emulated bool  `json:"emulated"`
	TimeNS   int64 `json:"time_ns"`
	// RelError is max|out-ref|/max|ref| against the float64 reference of
	// the math that ran (sparse attention over the top-k for a sparse
	// kernel, dense attention otherwise).
	RelError float64 `json:"rel_error"`
	// KernelPlugin is who ran the kernel ("core": this process).
	KernelPlugin string `json:"kernel_plugin"`
	// KernelFallback says why the host ran a plugin's kernel itself.
	KernelFallback string `json:"kernel_fallback,omitempty"`
	Sparse         bool   `json:"sparse,omitempty"`
	Note           string `json:"note,omitempty"`
	// Device, Plan and LSEError are set when the kernel ran on the GPU
	// (--device cuda): the device's name, the plan the plugin answered, and
	// the largest |lse-ref|/max(1,|ref|).
	Device   string  `json:"device,omitempty"`
	Plan     string  `json:"plan,omitempty"`
	LSEError float64 `json:"lse_error,omitempty"`
	// OutsideSGLang, when set, says why the request is one sglang would
	// not make (dense attention on a DSA layer past the top-k).
	OutsideSGLang string `json:"outside_sglang,omitempty"`

	out []float32 // the kernel's output, for tests
}

// runLine decides line n and runs the chosen kernel.
func runLine(ctx context.Context, reg *registry.Registry, o Options, line []byte, n int) (*Answer, error) {
	rest, spec, err := splitTensors(line)
	if err != nil {
		return nil, err
	}
	var req core.Request
	if err := jsonl.DecodeRequest(rest, &req); err != nil {
		return nil, err
	}
	if spec == nil && !o.RandomTensors {
		return nil, core.NewFieldError("tensors", `missing: give "tensors" ({"random": SEED} or the inputs) or run with --random-tensors`)
	}
	if spec == nil {
		spec = &TensorSpec{}
	}
	if spec.Random == nil && !spec.inline() && o.RandomTensors {
		seed := o.Seed + uint64(n)
		spec.Random = &seed
	}
	return Run(ctx, reg, o, &req, spec)
}

// Run dispatches req through reg, runs the kernel of the answer on the
// tensors of spec, and compares its output with the float64 reference. On
// the CPU (o.Device nil, or a method the device does not run) the tensors
// are made in shared memory and the kernel runs where reg.RunKernel sends
// it; with o.Device the plugin's device code runs on the GPU. spec's
// dimensions replace o.Dims'; a spec that gives neither a seed nor the
// inputs is refused (o.RandomTensors is for Stream's lines). An error
// names the field and value.
func Run(ctx context.Context, reg *registry.Registry, o Options, req *core.Request, spec *TensorSpec) (*Answer, error) {
	if spec == nil || spec.Random == nil && !spec.inline() {
		return nil, core.NewFieldError("tensors", `gives neither "random" nor the inputs: give {"random": SEED} or the inputs, or run with --random-tensors`)
	}
	cfg, topK := specDims(o, spec)
	b, err := batchShape(req)
	if err != nil {
		return nil, err
	}
	if kv := b.KVTokens(); kv > o.MaxKVTokens {
		return nil, core.NewFieldError("seq_lens", fmt.Sprintf("the batch has %d KV tokens, more than --max-kv-tokens %d", kv, o.MaxKVTokens))
	}
	cfg.ChunkCapacity = int(min(max(req.Batch.MaxChunkCapacity, int64(b.Requests())), 1<<30))
	if req.Batch.MaxChunkCapacity <= 0 {
		cfg.ChunkCapacity = 128 * 1024 // sglang's default get_max_chunk_capacity()
	}
	ans, err := reg.Dispatch(ctx, req)
	if err != nil {
		return nil, err
	}
	catalog := reg.Kernels(ans.Handler)
	sparseLayer := topK > 0 && (req.Layer.UseDSA || slices.ContainsFunc(catalog, func(k core.Kernel) bool { return k.Sparse }))
	deviceNote := ""
	if o.Device != nil {
		sparseTopK := 0
		if sparseLayer {
			sparseTopK = topK
		}
		a, why, err := runOnDevice(ctx, reg, o, deviceRun{heads: cfg.Heads, topK: sparseTopK, req: req, ans: ans}, spec)
		if a != nil || err != nil {
			return a, err
		}
		deviceNote = "not on the GPU: " + why
	}
	if sparseLayer {
		cfg.TopK = topK
	}
	c, err := runOnCPU(ctx, reg, o, cfg, b, req, ans, spec)
	if err != nil {
		return nil, err
	}
	ka, out, want, raw := c.ka, c.out, c.want, c.raw
	a := &Answer{
		Method: ans.Method.String(), Handler: ans.Handler, Plugin: ans.Plugin, Fallback: ans.Fallback,
		Kernel: ka.Kernel, Library: ka.Library, Emulated: ka.Emulated, TimeNS: ka.TimeNS,
		RelError: kernels.RelError(out, want), KernelPlugin: ka.Plugin, KernelFallback: ka.Fallback,
		Sparse: ka.Sparse, Note: ka.Note, out: out,
	}
	if what := nonFinite(ka.Kernel, out, want, a.RelError, 0); what != "" {
		return nil, core.NewFieldError("tensors", fmt.Sprintf("result not finite: %s: softmax_scale %g or the inputs are too large for the arithmetic",
			what, cfg.SoftmaxScale))
	}
	if deviceNote != "" {
		a.Note = strings.TrimPrefix(a.Note+"; "+deviceNote, "; ")
	}
	if longest := slices.Max(b.SeqLens); sparseLayer && !ka.Sparse && longest > topK {
		if a.OutsideSGLang, err = outsideSGLang(cfg, b, raw, want, req, a.Method, longest, topK); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// cpuRun is a kernel run where reg.RunKernel sends it, on tensors in
// shared memory: its answer, a copy of its output, the float64 reference
// of the math that ran and the inputs.
type cpuRun struct {
	ka   *registry.KernelAnswer
	out  []float32
	want []float64
	raw  kernels.Tensors
}

// runOnCPU runs the kernel of ans on the tensors of spec at cfg's
// dimensions, as Run does without a device.
func runOnCPU(ctx context.Context, reg *registry.Registry, o Options, cfg kernels.Config, b kernels.BatchShape, req *core.Request,
	ans core.Answer, spec *TensorSpec) (*cpuRun, error) {
	if err := cfg.Validate(); err != nil {
		return nil, inTensors(err)
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		return nil, inTensors(err)
	}
	if err := checkTensorBytes(cfg, b, l, ans.Method, o.MaxTensorBytes); err != nil {
		return nil, err
	}
	raw, err := inputs(cfg, b, spec)
	if err != nil {
		return nil, err
	}
	seg, err := shm.Create(int64(l.Bytes()))
	if err != nil {
		return nil, err
	}
	defer seg.Close()
	dst, out, err := l.SplitBytes(seg.Bytes())
	if err != nil {
		return nil, err
	}
	dst.CopyInputs(&raw)
	kreq := &core.KernelRequest{
		Backend: ans.Handler, Method: ans.Method, Dims: cfg,
		SeqLens: req.Batch.SeqLens, PrefixLens: prefixLens(b),
		Buffer:  core.SharedBuffer{Path: seg.Path(), Size: seg.Size(), Mem: seg.Bytes()},
		Tensors: backendkit.Refs(l),
	}
	ka, err := reg.RunKernel(ctx, kreq)
	if err != nil {
		return nil, err
	}
	// The reference of the math that ran: the sparse attention over the
	// top-k for a sparse kernel, dense attention for a dense one, on a DSA
	// layer too (dsa_use_mha).
	var want []float64
	if ka.Sparse {
		want, err = kernels.SparseReference(cfg, b, raw)
	} else {
		want, err = kernels.Reference(cfg, b, raw)
	}
	if err != nil {
		return nil, inTensors(err)
	}
	return &cpuRun{ka: ka, out: slices.Clone(out), want: want, raw: raw}, nil
}

// inTensors is an error of the kernels about a line whose lengths were
// checked (batchShape): a *core.FieldError names a dimension, which the
// line gives in "tensors" (the flags' were checked before any line); any
// other is about the tensors.
func inTensors(err error) error {
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return core.NewFieldError("tensors."+fe.Field, fe.Msg)
	}
	return core.NewFieldError("tensors", err.Error())
}

// specDims are o's dimensions and top-k with those spec gives; a softmax
// scale spec does not give follows its head dimensions.
func specDims(o Options, spec *TensorSpec) (kernels.Config, int) {
	cfg := o.Dims
	topK := o.TopK
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setInt(&cfg.Heads, spec.Heads)
	setInt(&cfg.KVLoraRank, spec.KVLoraRank)
	setInt(&cfg.QKNopeHeadDim, spec.QKNopeHeadDim)
	setInt(&cfg.QKRopeHeadDim, spec.QKRopeHeadDim)
	setInt(&cfg.VHeadDim, spec.VHeadDim)
	setInt(&topK, spec.TopK)
	if spec.SoftmaxScale != nil {
		cfg.SoftmaxScale = *spec.SoftmaxScale
	} else if spec.QKNopeHeadDim != nil || spec.QKRopeHeadDim != nil {
		cfg.SoftmaxScale = 1 / math.Sqrt(float64(cfg.QKNopeHeadDim+cfg.QKRopeHeadDim))
	}
	if spec.RopeBase != nil {
		cfg.RopeBase = *spec.RopeBase
	}
	return cfg, topK
}

// runOnDevice runs the kernel of d on o.Device, on tensors generated
// there from spec's seed; a nil Answer and no error says why it did not.
func runOnDevice(ctx context.Context, reg *registry.Registry, o Options, d deviceRun, spec *TensorSpec) (*Answer, string, error) {
	if spec.arrays != nil {
		return nil, "", core.NewFieldError("tensors", `--device cuda generates the tensors on the device: give {"random": SEED} or run with --random-tensors`)
	}
	d.seed = *spec.Random // Run refused a spec with neither
	a, why, err := o.Device.run(ctx, reg, d)
	if err != nil || a == nil {
		return nil, why, err
	}
	if what := nonFinite(a.Kernel, nil, nil, a.RelError, a.LSEError); what != "" {
		return nil, "", core.NewFieldError("tensors", fmt.Sprintf("result not finite on %s: %s", a.Device, what))
	}
	return a, "", nil
}

// outsideSGLang says why a dense kernel on a DSA layer whose longest
// sequence is past the top-k is outside what sglang would choose. Dense
// attention sees every key, the DSA layer only the top-k: sglang runs a
// DSA layer dense only when no sequence is longer than the top-k, where
// the two agree.
func outsideSGLang(cfg kernels.Config, b kernels.BatchShape, raw kernels.Tensors, want []float64, req *core.Request, method string, longest, topK int) (string, error) {
	sparse, err := kernels.SparseReference(cfg, b, raw)
	if err != nil {
		return "", inTensors(err)
	}
	forced := ""
	if req.Runtime.DSAUseMHAGiven() {
		forced = " (dsa_use_mha forced it here)"
	}
	return fmt.Sprintf("outside what sglang would choose: %s runs dense attention over a sequence of %d tokens on a DSA layer with top_k %d, "+
		"and sglang runs a DSA layer dense only when no sequence is longer than the top-k%s; "+
		"rel_error is against dense attention, which differs from the layer's sparse attention by %.3g",
		method, longest, topK, forced, kernels.RelError(toFloat32(want), sparse)), nil
}

// nonFinite says which numbers of a run of kernel are NaN or infinite:
// the first such element of the output and of the float64 reference, and
// the errors; "" when every one is finite. JSON has no such numbers, so
// an answer that held one could not be written.
func nonFinite(kernel string, out []float32, want []float64, relErr, lseErr float64) string {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	var what []string
	if i := slices.IndexFunc(out, func(x float32) bool { return !finite(float64(x)) }); i >= 0 {
		what = append(what, fmt.Sprintf("the output of %s holds %v at element %d of %d", kernel, out[i], i, len(out)))
	}
	if i := slices.IndexFunc(want, func(x float64) bool { return !finite(x) }); i >= 0 {
		what = append(what, fmt.Sprintf("the float64 reference holds %v at element %d", want[i], i))
	}
	if !finite(relErr) {
		what = append(what, fmt.Sprintf("rel_error of %s is %v", kernel, relErr))
	}
	if !finite(lseErr) {
		what = append(what, fmt.Sprintf("lse_error of %s is %v", kernel, lseErr))
	}
	return strings.Join(what, ", ")
}

// toFloat32 converts v to float32.
func toFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// checkTensorBytes refuses a line whose tensors take more than limit bytes,
// before anything is allocated for them. The count is made from the
// fields' shapes with saturating arithmetic, not from l.Bytes(), so no
// product of dimensions can wrap around; the error names the largest
// tensor. MHA_ONE_SHOT also decompresses k_nope and v of every head and
// KV token, which is bounded the same way.
func checkTensorBytes(cfg kernels.Config, b kernels.BatchShape, l kernels.TensorLayout, m core.Method, limit int64) error {
	var total int64
	var largest kernels.Field
	largestBytes := int64(-1)
	for _, f := range l.Fields() {
		n := satMul(4, f.Shape...)
		if n > largestBytes {
			largest, largestBytes = f, n
		}
		padded := int64(math.MaxInt64) // each tensor starts on 64 bytes
		if n <= math.MaxInt64-63 {
			padded = (n + 63) / 64 * 64
		}
		total = satAdd(total, padded)
	}
	if total > limit {
		return core.NewFieldError("tensors."+largest.Name, fmt.Sprintf("shape %v takes %s; the line's tensors take %s, more than --max-tensor-bytes %d",
			largest.Shape, byteCount(largestBytes), byteCount(total), limit))
	}
	if m == core.MHAOneShot {
		kv := satMul(4, cfg.Heads, b.KVTokens(), cfg.QKNopeHeadDim+cfg.VHeadDim)
		if kv > limit {
			return core.NewFieldError("tensors", fmt.Sprintf("MHA_ONE_SHOT decompresses k_nope and v of every head and KV token, %d×%d×(%d+%d) floats, %s, more than --max-tensor-bytes %d",
				cfg.Heads, b.KVTokens(), cfg.QKNopeHeadDim, cfg.VHeadDim, byteCount(kv), limit))
		}
	}
	return nil
}

// satMul returns the product of x and ys, or math.MaxInt64 when it does
// not fit (or a factor is negative).
func satMul(x int64, ys ...int) int64 {
	for _, y := range ys {
		switch {
		case y < 0 || x < 0:
			return math.MaxInt64
		case y != 0 && x > math.MaxInt64/int64(y):
			return math.MaxInt64
		}
		x *= int64(y)
	}
	return x
}

// satAdd returns x+y for non-negative x and y, or math.MaxInt64 when the
// sum does not fit.
func satAdd(x, y int64) int64 {
	if x > math.MaxInt64-y {
		return math.MaxInt64
	}
	return x + y
}

// byteCount spells n bytes for an error message; math.MaxInt64 stands for
// a count too large for int64.
func byteCount(n int64) string {
	if n == math.MaxInt64 {
		return "more than 2^63 bytes"
	}
	return fmt.Sprintf("%d bytes", n)
}

// batchShape is req's batch for the kernels: seq_lens are needed; missing
// extend_prefix_lens are 0 for extend modes and seq_lens-1 (one new token)
// for the others.
func batchShape(req *core.Request) (kernels.BatchShape, error) {
	seq := req.Batch.SeqLens
	if len(seq) == 0 {
		return kernels.BatchShape{}, core.NewFieldError("seq_lens", "needed to run a kernel")
	}
	prefix := req.Batch.ExtendPrefixLens
	if prefix == nil {
		prefix = make([]int64, len(seq))
		if !req.Batch.Mode.IsExtend() {
			for i, s := range seq {
				prefix[i] = max(s-1, 0)
			}
		}
	}
	return backendkit.Batch(seq, prefix)
}

func prefixLens(b kernels.BatchShape) []int64 {
	out := make([]int64, len(b.PrefixLens))
	for i, p := range b.PrefixLens {
		out[i] = int64(p)
	}
	return out
}
