package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
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

// runOptions are the flags of attnplug run: the default tensor dimensions
// and how tensors are made when a line gives none.
type runOptions struct {
	cfg           kernels.Config // dimensions; ChunkCapacity and TopK are per line
	topK          int
	randomTensors bool
	seed          uint64
	maxKVTokens   int
	// maxTensorBytes bounds the shared-memory buffer of a line's tensors
	// (and what a kernel decompresses from them).
	maxTensorBytes int64
	// gpu runs the kernels on the CUDA device (--device cuda); nil: CPU.
	gpu *deviceRunner
}

func defaultRunOptions() runOptions {
	return runOptions{
		cfg: kernels.Config{Heads: 2, KVLoraRank: 16, QKNopeHeadDim: 8, QKRopeHeadDim: 4, VHeadDim: 8,
			SoftmaxScale: 1 / math.Sqrt(12), RopeBase: 10000},
		topK: 2048, seed: 1, maxKVTokens: 1 << 14, maxTensorBytes: 1 << 30,
	}
}

func runRun(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	o := defaultRunOptions()
	fs.BoolVar(&o.randomTensors, "random-tensors", false, "generate the tensors of lines that give none (seeded by --seed and the line number)")
	fs.Uint64Var(&o.seed, "seed", o.seed, "seed of --random-tensors")
	fs.IntVar(&o.cfg.Heads, "heads", o.cfg.Heads, "attention heads")
	fs.IntVar(&o.cfg.KVLoraRank, "kv-lora-rank", o.cfg.KVLoraRank, "width of the latent c_kv (DeepSeek-V3: 512)")
	fs.IntVar(&o.cfg.QKNopeHeadDim, "qk-nope-head-dim", o.cfg.QKNopeHeadDim, "per-head width of the non-rotary q and k (DeepSeek-V3: 128)")
	fs.IntVar(&o.cfg.QKRopeHeadDim, "qk-rope-head-dim", o.cfg.QKRopeHeadDim, "width of the rotary q_pe and k_pe, even (DeepSeek-V3: 64)")
	fs.IntVar(&o.cfg.VHeadDim, "v-head-dim", o.cfg.VHeadDim, "per-head width of v (DeepSeek-V3: 128)")
	fs.Float64Var(&o.cfg.SoftmaxScale, "softmax-scale", 0, "softmax scale (default (qk_nope+qk_rope)^-0.5)")
	fs.Float64Var(&o.cfg.RopeBase, "rope-base", o.cfg.RopeBase, "RoPE base theta")
	fs.IntVar(&o.topK, "top-k", o.topK, "DSA indexer top-k of DSA layers (DeepSeek-V3.2: 2048); 0 runs them dense")
	fs.IntVar(&o.maxKVTokens, "max-kv-tokens", o.maxKVTokens, "refuse lines whose batch has more KV tokens (sum of seq_lens)")
	fs.Int64Var(&o.maxTensorBytes, "max-tensor-bytes", o.maxTensorBytes, "refuse lines whose tensors (inputs and output), or the k and v that MHA_ONE_SHOT decompresses, take more bytes")
	maxLine := maxLineFlag(fs, 64<<20)
	device := fs.String("device", "cpu", "where kernels run: cpu (the plugins' reference kernels over shared memory) or cuda (the plugins' device code, launched by this process on tensors it generates on the GPU; docs/device.md)")
	pageSize := fs.Int("page-size", 64, "with --device cuda: the KV cache page size of MLA decode")
	logger, err := h.parse(fs, e, args, "attnplug run [flags] < requests.jsonl > answers.jsonl", "requests come on stdin")
	if err != nil {
		return err
	}
	switch *device {
	case "cpu":
	case "cuda":
		if *pageSize < 1 || *pageSize > 4096 {
			return &usageError{fmt.Sprintf("run: --page-size=%d is outside [1, 4096]", *pageSize)}
		}
		o.gpu = &deviceRunner{pageSize: *pageSize}
		defer o.gpu.close()
	default:
		return &usageError{fmt.Sprintf("run: --device=%q: want cpu or cuda", *device)}
	}
	if err := checkMaxLine(*maxLine); err != nil {
		return err
	}
	if o.cfg.SoftmaxScale == 0 {
		o.cfg.SoftmaxScale = 1 / math.Sqrt(float64(o.cfg.QKNopeHeadDim+o.cfg.QKRopeHeadDim))
	}
	if o.maxTensorBytes <= 0 {
		return &usageError{fmt.Sprintf("run: --max-tensor-bytes=%d must be positive", o.maxTensorBytes)}
	}
	if o.maxKVTokens <= 0 {
		return &usageError{fmt.Sprintf("run: --max-kv-tokens=%d must be positive", o.maxKVTokens)}
	}
	if o.topK < 0 {
		return &usageError{fmt.Sprintf("run: --top-k=%d is negative (0 runs DSA layers dense)", o.topK)}
	}
	o.cfg.ChunkCapacity, o.cfg.TopK = 1, 0
	if err := o.cfg.Validate(); err != nil {
		return &usageError{"run: " + err.Error()}
	}
	reg, err := h.open(ctx, logger)
	if err != nil {
		return err
	}
	defer reg.Close()
	refused, err := runStream(ctx, reg, o, e.stdin, e.stdout, *maxLine)
	if err != nil {
		return err
	}
	if refused > 0 {
		return &refusedError{refused}
	}
	return nil
}

