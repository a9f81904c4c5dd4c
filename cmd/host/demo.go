package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
)

//go:embed demo_batches.jsonl
var demoBatches []byte

// demoBatch is one sample batch of the demo.
type demoBatch struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
	req     core.Request
}

func loadDemoBatches() ([]demoBatch, error) {
	var out []demoBatch
	sc := bufio.NewScanner(bytes.NewReader(demoBatches))
	for n := 1; sc.Scan(); n++ {
		var b demoBatch
		if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
			return nil, fmt.Errorf("demo batch %d: %w", n, err)
		}
		raw := bytes.Replace(b.Request, []byte(`"backend": ""`), []byte(`"backend": "demo"`), 1)
		if err := jsonl.DecodeRequest(raw, &b.req); err != nil {
			return nil, fmt.Errorf("demo batch %d (%s): %w", n, b.Name, err)
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug demo [flags]", "")
	if err != nil {
		return err
	}
	batches, err := loadDemoBatches()
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

	names := registry.ReferenceNames()
	for _, n := range reg.Names() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	names = append(names, "FA3", "torch_native")

	fmt.Fprintf(e.stdout, "attnplug demo: DeepSeek-V3 layer (fused q/kv-a projection), platform %s\n\n", reg.Platform())
	for i, b := range batches {
		fmt.Fprintf(e.stdout, "  B%d  %s\n", i+1, b.Name)
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	header := []string{"BACKEND", "ANSWERED BY"}
	for i := range batches {
		header = append(header, fmt.Sprintf("B%d", i+1))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	var notes, refusals []string
	refused := 0
	for _, name := range names {
		row := []string{name, ""}
		var answeredBy []string
		for _, b := range batches {
			req := b.req
			req.Backend = name
			a, err := reg.Dispatch(ctx, &req)
			if err != nil {
				row = append(row, "refused")
				refusals = append(refusals, fmt.Sprintf("%s: %v", name, err))
				refused++
				continue
			}
			who := a.Plugin
			if a.Handler != name {
				who = a.Plugin + " (" + a.Handler + " rules)"
			}
			if a.Fallback != "" {
				who += " fallback"
				notes = append(notes, fmt.Sprintf("%s: %s", name, a.Fallback))
			}
			if !slices.Contains(answeredBy, who) {
				answeredBy = append(answeredBy, who)
			}
			row = append(row, a.Method.String())
		}
		row[1] = strings.Join(answeredBy, ", ")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, sec := range []struct {
		title string
		lines []string
	}{{"fallbacks", notes}, {"refused", refusals}} {
		slices.Sort(sec.lines)
		sec.lines = slices.Compact(sec.lines)
		if len(sec.lines) > 0 {
			fmt.Fprintf(e.stdout, "\n%s:\n", sec.title)
			for _, n := range sec.lines {
				fmt.Fprintf(e.stdout, "  %s\n", n)
			}
		}
	}
	if refused > 0 {
		// As dispatch: exit status 1 when any request was refused
		// (--strict refuses every fallback).
		return &refusedError{refused}
	}
	return nil
}
