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

// runConform is `attnplug conform PLUGIN_BINARY`: the conformance suite of
// package conformance on one plugin binary, as a readable report or JSON.
// The device-code check asks for the device of --arch (default: this
// machine's GPU, else an example sm_90 device). It fails (exit status 1)
// when any check fails.
func runConform(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of one call to the plugin")
	startTimeout := fs.Duration("start-timeout", 10*time.Second, "deadline of the plugin's start and handshake")
	maxRequests := fs.Int("max-requests", 0, "ask each name at most this many of the generated requests (0: all)")
	maxP99 := fs.Duration("max-p99", 0, "fail when the p99 of a dispatch call is above this (0: no limit)")
	var dev deviceFlags
	dev.register(fs)
	if err := parseFlags(fs, e, args, "attnplug conform [flags] PLUGIN_BINARY"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{fmt.Sprintf("conform: want one plugin binary, got %d arguments", fs.NArg())}
	}
	if *timeout <= 0 || *startTimeout <= 0 || *maxRequests < 0 || *maxP99 < 0 {
		return &usageError{"conform: --timeout and --start-timeout must be positive, --max-requests and --max-p99 not negative"}
	}
	if st, err := os.Stat(fs.Arg(0)); err != nil {
		return &usageError{fmt.Sprintf("conform: plugin binary: %v", err)}
	} else if !st.Mode().IsRegular() {
		return &usageError{fmt.Sprintf("conform: plugin binary %s is not a regular file", fs.Arg(0))}
	}
	device, _, err := dev.device()
	if err != nil {
		return err
	}
	report, err := conformance.Run(ctx, conformance.Options{
		Binary:       fs.Arg(0),
		CallTimeout:  *timeout,
		StartTimeout: *startTimeout,
		MaxRequests:  *maxRequests,
		MaxP99:       *maxP99,
		Device:       &device,
	})
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
		return fmt.Errorf("conform: %s", report.Summary())
	}
	return nil
}
