package hostbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/internal/inproc"
	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// deepSeekV3Layers is the number of attention layers of DeepSeek-V3.
const deepSeekV3Layers = 61

// benchPass is one forward pass of the trace: a batch and its layers.
type benchPass struct {
	kind    string
	batch   core.Batch
	runtime core.Runtime
}

// benchTrace returns n forward passes of a DeepSeek-V3 serving mix: fresh
// prefills, chunked prefills over long cached prefixes, decode batches
// (most passes), speculative target-verify, and decode inside a piecewise
// CUDA graph.
func benchTrace(n int, seed uint64) []benchPass {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]benchPass, n)
	for i := range out {
		var p benchPass
		p.batch.MaxChunkCapacity = 131072
		switch x := rng.IntN(100); {
		case x < 8: // fresh prefill
			p.kind = "prefill"
			bs := 1 + rng.IntN(4)
			p.batch.Mode = core.ModeExtend
			for j := 0; j < bs; j++ {
				p.batch.ExtendPrefixLens = append(p.batch.ExtendPrefixLens, 0)
				p.batch.SeqLens = append(p.batch.SeqLens, int64(256+rng.IntN(8192)))
			}
		case x < 16: // chunked prefill over a cached prefix
			p.kind = "chunked-prefill"
			bs := 1 + rng.IntN(2)
			p.batch.Mode = core.ModeExtend
			for j := 0; j < bs; j++ {
				prefix := int64(4096 + rng.IntN(60000))
				p.batch.ExtendPrefixLens = append(p.batch.ExtendPrefixLens, prefix)
				p.batch.SeqLens = append(p.batch.SeqLens, prefix+int64(1024+rng.IntN(7168)))
			}
		case x < 26: // speculative verify
			p.kind = "target-verify"
			p.batch.Mode = core.ModeTargetVerify
			fillDecode(rng, &p.batch, 4)
		case x < 36: // decode in a piecewise CUDA graph
			p.kind = "decode-graph"
			p.batch.Mode = core.ModeDecode
			p.runtime.PiecewiseCUDAGraph = true
			fillDecode(rng, &p.batch, 1)
		default:
			p.kind = "decode"
			p.batch.Mode = core.ModeDecode
			fillDecode(rng, &p.batch, 1)
		}
		p.runtime.Platform = core.PlatformCUDA
		out[i] = p
	}
	return out
}

func fillDecode(rng *rand.Rand, b *core.Batch, newTokens int64) {
	bs := 8 + rng.IntN(120)
	for j := 0; j < bs; j++ {
		seq := int64(128 + rng.IntN(16000))
		b.ExtendPrefixLens = append(b.ExtendPrefixLens, seq-newTokens)
		b.SeqLens = append(b.SeqLens, seq)
	}
}

// benchLayer is DeepSeek-V3's attention layer: every one of the 61 is the
// same MLA layer with the fused q/kv-a projection.
func benchLayer() core.Layer {
	return core.Layer{ChunkedPrefixCacheThreshold: core.DefaultChunkedPrefixCacheThreshold, FusedQKVAProjWithMQA: true}
}

// Result is what attnplug bench prints; its JSON field names (--json)
// are a contract.
type Result struct {
	Backend              string             `json:"backend"`
	Passes               int                `json:"passes"`
	Layers               int                `json:"layers_per_pass"`
	InProcessNsPerPass   float64            `json:"in_process_ns_per_pass"`
	InProcessNsPerLayer  float64            `json:"in_process_ns_per_layer"`
	RPCPerLayerNsPerPass float64            `json:"rpc_per_layer_ns_per_pass"`
	RPCNsPerLayer        float64            `json:"rpc_ns_per_layer"`
	ProductionNsPerPass  float64            `json:"production_ns_per_pass"`
	ProductionNsPerLayer float64            `json:"production_ns_per_layer"`
	ProductionVsInProc   float64            `json:"production_vs_in_process"`
	RPCVsInProc          float64            `json:"rpc_vs_in_process"`
	ProductionAllocs     float64            `json:"production_allocs_per_pass"`
	ColdStartMs          float64            `json:"cold_start_ms"`
	ColdStartPlugins     int                `json:"cold_start_plugins"`
	PluginStartMs        map[string]float64 `json:"plugin_start_ms"`
	PluginRSSKiB         map[string]int64   `json:"plugin_rss_kib"`
	Mismatches           int                `json:"mismatches"`

	StreamRequests          int     `json:"stream_requests"`
	StreamRequestsPerSecond float64 `json:"dispatch_stream_requests_per_s"`
	PythonRequestsPerSecond float64 `json:"python_reference_requests_per_s,omitempty"`
	StreamVsPython          float64 `json:"dispatch_stream_vs_python,omitempty"`
	PythonSkipped           string  `json:"python_reference_skipped,omitempty"`

	// The whole attnplug dispatch process on the stream, start-up and
	// plugin starts included, against the whole Python process.
	EndToEndSeconds    float64 `json:"dispatch_process_s,omitempty"`
	PythonSeconds      float64 `json:"python_process_s,omitempty"`
	EndToEndVsPython   float64 `json:"dispatch_process_vs_python,omitempty"`
	OpenMs             float64 `json:"open_registry_ms"`
	FirstAnswerMs      float64 `json:"first_answer_ms"`
	FirstAnswerMinMs   float64 `json:"first_answer_min_ms"`
	FirstAnswerRuns    int     `json:"first_answer_runs"`
	VersionProcessMs   float64 `json:"version_process_ms"`
	FirstAnswerRequest string  `json:"first_answer_request"`
}

