package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"

	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/registry"
)

// gpuBenchFlags are bench's flags for --gpu.
type gpuBenchFlags struct {
	python, only, targets string
	dense, sparse         string
	plot                  string // the SVG chart's file, or ""
}

// runBenchGPU is attnplug bench --gpu: every shape checked against the
// fp64 reference, then timed, beside the floors and torch measured in the
// same run, and judged against the targets. The plans come from reg, the
// plugins' registry, as every host's do: the dense shapes' from the
// plugin serving f.dense, the sparse ones' from the one serving f.sparse.
func runBenchGPU(ctx context.Context, e *env, reg *registry.Registry, f gpuBenchFlags, asJSON bool) error {
	python := f.python
	if python != "" {
		if p, err := exec.LookPath(python); err == nil {
			python = p
		} else {
			fmt.Fprintf(e.stderr, "bench: %s not found; torch is not compared\n", python)
			python = ""
		}
	}
	decode, prefill, quant := devicecheck.Shapes(f.only)
	if len(decode)+len(prefill)+len(quant) == 0 {
		return &usageError{fmt.Sprintf("bench: --only %q matches no shape", f.only)}
	}
	targets, err := devicecheck.LoadTargets(f.targets)
	switch {
	case errors.Is(err, fs.ErrNotExist) && f.targets == defaultTargets:
		fmt.Fprintf(e.stderr, "bench: no %s here; the rows are not judged against the targets (--targets names the file)\n", defaultTargets)
	case err != nil:
		return &usageError{"bench: --targets: " + err.Error()}
	}
	env, err := devicecheck.Open(reg)
	if err != nil {
		return fmt.Errorf("bench --gpu: %w", err)
	}
	defer env.Close()
	p := newProgress(e, "attnplug bench --gpu", asJSON)
	p.Step(fmt.Sprintf("%d decode, %d prefill and %d sparse or FP8 shapes, checked and timed on the GPU", len(decode), len(prefill), len(quant)))
	rep, err := devicecheck.RunBench(ctx, env, devicecheck.BenchConfig{Decode: decode, Prefill: prefill, Quant: quant,
		Dense: f.dense, Sparse: f.sparse, Python: python, Targets: targets})
	p.Done()
	if err != nil {
		return fmt.Errorf("bench --gpu: %w", err)
	}
	if f.plot != "" {
		if err := writePlot(rep, f.plot); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteTable(e.stdout)
	return nil
}

// defaultTargets is where bench --gpu looks for the targets without
// --targets: the repository's, from its root.
const defaultTargets = "docs/bench/targets.json"

// plotEarlierRun draws the chart of an earlier bench --gpu --json output,
// file from, into file to.
func plotEarlierRun(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("bench: --plot-from: %w", err)
	}
	var rep devicecheck.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("bench: --plot-from %s: not the output of bench --gpu --json: %w", from, err)
	}
	return writePlot(&rep, to)
}

// writePlot writes rep's chart (devicecheck.Report.WriteSVG) into file
// path, whole or not at all.
func writePlot(rep *devicecheck.Report, path string) error {
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		return fmt.Errorf("bench: --plot %s: %w", path, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	return nil
}
