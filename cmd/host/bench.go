package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/attnplug/attnplug/internal/hostbench"
)

func runBench(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "no-cache")
	backend := fs.String("backend", "fa3", "backend name to replay the trace through")
	passes := fs.Int("passes", 2000, fmt.Sprintf("forward passes in the trace (1 to %d)", hostbench.MaxPasses))
	rpcPasses := fs.Int("rpc-passes", 40, fmt.Sprintf("forward passes replayed with one gRPC call per layer (1 to %d)", hostbench.MaxPasses))
	minTime := fs.Duration("min-time", 300*time.Millisecond, fmt.Sprintf("least time to spend on each in-process measurement (0 to %s)", hostbench.MaxMinTime))
	asJSON := fs.Bool("json", false, "print one JSON object")
	stream := fs.Int("stream", 200000, fmt.Sprintf("requests of a varied dispatch stream (every backend, mode and flag mixed) to time through the dispatch pipeline and, when python3 and the reference are found, through sglang's Python code (0 to %d; 0 skips it)", hostbench.MaxStream))
	gpu := fs.Bool("gpu", false, "benchmark the plugins' device kernels on the CUDA GPU instead: DeepSeek-V3 decode, prefill, sparse and FP8 shapes against the copy bandwidth, the bf16 matmul peak and torch, measured in the same run (docs/device.md)")
	var g gpuBenchFlags
	fs.StringVar(&g.python, "python", "python3", "with --gpu: the python3 (with torch) to compare with; empty skips torch")
	fs.StringVar(&g.only, "only", "", "with --gpu: run only the shapes whose name contains this (or any of several, comma-separated)")
	fs.StringVar(&g.targets, "targets", defaultTargets, "with --gpu: the targets the rows are judged against")
	fs.StringVar(&g.dense, "dense-backend", "fa3", "with --gpu: the backend whose plugin plans the dense decode, FP8 decode and prefill shapes")
	fs.StringVar(&g.sparse, "sparse-backend", "dsa", "with --gpu: the backend whose plugin plans the sparse (DeepSeek sparse attention) shapes")
	fs.StringVar(&g.plot, "plot", "", "with --gpu: also draw every row against its floor (and torch) as an SVG chart into this file")
	plotFrom := fs.String("plot-from", "", "with --plot and without --gpu: draw the chart of this earlier bench --gpu --json output")
	logger, err := h.parse(fs, e, args, "attnplug bench [flags]", "")
	if err != nil {
		return err
	}
	switch {
	case *plotFrom != "" && (*gpu || g.plot == ""):
		return &usageError{"bench: --plot-from draws an earlier run's chart into --plot's file, without --gpu"}
	case *plotFrom != "":
		return plotEarlierRun(*plotFrom, g.plot)
	case g.plot != "" && !*gpu:
		return &usageError{"bench: --plot draws the chart of a --gpu run (or, with --plot-from, of an earlier one)"}
	}
	if *gpu {
		reg, err := h.open(ctx, logger)
		if err != nil {
			return err
		}
		defer reg.Close()
		return runBenchGPU(ctx, e, reg, g, *asJSON)
	}
	o := hostbench.Options{Backend: *backend, Passes: *passes, RPCPasses: *rpcPasses, MinTime: *minTime,
		Stream: *stream, Logger: logger}
	if err := o.Check(); err != nil {
		return &usageError{"bench: " + err.Error()}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	if o.HostArgs, err = h.processArgs(); err != nil {
		return err
	}
	o.Host = exe
	// A progress line on a terminal; nothing when stderr is piped or the
	// output is JSON. It is cleared before anything else is written.
	p := newProgress(e, "attnplug bench", *asJSON)
	if p != nil {
		o.Progress = p.Step
	}
	res, err := hostbench.Run(ctx, cfg, o)
	p.Done()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return res.WriteText(e.stdout)
}

// newProgress returns the progress line of the command name on e's stderr
// when stderr is a terminal and quiet is not set (--json), else nil.
func newProgress(e *env, name string, quiet bool) *hostbench.Progress {
	if quiet || e.isTerminal == nil || !e.isTerminal(e.stderr) {
		return nil
	}
	return hostbench.NewProgress(e.stderr, name)
}
