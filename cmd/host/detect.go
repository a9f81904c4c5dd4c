package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
)

// runDetect is "attnplug detect": the hardware, each device's verdict, the
// default backends, the backends chosen with the overrides, and which
// plugins this hardware can run.
func runDetect(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "platform", "strict")
	var sf selectFlags
	sf.register(fs)
	root := fs.String("root", "/", "directory holding sys/, proc/ and dev/ (a fixture tree; libcuda is asked only for /)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	logger, err := h.parse(fs, e, args, "attnplug detect [flags]", "")
	if err != nil {
		return err
	}
	tp, err := sf.tp()
	if err != nil {
		return err
	}
	r, err := detectRoot(ctx, *root, tp)
	if err != nil {
		return err
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	if p, err := core.ParsePlatform(r.Platform); h.platform == "" && err == nil && p != core.PlatformUnset {
		// Requests that give no platform get the one of the hardware read
		// (--root may name another machine's).
		cfg.Platform = p
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	sel, err := selectBackends(r, &sf, inventory.ServedHardware(reg))
	if err != nil {
		return err
	}
	for _, w := range sel.Warnings {
		logger.Warn("attention backend falls back", "reason", w)
	}
	r.Plugins = inventory.PluginsServed(reg, r.HostInfo())
	r.NamePlatforms(inventory.DeclaredHardware(reg))
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if err := detect.WriteTable(e.stdout, r); err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "\nselected (%s, tp %d):  prefill=%s (%s)  decode=%s (%s)\n",
		sel.Attention, sel.TPSize, sel.Prefill, sel.PrefillSource, sel.Decode, sel.DecodeSource)
	return err
}

// runDoctor is "attnplug doctor": every unusable device (and an unusable
// AMX) with what to do about it.
func runDoctor(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	root := fs.String("root", "/", "directory holding sys/, proc/ and dev/ (a fixture tree; libcuda is asked only for /)")
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	if err := parseFlags(fs, e, args, "attnplug doctor [flags]"); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	r, err := detectRoot(ctx, *root, 1)
	if err != nil {
		return err
	}
	findings := detect.Doctor(r)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(findings)
	}
	return detect.WriteDoctor(e.stdout, findings)
}

// detectRoot detects the hardware under root. Only the real root asks
// libcuda: a fixture tree has no driver behind it.
func detectRoot(ctx context.Context, root string, tp int) (*detect.Report, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("--root: %v", err)}
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, &usageError{fmt.Sprintf("--root: %v", err)}
	} else if !st.IsDir() {
		return nil, &usageError{fmt.Sprintf("--root: %s is not a directory", root)}
	}
	r, err := detect.Detect(ctx, detect.Options{Root: abs, TPSize: tp, NoDriverQuery: abs != "/"})
	if err != nil {
		return nil, err
	}
	return r, nil
}
