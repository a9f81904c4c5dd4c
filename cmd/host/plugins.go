package main

import (
	"context"
	"encoding/json"
	"flag"

	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
)

func runPlugins(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("plugins", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "platform", "strict")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	withKernels := fs.Bool("kernels", false, "print the kernel catalog of every name instead, with the device code of the plugins that hand it")
	var dev deviceFlags
	dev.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug plugins [flags]", "")
	if err != nil {
		return err
	}
	if dev.arch != "" && !*withKernels {
		return &usageError{"plugins: --arch needs --kernels"}
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	list := reg.Plugins()
	if *withKernels {
		return inventory.WriteKernels(ctx, e.stdout, reg, list, dev.device, *asJSON)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	return inventory.WritePlugins(e.stdout, list, cfg.Lock, cfg.PluginDirs)
}
