package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"

	"github.com/attnplug/attnplug/devicehost"
)

// runBenchGPU is attnplug bench --gpu: every decode shape checked against
// the fp64 reference, then timed, beside the floors and torch measured in
// the same run.
func runBenchGPU(ctx context.Context, e *env, python, only string, asJSON bool) error {
	if python != "" {
		if p, err := exec.LookPath(python); err == nil {
			python = p
		} else {
			fmt.Fprintf(e.stderr, "bench: %s not found; torch is not compared\n", python)
			python = ""
		}
	}
	cases, prefill := devicehost.Shapes(only)
	quant := devicehost.QuantShapes(only)
	if len(cases)+len(prefill)+len(quant) == 0 {
		return &usageError{fmt.Sprintf("bench: --only %q matches no shape", only)}
	}
	p := newProgress(e, "attnplug bench --gpu", asJSON)
	p.Step(fmt.Sprintf("%d decode, %d prefill and %d sparse or FP8 shapes, checked and timed on the GPU", len(cases), len(prefill), len(quant)))
	rep, err := devicehost.RunBench(ctx, python, cases, prefill, quant)
	p.Done()
	if err != nil {
		return fmt.Errorf("bench --gpu: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteTable(e.stdout)
	return nil
}
