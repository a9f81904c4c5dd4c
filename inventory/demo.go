package inventory

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
)

//go:embed demo_batches.jsonl
var demoBatches []byte

// DemoBatch is one sample batch of attnplug demo.
type DemoBatch struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
	req     core.Request
}

// DemoBatches returns the sample batches of attnplug demo: DeepSeek-V3
// layers (fused q/kv-a projection) of every forward mode.
func DemoBatches() ([]DemoBatch, error) {
	var out []DemoBatch
	sc := bufio.NewScanner(bytes.NewReader(demoBatches))
	for n := 1; sc.Scan(); n++ {
		var b DemoBatch
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

// Demo writes the table of attnplug demo: every name sglang knows, every
// name reg serves, and FA3 and torch_native, each decided by reg on each
// of batches, with who answered, and the fallbacks and refusals below it.
// It returns how many answers were refused.
func Demo(ctx context.Context, w io.Writer, reg *registry.Registry, batches []DemoBatch) (refused int, err error) {
	names := registry.ReferenceNames()
	for _, n := range reg.Names() {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	names = append(names, "FA3", "torch_native")

	fmt.Fprintf(w, "attnplug demo: DeepSeek-V3 layer (fused q/kv-a projection), platform %s\n\n", reg.Platform())
	for i, b := range batches {
		fmt.Fprintf(w, "  B%d  %s\n", i+1, b.Name)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	header := []string{"BACKEND", "ANSWERED BY"}
	for i := range batches {
		header = append(header, fmt.Sprintf("B%d", i+1))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	var notes, refusals []string
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
		return 0, err
	}
	for _, sec := range []struct {
		title string
		lines []string
	}{{"fallbacks", notes}, {"refused", refusals}} {
		slices.Sort(sec.lines)
		sec.lines = slices.Compact(sec.lines)
		if len(sec.lines) > 0 {
			fmt.Fprintf(w, "\n%s:\n", sec.title)
			for _, n := range sec.lines {
				fmt.Fprintf(w, "  %s\n", n)
			}
		}
	}
	return refused, nil
}