// firstAnswerRuns is how many times Run times the first answer.
const firstAnswerRuns = 15

// The bounds of Options: a trace pass holds its batch's lengths (about
// 2 KB), a stream request its JSON line (about 300 bytes), so the largest
// trace and stream stay within some hundreds of MB.
const (
	MaxPasses  = 100_000
	MaxStream  = 1_000_000
	MaxMinTime = time.Hour
)

// Options are what attnplug bench measures.
type Options struct {
	// Backend is the name the trace is replayed through.
	Backend string
	// Passes is the forward passes of the trace; RPCPasses those replayed
	// with one gRPC call per layer. Both are in [1, MaxPasses].
	Passes, RPCPasses int
	// MinTime is the least time spent on each in-process measurement, in
	// [0, MaxMinTime].
	MinTime time.Duration
	// Stream is the requests of the varied dispatch stream, in [0,
	// MaxStream]; 0 skips it.
	Stream int
	// Host is the attnplug binary whose processes are timed, HostArgs the
	// flags that make it load the plugins cfg loads.
	Host     string
	HostArgs []string
	// Logger says which plugins did not start.
	Logger hclog.Logger
	// Progress, when set, is called as each measurement starts, with what
	// it measures ("(b) one gRPC call per layer, 40 passes"), from the
	// goroutine of Run; nil says nothing.
	Progress func(step string)
}

// Check returns an error naming the first option out of its bounds
// (flag names, as attnplug bench spells them), or nil.
func (o *Options) Check() error {
	switch {
	case o.Passes < 1 || o.Passes > MaxPasses:
		return fmt.Errorf("--passes: %d is out of range (want 1 to %d)", o.Passes, MaxPasses)
	case o.RPCPasses < 1 || o.RPCPasses > MaxPasses:
		return fmt.Errorf("--rpc-passes: %d is out of range (want 1 to %d)", o.RPCPasses, MaxPasses)
	case o.MinTime < 0 || o.MinTime > MaxMinTime:
		return fmt.Errorf("--min-time: %s is out of range (want 0 to %s)", o.MinTime, MaxMinTime)
	case o.Stream < 0 || o.Stream > MaxStream:
		return fmt.Errorf("--stream: %d is out of range (want 0 to %d; 0 skips the stream)", o.Stream, MaxStream)
	}
	return nil
}

