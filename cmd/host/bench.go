package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
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

// benchResult is what attnplug bench prints.
type benchResult struct {
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

// firstAnswerRuns is how many times bench times the first answer.
const firstAnswerRuns = 15

func runBench(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "no-cache")
	backend := fs.String("backend", "fa3", "backend name to replay the trace through")
	passes := fs.Int("passes", 2000, "forward passes in the trace")
	rpcPasses := fs.Int("rpc-passes", 40, "forward passes replayed with one gRPC call per layer")
	minTime := fs.Duration("min-time", 300*time.Millisecond, "least time to spend on each in-process measurement")
	asJSON := fs.Bool("json", false, "print one JSON object")
	stream := fs.Int("stream", 200000, "requests of a varied dispatch stream (every backend, mode and flag mixed) to time through the dispatch pipeline and, when python3 and the reference are found, through sglang's Python code; 0 skips it")
	gpu := fs.Bool("gpu", false, "benchmark the device kernels on the CUDA GPU instead: DeepSeek-V3 decode shapes against the copy bandwidth, the bf16 matmul peak and torch, measured in the same run (docs/device.md)")
	python := fs.String("python", "python3", "with --gpu: the python3 (with torch) to compare with; empty skips torch")
	only := fs.String("only", "", "with --gpu: run only the shapes whose name contains this")
	logger, err := h.parse(fs, e, args, "attnplug bench [flags]", "")
	if err != nil {
		return err
	}
	if *gpu {
		return runBenchGPU(ctx, e, *python, *only, *asJSON)
	}
	if *passes <= 0 || *rpcPasses <= 0 {
		return &usageError{"bench: --passes and --rpc-passes must be positive"}
	}
	trace := benchTrace(*passes, 1)
	res := benchResult{Backend: *backend, Passes: *passes, Layers: deepSeekV3Layers}

	// Cold start: a registry whose descriptions come from the cache, so
	// that New starts nothing, then every plugin at once.
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	cfg.QuietDeprecated = true // every name is asked on purpose
	warm, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	warm.Close()
	t0 := time.Now()
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	res.OpenMs = ms(time.Since(t0))
	defer reg.Close()
	t0 = time.Now()
	took, err := reg.Start(ctx)
	res.ColdStartMs = ms(time.Since(t0))
	if err != nil {
		logger.Warn("some plugins did not start", "error", err)
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

	// (a) the rules called in process, as sglang calls its handler: the
	// request of every layer built and decided afresh.
	rules := inproc.Rules()
	rule, ok := rules[*backend]
	if !ok {
		rule = rules[core.TritonName] // sglang's registry: a name nobody serves gets triton's
	}
	layer := benchLayer()
	want := make([]core.Method, len(trace))
	inProc := measure(*minTime, func() {
		for i := range trace {
			p := &trace[i]
			for l := 0; l < deepSeekV3Layers; l++ {
				req := core.Request{Backend: *backend, Layer: layer, Batch: p.batch, Runtime: p.runtime}
				want[i] = rule.Decide(&req)
			}
		}
	})
	res.InProcessNsPerPass = inProc / float64(len(trace))

	// (b) one gRPC call per layer.
	rpcCfg := cfg
	rpcCfg.NoAnswerCache = true
	rpcReg, err := registry.New(ctx, rpcCfg)
	if err != nil {
		return err
	}
	defer rpcReg.Close()
	rpcTrace := trace[:min(*rpcPasses, len(trace))]
	for l := 0; l < 3; l++ { // start the plugin and warm the connection
		req := core.Request{Backend: *backend, Layer: layer, Batch: rpcTrace[0].batch, Runtime: rpcTrace[0].runtime}
		if _, err := rpcReg.Dispatch(ctx, &req); err != nil {
			return err
		}
	}
	t0 = time.Now()
	for i := range rpcTrace {
		p := &rpcTrace[i]
		for l := 0; l < deepSeekV3Layers; l++ {
			req := core.Request{Backend: *backend, Layer: layer, Batch: p.batch, Runtime: p.runtime}
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

	// (c) the production path: resolve once, begin a pass, one cache
	// lookup per layer; warm-up fills the cache through the plugin.
	d := reg.Resolve(*backend)
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
	prod := measure(*minTime, func() {
		if err := production(false); err != nil {
			perr = err
		}
	})
	if perr != nil {
		return perr
	}
	res.ProductionNsPerPass = prod / float64(len(trace))
	res.ProductionAllocs = allocsPerRun(5, func() { _ = production(false) }) / float64(len(trace))

	hostArgs, err := h.processArgs()
	if err != nil {
		return err
	}
	if err := benchFirstAnswer(ctx, hostArgs, &res); err != nil {
		return err
	}
	if *stream > 0 {
		if err := benchStream(ctx, reg, hostArgs, *stream, &res); err != nil {
			return err
		}
	}

	res.InProcessNsPerLayer = res.InProcessNsPerPass / deepSeekV3Layers
	res.RPCNsPerLayer = res.RPCPerLayerNsPerPass / deepSeekV3Layers
	res.ProductionNsPerLayer = res.ProductionNsPerPass / deepSeekV3Layers
	res.ProductionVsInProc = res.ProductionNsPerPass / res.InProcessNsPerPass
	res.RPCVsInProc = res.RPCPerLayerNsPerPass / res.InProcessNsPerPass
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return writeBench(e, &res)
}

func writeBench(e *env, r *benchResult) error {
	fmt.Fprintf(e.stdout, "attnplug bench: %d DeepSeek-V3 forward passes of %d layers through %q\n\n", r.Passes, r.Layers, r.Backend)
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tns/pass\tns/layer\tvs in-process\t")
	fmt.Fprintf(tw, "(a) rules in process\t%.0f\t%.1f\t1.00x\t\n", r.InProcessNsPerPass, r.InProcessNsPerLayer)
	fmt.Fprintf(tw, "(b) one gRPC call per layer\t%.0f\t%.1f\t%.1fx\t\n", r.RPCPerLayerNsPerPass, r.RPCNsPerLayer, r.RPCVsInProc)
	fmt.Fprintf(tw, "(c) production (answer cache)\t%.0f\t%.1f\t%.2fx\t\n", r.ProductionNsPerPass, r.ProductionNsPerLayer, r.ProductionVsInProc)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nproduction path: %.1f allocations per pass; answers differing from (a): %d\n", r.ProductionAllocs, r.Mismatches)
	fmt.Fprintf(e.stdout, "first answer of %s through a new attnplug dispatch process (descriptions cached): median %.1f ms, best %.1f ms of %d; attnplug version: %.1f ms; opening the registry: %.1f ms\n",
		r.FirstAnswerRequest, r.FirstAnswerMs, r.FirstAnswerMinMs, r.FirstAnswerRuns, r.VersionProcessMs, r.OpenMs)
	if r.StreamRequests > 0 {
		fmt.Fprintf(e.stdout, "dispatch stream of %d varied requests (JSON in, JSON out), plugins running: %.0f requests/s", r.StreamRequests, r.StreamRequestsPerSecond)
		if r.PythonRequestsPerSecond > 0 {
			fmt.Fprintf(e.stdout, "; sglang's Python code on the same stream: %.0f requests/s (%.1fx)", r.PythonRequestsPerSecond, r.StreamVsPython)
		} else if r.PythonSkipped != "" {
			fmt.Fprintf(e.stdout, "; Python reference skipped: %s", r.PythonSkipped)
		}
		fmt.Fprintln(e.stdout)
		fmt.Fprintf(e.stdout, "the same stream end to end, start-up included: attnplug dispatch process %.2f s", r.EndToEndSeconds)
		if r.PythonSeconds > 0 {
			fmt.Fprintf(e.stdout, ", Python process %.2f s (%.1fx)", r.PythonSeconds, r.EndToEndVsPython)
		}
		fmt.Fprintln(e.stdout)
	}
	fmt.Fprintf(e.stdout, "cold start of %d plugins in parallel: %.1f ms\n", r.ColdStartPlugins, r.ColdStartMs)
	names := make([]string, 0, len(r.PluginStartMs))
	for n := range r.PluginStartMs {
		names = append(names, n)
	}
	sort.Strings(names)
	tw = tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  plugin\tstart ms\tRSS MiB")
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\n", n, r.PluginStartMs[n], float64(r.PluginRSSKiB[n])/1024)
	}
	return tw.Flush()
}

// measure runs f until minTime has passed (at least twice) and returns the
// nanoseconds of one run, the best of the runs.
func measure(minTime time.Duration, f func()) float64 {
	best := 0.0
	start := time.Now()
	for runs := 0; runs < 2 || time.Since(start) < minTime; runs++ {
		t0 := time.Now()
		f()
		ns := float64(time.Since(t0).Nanoseconds())
		if best == 0 || ns < best {
			best = ns
		}
	}
	return best
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

// hostProcess runs this attnplug binary with args and stdin, its output
// kept in memory, and returns how long the process took, start to exit.
func hostProcess(ctx context.Context, args []string, stdin []byte) (time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err = cmd.Run()
	took := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("bench: attnplug %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return took, nil
}

// benchFirstAnswer times a new attnplug dispatch process answering one
// request (after one run that warms the description cache and the page
// cache), and attnplug version, the cost of a process alone.
func benchFirstAnswer(ctx context.Context, hostArgs []string, res *benchResult) error {
	const line = `{"backend":"fa3","forward_mode":"DECODE"}`
	res.FirstAnswerRequest, res.FirstAnswerRuns = line, firstAnswerRuns
	median := func(args []string, stdin []byte) (med, best float64, err error) {
		if _, err := hostProcess(ctx, args, stdin); err != nil {
			return 0, 0, err
		}
		var runs []float64
		for i := 0; i < firstAnswerRuns; i++ {
			d, err := hostProcess(ctx, args, stdin)
			if err != nil {
				return 0, 0, err
			}
			runs = append(runs, ms(d))
		}
		sort.Float64s(runs)
		return runs[len(runs)/2], runs[0], nil
	}
	var err error
	if res.FirstAnswerMs, res.FirstAnswerMinMs, err = median(append([]string{"dispatch"}, hostArgs...), []byte(line+"\n")); err != nil {
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
func benchStream(ctx context.Context, reg *registry.Registry, hostArgs []string, n int, res *benchResult) error {
	rng := rand.New(rand.NewPCG(17, 23))
	var in bytes.Buffer
	for i := 0; i < n; i++ {
		in.Write(reference.Generate(rng))
		in.WriteByte('\n')
	}
	res.StreamRequests = n
	t0 := time.Now()
	if _, err := engine.Stream(ctx, reg, bytes.NewReader(in.Bytes()), io.Discard, engine.StreamOptions{}); err != nil {
		return err
	}
	res.StreamRequestsPerSecond = float64(n) / time.Since(t0).Seconds()
	took, err := hostProcess(ctx, append([]string{"dispatch"}, hostArgs...), in.Bytes())
	if err != nil {
		return err
	}
	res.EndToEndSeconds = took.Seconds()
	tmp, err := os.MkdirTemp("", "attnplug-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o, err := reference.Find(".", tmp)
	if err != nil {
		res.PythonSkipped = err.Error()
		return nil
	}
	t0 = time.Now()
	out, err := o.Output(ctx, in.Bytes(), reg.Platform().String())
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