// runStream answers every line of in on out, one at a time, and returns how
// many lines were refused.
func runStream(ctx context.Context, reg *registry.Registry, o runOptions, in io.Reader, out io.Writer, maxLine int) (int, error) {
	r := jsonl.NewReader(in, maxLine)
	w := bufio.NewWriter(out)
	refused := 0
	for {
		line, n, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && n == 0 {
			w.Flush()
			return refused, fmt.Errorf("run: read requests: %w", err)
		}
		var a *runAnswer
		if err == nil {
			a, err = runLine(ctx, reg, o, line, n)
		}
		if ctx.Err() != nil {
			w.Flush()
			return refused, fmt.Errorf("run: %w", ctx.Err())
		}
		if err != nil {
			refused++
			w.Write(jsonl.AppendError(nil, n, err))
		} else {
			b, _ := json.Marshal(a)
			w.Write(append(b, '\n'))
		}
		if !r.Buffered() {
			if err := w.Flush(); err != nil {
				return refused, fmt.Errorf("run: write answers: %w", err)
			}
		}
	}
	return refused, w.Flush()
}

// runAnswer is one answer line of attnplug run: a dispatch answer and what
// running the kernel gave.
type runAnswer struct {
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
func runLine(ctx context.Context, reg *registry.Registry, o runOptions, line []byte, n int) (*runAnswer, error) {
	rest, spec, err := splitTensors(line)
	if err != nil {
		return nil, err
	}
	var req core.Request
	if err := jsonl.DecodeRequest(rest, &req); err != nil {
		return nil, err
	}
	if spec == nil {
		if !o.randomTensors {
			return nil, core.NewFieldError("tensors", `missing: give "tensors" ({"random": SEED} or the inputs) or run with --random-tensors`)
		}
		seed := o.seed + uint64(n)
		spec = &tensorSpec{Random: &seed}
	}
	return runRequest(ctx, reg, o, &req, spec)
}

// runRequest dispatches req, runs the kernel of the answer on the tensors of
// spec in shared memory, and compares its output with the float64
// reference.
func runRequest(ctx context.Context, reg *registry.Registry, o runOptions, req *core.Request, spec *tensorSpec) (*runAnswer, error) {
	cfg := o.cfg
	topK := o.topK
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
	b, err := batchShape(req)
	if err != nil {
		return nil, err
	}
	if kv := b.KVTokens(); kv > o.maxKVTokens {
		return nil, core.NewFieldError("seq_lens", fmt.Sprintf("the batch has %d KV tokens, more than --max-kv-tokens %d", kv, o.maxKVTokens))
	}
	cfg.ChunkCapacity = int(min(max(req.Batch.MaxChunkCapacity, int64(b.Requests())), 1<<30))
	if req.Batch.MaxChunkCapacity <= 0 {
		cfg.ChunkCapacity = 128 * 1024 // sglang's default get_max_chunk_capacity()
	}

	ans, err := reg.Dispatch(ctx, req)
	if err != nil {
		return nil, err
	}
	deviceNote := ""
	if o.gpu != nil {
		if spec.arrays != nil {
			return nil, core.NewFieldError("tensors", `--device cuda generates the tensors on the device: give {"random": SEED} or run with --random-tensors`)
		}
		seed := o.seed
		if spec.Random != nil {
			seed = *spec.Random
		}
		a, why, err := o.gpu.run(ctx, reg, cfg.Heads, req, ans, seed)
		if err != nil || a != nil {
			return a, err
		}
		deviceNote = "not on the GPU: " + why
	}
	catalog := reg.Kernels(ans.Handler)
	sparseLayer := topK > 0 && (req.Layer.UseDSA || slices.ContainsFunc(catalog, func(k core.Kernel) bool { return k.Sparse }))
	if sparseLayer {
		cfg.TopK = topK
	}
	if err := cfg.Validate(); err != nil {
		return nil, core.NewFieldError("tensors", err.Error())
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		return nil, core.NewFieldError("tensors", err.Error())
	}
	if err := checkTensorBytes(cfg, b, l, ans.Method, o.maxTensorBytes); err != nil {
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
		Backend: ans.Handler, Method: ans.Method, Dims: backendkit.Dims(cfg),
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
		return nil, core.NewFieldError("tensors", err.Error())
	}
	a := &runAnswer{
		Method: ans.Method.String(), Handler: ans.Handler, Plugin: ans.Plugin, Fallback: ans.Fallback,
		Kernel: ka.Kernel, Library: ka.Library, Emulated: ka.Emulated, TimeNS: ka.TimeNS,
		RelError: kernels.RelError(out, want), KernelPlugin: ka.Plugin, KernelFallback: ka.Fallback,
		Sparse: ka.Sparse, Note: ka.Note, out: slices.Clone(out),
	}
	if deviceNote != "" {
		a.Note = strings.TrimPrefix(a.Note+"; "+deviceNote, "; ")
	}
	if longest := slices.Max(b.SeqLens); sparseLayer && !ka.Sparse && longest > topK {
		// Dense attention sees every key, the DSA layer only the top-k:
		// sglang runs a DSA layer dense only when no sequence is longer
		// than the top-k, where the two agree.
		sparse, err := kernels.SparseReference(cfg, b, raw)
		if err != nil {
			return nil, core.NewFieldError("tensors", err.Error())
		}
		forced := ""
		if req.Runtime.DSAUseMHAGiven() {
			forced = " (dsa_use_mha forced it here)"
		}
		a.OutsideSGLang = fmt.Sprintf("outside what sglang would choose: %s runs dense attention over a sequence of %d tokens on a DSA layer with top_k %d, "+
			"and sglang runs a DSA layer dense only when no sequence is longer than the top-k%s; "+
			"rel_error is against dense attention, which differs from the layer's sparse attention by %.3g",
			a.Method, longest, topK, forced, kernels.RelError(toFloat32(want), sparse))
	}
	return a, nil
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

// kernelsTable writes the kernel catalogs of the plugins' names, one line
// per kernel (attnplug plugins --kernels).
func kernelsTable(w io.Writer, reg *registry.Registry, list []registry.PluginInfo) error {
	type row struct {
		Plugin, Name string
		Kernel       []core.Kernel
	}
	var rows []row
	for _, p := range list {
		for _, n := range p.Names {
			h, _, _ := reg.Handler(n)
			rows = append(rows, row{Plugin: p.Name, Name: n, Kernel: h.Kernels})
		}
	}
	rows = append(rows, row{Plugin: core.PluginCore, Name: core.TritonName, Kernel: core.TritonKernels()})
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-10s %-15s %-20s %-50s %-26s %-22s %-10s %-8s %s\n", "PLUGIN", "NAME", "METHOD", "KERNEL", "LIBRARY", "DTYPES", "HEAD_DIMS", "GRAPH", "HARDWARE")
	for _, r := range rows {
		if len(r.Kernel) == 0 {
			fmt.Fprintf(&sb, "%-10s %-15s (no kernel catalog: decides methods, runs no kernels)\n", r.Plugin, r.Name)
		}
		for _, k := range r.Kernel {
			dims := make([]string, len(k.HeadDims))
			for i, d := range k.HeadDims {
				dims[i] = fmt.Sprint(d)
			}
			graph := "no"
			if k.CUDAGraph {
				graph = "yes"
			}
			name := k.Name
			if k.Sparse {
				name += " (sparse)"
			}
			fmt.Fprintf(&sb, "%-10s %-15s %-20s %-50s %-26s %-22s %-10s %-8s %s\n", r.Plugin, r.Name, k.Method, name, k.Library,
				strings.Join(k.DTypes, ","), strings.Join(dims, "/"), graph, hardwareString(k.Hardware))
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// kernelJSON is a catalog entry in attnplug plugins --kernels --json.
type kernelJSON struct {
	Name      string         `json:"name"`
	Library   string         `json:"library"`
	Method    string         `json:"method"`
	DTypes    []string       `json:"dtypes"`
	HeadDims  []int          `json:"head_dims"`
	PageSizes []int          `json:"page_sizes"`
	CUDAGraph bool           `json:"cuda_graph"`
	Sparse    bool           `json:"sparse"`
	Hardware  []hardwareJSON `json:"hardware"` // empty: any
}

// hardwareJSON is one core.Hardware entry, platforms by name.
type hardwareJSON struct {
	Platforms     []string `json:"platforms"`
	MinCapability int      `json:"min_capability,omitempty"`
	MaxCapability int      `json:"max_capability,omitempty"`
	Archs         []string `json:"archs,omitempty"`
	NeedsAMX      bool     `json:"needs_amx,omitempty"`
}

func kernelToJSON(k core.Kernel) kernelJSON {
	out := kernelJSON{Name: k.Name, Library: k.Library, Method: k.Method.String(), DTypes: k.DTypes, HeadDims: k.HeadDims,
		PageSizes: k.PageSizes, CUDAGraph: k.CUDAGraph, Sparse: k.Sparse, Hardware: []hardwareJSON{}}
	for _, h := range k.Hardware {
		hj := hardwareJSON{Platforms: []string{}, MinCapability: h.MinCapability, MaxCapability: h.MaxCapability, Archs: h.Archs, NeedsAMX: h.NeedsAMX}
		for _, p := range h.Platforms {
			hj.Platforms = append(hj.Platforms, p.String())
		}
		out.Hardware = append(out.Hardware, hj)
	}
	return out
}

func hardwareString(hw []core.Hardware) string {
	if len(hw) == 0 {
		return "any"
	}
	var parts []string
	for _, h := range hw {
		var p []string
		for _, pl := range h.Platforms {
			p = append(p, pl.String())
		}
		s := strings.Join(p, "|")
		switch {
		case h.MinCapability > 0 && h.MaxCapability > 0:
			s += fmt.Sprintf(" sm%d-sm%d", h.MinCapability, h.MaxCapability)
		case h.MinCapability > 0:
			s += fmt.Sprintf(" sm%d+", h.MinCapability)
		case h.MaxCapability > 0:
			s += fmt.Sprintf(" up to sm%d", h.MaxCapability)
		}
		if len(h.Archs) > 0 {
			s += " " + strings.Join(h.Archs, "|")
		}
		if h.NeedsAMX {
			s += " amx"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " or ")
}
