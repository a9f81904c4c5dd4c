package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

func runVersion(_ context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, e, args, "attnplug version"); err != nil {
		return err
	}
	mod := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		mod = bi.Main.Version
	}
	fmt.Fprintf(e.stdout, "attnplug %s (core rules %s, plugin protocol %d)\n", mod, core.Version, wire.ProtocolVersion)
	return nil
}
