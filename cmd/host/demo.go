package main

import (
	"context"
	"flag"

	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
)

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug demo [flags]", "")
	if err != nil {
		return err
	}
	batches, err := inventory.DemoBatches()
	if err != nil {
		return err
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	cfg.QuietDeprecated = true // every name is asked on purpose
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()

	refused, err := inventory.Demo(ctx, e.stdout, reg, batches)
	if err != nil {
		return err
	}
	if refused > 0 {
		// As dispatch: exit status 1 when any request was refused
		// (--strict refuses every fallback).
		return &refusedError{refused}
	}
	return nil
}
