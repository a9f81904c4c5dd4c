package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
)

func runPlugins(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("plugins", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "platform", "strict")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	withKernels := fs.Bool("kernels", false, "print the kernel catalog of every name instead")
	if err := parseFlags(fs, e, args, "attnplug plugins [flags]"); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	reg, err := h.open(ctx, e)
	if err != nil {
		return err
	}
	defer reg.Close()
	list := reg.Plugins()
	if *withKernels {
		return kernelsTable(e.stdout, reg, list, *asJSON)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	dirs, _ := h.dirs()
	if len(list) == 0 {
		fmt.Fprintf(e.stdout, "no plugins found in %s (want files named attnplug-backend-<name>)\n", strings.Join(dirs, ":"))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tVERSION\tSTATUS\tLOCK\tNAMES\tPATH")
	for _, p := range list {
		names := strings.Join(p.Names, ",")
		for alias, of := range p.Aliases {
			names = strings.Replace(names, alias, alias+"(="+of+")", 1)
		}
		if names == "" {
			names = "-"
		}
		version := p.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, version, p.Status, lockStatus(h.lock, p), names, p.Path)
		if p.Reason != "" {
			for i, line := range strings.Split(strings.TrimSpace(p.Reason), "\n") {
				label := "reason: "
				if i > 0 {
					label = "        "
				}
				fmt.Fprintf(tw, "\t\t\t\t\t%s%s\n", label, strings.TrimSpace(line))
			}
		}
	}
	return tw.Flush()
}
