package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
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
	sel, err := selectBackends(r, &sf, servedHardware(reg))
	if err != nil {
		return err
	}
	for _, w := range sel.Warnings {
		logger.Warn("attention backend falls back", "reason", w)
	}
	r.Plugins = pluginsServed(reg, r.HostInfo())
	r.NamePlatforms(declaredHardware(reg))
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

// pluginsServed lists every plugin of reg with whether this host serves
// it: a usable plugin is served when the hardware of any of its names
// matches info; otherwise the reason says what each name needs.
func pluginsServed(reg *registry.Registry, info core.HostInfo) []detect.PluginInfo {
	out := []detect.PluginInfo{}
	for _, p := range reg.Plugins() {
		pi := detect.PluginInfo{Name: p.Name, Path: p.Path, Names: p.Names, Status: string(p.Status)}
		if pi.Names == nil {
			pi.Names = []string{}
		}
		pi.Served, pi.Reason = pluginServed(reg, p, info)
		out = append(out, pi)
	}
	return out
}

// declaredHardware is the hardware every name served by a plugin of reg
// declares.
func declaredHardware(reg *registry.Registry) []core.Hardware {
	var hw []core.Hardware
	for _, name := range reg.Names() {
		if h, _, ok := reg.Handler(name); ok {
			hw = append(hw, h.Hardware...)
		}
	}
	return hw
}

// pluginServed reports whether the host serves plugin p on info, and why
// not: every name the plugin serves, an alias (tokenspeed_mla, nsa)
// too, with what its hardware needs.
func pluginServed(reg *registry.Registry, p registry.PluginInfo, info core.HostInfo) (bool, string) {
	if p.Status == registry.StatusBroken || p.Status == registry.StatusShadowed {
		return false, fmt.Sprintf("%s: %s", p.Status, p.Reason)
	}
	// Names with the same reason share it: "flashinfer, flashmla: needs ...".
	var reasons []string
	names := map[string][]string{}
	for _, name := range p.Names {
		hi, _, ok := reg.Handler(name)
		if !ok {
			continue
		}
		ok, reason := core.SupportsAny(hi.Hardware, info)
		if ok {
			return true, ""
		}
		if _, seen := names[reason]; !seen {
			reasons = append(reasons, reason)
		}
		names[reason] = append(names[reason], name)
	}
	if len(reasons) == 0 {
		return false, "serves no backend name here"
	}
	why := make([]string, len(reasons))
	for i, r := range reasons {
		why[i] = strings.Join(names[r], ", ") + ": " + r
	}
	return false, strings.Join(why, "; ")
}