// step tells o.Progress that the measurement what starts.
func (o *Options) step(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// Run measures dispatch through the plugins of cfg: a DeepSeek-V3 trace
// of o.Passes forward passes decided by the rules in process (a), with
// one gRPC call per layer (b) and by the production path (c), each
// answer of (b) and (c) checked against (a); the cold start of every
// plugin; the first answer of a new attnplug dispatch process; and, when
// o.Stream is set, a varied stream through the dispatch pipeline, a new
// process and, when found, sglang's Python code. Options out of their
// bounds are refused (Check); once ctx ends, so does every measurement,
// and Run returns ctx's error.
func Run(ctx context.Context, cfg registry.Config, o Options) (*Result, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	trace := benchTrace(o.Passes, 1)
	res := &Result{Backend: o.Backend, Passes: o.Passes, Layers: deepSeekV3Layers}
	cfg.QuietDeprecated = true // every name is asked on purpose
	reg, err := benchColdStart(ctx, cfg, &o, res)
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	want, err := benchInProcess(ctx, trace, &o, res)
	if err != nil {
		return nil, err
	}
	if err := benchRPC(ctx, cfg, trace, want, &o, res); err != nil {
		return nil, err
	}
	if err := benchProduction(ctx, reg, trace, want, &o, res); err != nil {
		return nil, err
	}
	if err := benchFirstAnswer(ctx, &o, res); err != nil {
		return nil, err
	}
	if o.Stream > 0 {
		if err := benchStream(ctx, reg, &o, res); err != nil {
			return nil, err
		}
	}

	res.InProcessNsPerLayer = res.InProcessNsPerPass / deepSeekV3Layers
	res.RPCNsPerLayer = res.RPCPerLayerNsPerPass / deepSeekV3Layers
	res.ProductionNsPerLayer = res.ProductionNsPerPass / deepSeekV3Layers
	res.ProductionVsInProc = res.ProductionNsPerPass / res.InProcessNsPerPass
	res.RPCVsInProc = res.RPCPerLayerNsPerPass / res.InProcessNsPerPass
	return res, nil
}

// benchColdStart measures the cold start: a registry whose descriptions
// come from the cache, so that New starts nothing, then every plugin at
// once. It returns that registry; the caller closes it.
func benchColdStart(ctx context.Context, cfg registry.Config, o *Options, res *Result) (*registry.Registry, error) {
	o.step("cold start of the plugins")
	warm, err := registry.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	warm.Close()
	t0 := time.Now()
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res.OpenMs = ms(time.Since(t0))
	t0 = time.Now()
	took, err := reg.Start(ctx)
	res.ColdStartMs = ms(time.Since(t0))
	if err != nil {
		o.Logger.Warn("some plugins did not start", "error", err)
	}
	res.ColdStartPlugins = len(took)
	res.PluginStartMs = map[string]float64{}
	for name, d := range took {
		res.PluginStartMs[name] = ms(d)
	}
	res.PluginRSSKiB = map[string]int64{}
	for _, p := range reg.Plugins() {
		if p.PID > 0 {
			res.PluginRSSKiB[p.Name] = rssKiB(p.PID)
		}
	}
	return reg, nil
}

// benchInProcess is (a): the rules called in process, as sglang calls its
// handler, the request of every layer built and decided afresh. It
// returns the answer of each pass, which (b) and (c) are checked against.
func benchInProcess(ctx context.Context, trace []benchPass, o *Options, res *Result) ([]core.Method, error) {
	rules := inproc.Rules()
	rule, ok := rules[o.Backend]
	if !ok {
		rule = rules[core.TritonName] // sglang's registry: a name nobody serves gets triton's
	}
	layer := benchLayer()
	want := make([]core.Method, len(trace))
	o.step("(a) the rules in process, %d passes", len(trace))
	inProc, err := measure(ctx, o.MinTime, func() {
		for i := range trace {
			p := &trace[i]
			for l := 0; l < deepSeekV3Layers; l++ {
				req := core.Request{Backend: o.Backend, Layer: layer, Batch: p.batch, Runtime: p.runtime}
				want[i] = rule.Decide(&req)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	res.InProcessNsPerPass = inProc / float64(len(trace))
	return want, nil
}

// benchRPC is (b): one gRPC call per layer, through a registry of its own
// without the answer cache.
func benchRPC(ctx context.Context, cfg registry.Config, trace []benchPass, want []core.Method, o *Options, res *Result) error {
	layer := benchLayer()
	rpcTrace := trace[:min(o.RPCPasses, len(trace))]
	o.step("(b) one gRPC call per layer, %d passes", len(rpcTrace))
	cfg.NoAnswerCache = true
	rpcReg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer rpcReg.Close()
	for l := 0; l < 3; l++ { // start the plugin and warm the connection
		req := core.Request{Backend: o.Backend, Layer: layer, Batch: rpcTrace[0].batch, Runtime: rpcTrace[0].runtime}
		if _, err := rpcReg.Dispatch(ctx, &req); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for i := range rpcTrace {
		p := &rpcTrace[i]
		for l := 0; l < deepSeekV3Layers; l++ {
			req := core.Request{Backend: o.Backend, Layer: layer, Batch: p.batch, Runtime: p.runtime}
			a, err := rpcReg.Dispatch(ctx, &req)
			if err != nil {
				return err
			}
			if a.Method != want[i] {
				res.Mismatches++
			}
		}
	}
	res.RPCPerLayerNsPerPass = float64(time.Since(t0).Nanoseconds()) / float64(len(rpcTrace))
	return nil
}

// benchProduction is (c): the production path, resolve once, begin a
// pass, one cache lookup per layer; a first, checked round fills the
// cache through the plugin.
func benchProduction(ctx context.Context, reg *registry.Registry, trace []benchPass, want []core.Method, o *Options, res *Result) error {
	o.step("(c) the production path, %d passes", len(trace))
	layer := benchLayer()
	d := reg.Resolve(o.Backend)
	var pass registry.Pass
	production := func(check bool) error {
		for i := range trace {
			p := &trace[i]
			if err := d.BeginInto(&pass, &p.batch, &p.runtime); err != nil {
				return err
			}
			for l := 0; l < deepSeekV3Layers; l++ {
				a, err := pass.Dispatch(ctx, &layer)
				if err != nil {
					return err
				}
				if check && a.Method != want[i] {
					res.Mismatches++
				}
			}
		}
		return nil
	}
	if err := production(true); err != nil {
		return err
	}
	var perr error
	prod, err := measure(ctx, o.MinTime, func() {
		if err := production(false); err != nil {
			perr = err
		}
	})
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	res.ProductionNsPerPass = prod / float64(len(trace))
	res.ProductionAllocs = allocsPerRun(5, func() { _ = production(false) }) / float64(len(trace))
	return nil
}

// WriteText writes r as the table of attnplug bench.
func (r *Result) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "attnplug bench: %d DeepSeek-V3 forward passes of %d layers through %q\n\n", r.Passes, r.Layers, r.Backend)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tns/pass\tns/layer\tvs in-process\t")
	fmt.Fprintf(tw, "(a) rules in process\t%.0f\t%.1f\t1.00x\t\n", r.InProcessNsPerPass, r.InProcessNsPerLayer)
	fmt.Fprintf(tw, "(b) one gRPC call per layer\t%.0f\t%.1f\t%.1fx\t\n", r.RPCPerLayerNsPerPass, r.RPCNsPerLayer, r.RPCVsInProc)
	fmt.Fprintf(tw, "(c) production (answer cache)\t%.0f\t%.1f\t%.2fx\t\n", r.ProductionNsPerPass, r.ProductionNsPerLayer, r.ProductionVsInProc)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nproduction path: %.1f allocations per pass; answers differing from (a): %d\n", r.ProductionAllocs, r.Mismatches)
	fmt.Fprintf(w, "first answer of %s through a new attnplug dispatch process (descriptions cached): median %.1f ms, best %.1f ms of %d; attnplug version: %.1f ms; opening the registry: %.1f ms\n",
		r.FirstAnswerRequest, r.FirstAnswerMs, r.FirstAnswerMinMs, r.FirstAnswerRuns, r.VersionProcessMs, r.OpenMs)
	if r.StreamRequests > 0 {
		fmt.Fprintf(w, "dispatch stream of %d varied requests (JSON in, JSON out), plugins running: %.0f requests/s", r.StreamRequests, r.StreamRequestsPerSecond)
		if r.PythonRequestsPerSecond > 0 {
			fmt.Fprintf(w, "; sglang's Python code on the same stream: %.0f requests/s (%.1fx)", r.PythonRequestsPerSecond, r.StreamVsPython)
		} else if r.PythonSkipped != "" {
			fmt.Fprintf(w, "; Python reference skipped: %s", r.PythonSkipped)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "the same stream end to end, start-up included: attnplug dispatch process %.2f s", r.EndToEndSeconds)
		if r.PythonSeconds > 0 {
			fmt.Fprintf(w, ", Python process %.2f s (%.1fx)", r.PythonSeconds, r.EndToEndVsPython)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "cold start of %d plugins in parallel: %.1f ms\n", r.ColdStartPlugins, r.ColdStartMs)
	names := make([]string, 0, len(r.PluginStartMs))
	for n := range r.PluginStartMs {
		names = append(names, n)
	}
	sort.Strings(names)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  plugin\tstart ms\tRSS MiB")
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\n", n, r.PluginStartMs[n], float64(r.PluginRSSKiB[n])/1024)
	}
	return tw.Flush()
}

// measure runs f until minTime has passed (at least twice) and returns the
// nanoseconds of one run, the best of the runs; once ctx ends it runs f
// no more and returns ctx's error.
func measure(ctx context.Context, minTime time.Duration, f func()) (float64, error) {
	best := 0.0
	start := time.Now()
	for runs := 0; runs < 2 || time.Since(start) < minTime; runs++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t0 := time.Now()
		f()
		ns := float64(time.Since(t0).Nanoseconds())
		if best == 0 || ns < best {
			best = ns
		}
	}
	return best, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rssKiB is the resident memory of a process, from /proc.
func rssKiB(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// hostProcess runs the attnplug binary exe with args and stdin, its output
// kept in memory, and returns how long the process took, start to exit.
func hostProcess(ctx context.Context, exe string, args []string, stdin []byte) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("bench: attnplug %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return took, nil
}

// benchFirstAnswer times a new attnplug dispatch process answering one
// request (after one run that warms the description cache and the page
// cache), and attnplug version, the cost of a process alone.
func benchFirstAnswer(ctx context.Context, o *Options, res *Result) error {
	const line = `{"backend":"fa3","forward_mode":"DECODE"}`
	res.FirstAnswerRequest, res.FirstAnswerRuns = line, firstAnswerRuns
	median := func(args []string, stdin []byte) (med, best float64, err error) {
		if _, err := hostProcess(ctx, o.Host, args, stdin); err != nil {
			return 0, 0, err
		}
		var runs []float64
		for i := 0; i < firstAnswerRuns; i++ {
			d, err := hostProcess(ctx, o.Host, args, stdin)
			if err != nil {
				return 0, 0, err
			}
			runs = append(runs, ms(d))
		}
		sort.Float64s(runs)
		return runs[len(runs)/2], runs[0], nil
	}
	o.step("the first answer of a new attnplug dispatch process, %d runs", firstAnswerRuns)
	var err error
	if res.FirstAnswerMs, res.FirstAnswerMinMs, err = median(append([]string{"dispatch"}, o.HostArgs...), []byte(line+"\n")); err != nil {
		return err
	}
	res.VersionProcessMs, _, err = median([]string{"version"}, nil)
	return err
}

// benchStream times a varied stream of n requests through the dispatch
// pipeline (decode, batch per plugin, encode) of reg, whose plugins run,
// and through a new attnplug dispatch process (start-up and plugin starts
// included); when it can, it times sglang's own Python code, a new
// process too, on the same stream in the same run.
func benchStream(ctx context.Context, reg *registry.Registry, o *Options, res *Result) error {
	n := o.Stream
	rng := rand.New(rand.NewPCG(17, 23))
	var in bytes.Buffer
	for i := 0; i < n; i++ {
		in.Write(reference.Generate(rng))
		in.WriteByte('\n')
	}
	res.StreamRequests = n
	o.step("a stream of %d requests through the dispatch pipeline", n)
	t0 := time.Now()
	if _, err := engine.Stream(ctx, reg, bytes.NewReader(in.Bytes()), io.Discard, engine.StreamOptions{}); err != nil {
		return err
	}
	res.StreamRequestsPerSecond = float64(n) / time.Since(t0).Seconds()
	o.step("the stream through a new attnplug dispatch process")
	took, err := hostProcess(ctx, o.Host, append([]string{"dispatch"}, o.HostArgs...), in.Bytes())
	if err != nil {
		return err
	}
	res.EndToEndSeconds = took.Seconds()
	tmp, err := os.MkdirTemp("", "attnplug-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	py, err := reference.Find(".", tmp)
	if err != nil {
		res.PythonSkipped = err.Error()
		return nil
	}
	o.step("the stream through sglang's Python code")
	t0 = time.Now()
	out, err := py.Output(ctx, in.Bytes(), reg.Platform().String())
	if err != nil {
		res.PythonSkipped = err.Error()
		return nil
	}
	python := time.Since(t0)
	if got := bytes.Count(out, []byte("\n")); got != n {
		res.PythonSkipped = fmt.Sprintf("the Python code answered %d of %d requests", got, n)
		return nil
	}
	res.PythonSeconds = python.Seconds()
	res.PythonRequestsPerSecond = float64(n) / python.Seconds()
	res.StreamVsPython = res.StreamRequestsPerSecond / res.PythonRequestsPerSecond
	res.EndToEndVsPython = res.PythonSeconds / res.EndToEndSeconds
	return nil
}
