package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/attnplug/attnplug/conformance"
)

// maxConformProbes bounds --probes: each base is varied in every quantity
// and a name's requests are made before they are asked, so memory grows
// with it (fa3's whole run peaked at some 600 MB at 4096).
const maxConformProbes = 4096

// runConform is `attnplug conform PLUGIN_BINARY`: the conformance suite of
// package conformance on one plugin binary, as a readable report or JSON.
// Flags may come before or after the binary. The device-code check asks
// for the device of --arch (default: this machine's GPU, else an example
// sm_90 device); the plans it checks run on this machine's GPU, when it
// has one and --arch is not given, and the report says why they did not
// otherwise. It fails (exit status 1) when any check fails.
func runConform(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of one call to the plugin")
	startTimeout := fs.Duration("start-timeout", 10*time.Second, "deadline of the plugin's start and handshake")
	maxRequests := fs.Int("max-requests", 0, "ask each name at most this many of the fixed requests (0: all); the random probes come besides")
	maxP99 := fs.Duration("max-p99", 0, "fail when the p99 of a dispatch call is above this (0: no limit)")
	budget := fs.Duration("latency-budget", conformance.DefaultLatencyBudget, "fail when the rules take longer than this a dispatch call: the median call less the round trip measured in the same run (0: no budget)")
	seed := fs.Uint64("seed", 0, "seed of the random probes; a run with the seed a report gives asks the same requests (0: pick one)")
	probes := fs.Int("probes", 24, fmt.Sprintf("random base requests of each name to vary one quantity at a time (0: none; at most %d)", maxConformProbes))
	var dev deviceFlags
	dev.register(fs)
	pos, err := parseInterspersed(fs, e, args, "attnplug conform [flags] PLUGIN_BINARY [flags]")
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Sprintf("conform: want one plugin binary, got %d arguments", len(pos))}
	}
	if *timeout <= 0 || *startTimeout <= 0 || *maxRequests < 0 || *maxP99 < 0 || *budget < 0 {
		return &usageError{"conform: --timeout and --start-timeout must be positive; --max-requests, --max-p99 and --latency-budget not negative"}
	}
	if *probes < 0 || *probes > maxConformProbes {
		return &usageError{fmt.Sprintf("conform: --probes: %d is out of range (want 0 to %d)", *probes, maxConformProbes)}
	}
	if st, err := os.Stat(pos[0]); err != nil {
		return &usageError{fmt.Sprintf("conform: plugin binary: %v", err)}
	} else if !st.Mode().IsRegular() {
		return &usageError{fmt.Sprintf("conform: plugin binary %s is not a regular file", pos[0])}
	}
	device, which, err := dev.device()
	if err != nil {
		return err
	}
	var launch conformance.LaunchFunc
	var noLaunch string
	switch {
	case which == deviceHere:
		// The device code checked runs here too, against the reference.
		l, release, err := gpuLaunch()
		if err != nil {
			fmt.Fprintf(e.stderr, "attnplug conform: the plans will not run on this GPU: %v\n", err)
			noLaunch = "they cannot run on this GPU: " + err.Error()
		} else {
			defer release()
			launch = l
		}
	case dev.arch != "":
		noLaunch = "--arch asks for an example device; plans run on this machine's GPU, without --arch"
	default:
		noLaunch = "no GPU here"
	}
	opts := conformance.Options{
		Binary:        pos[0],
		CallTimeout:   *timeout,
		StartTimeout:  *startTimeout,
		MaxRequests:   *maxRequests,
		MaxP99:        *maxP99,
		LatencyBudget: *budget,
		Seed:          *seed,
		Probes:        *probes,
		Device:        &device,
		Launch:        launch,
		NoLaunch:      noLaunch,
	}
	if *budget == 0 {
		opts.LatencyBudget = -1 // no budget
	}
	if *probes == 0 {
		opts.Probes = -1
	}
	report, err := conformance.Run(ctx, opts)
	if report == nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(report); werr != nil {
			return werr
		}
	} else if werr := report.WriteText(e.stdout); werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if !report.Passed {
		return fmt.Errorf("conform: %s (seed %d)", report.Summary(), report.Seed)
	}
	return nil
}

// parseInterspersed parses args with fs, flags before and after the
// arguments that are not flags, as `conform BIN --json` writes them; "--"
// ends the flags. It returns the other arguments in order.
func parseInterspersed(fs *flag.FlagSet, e *env, args []string, usage string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, e, args, usage); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs stopped at rest[0]: after "--" everything is an argument.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
