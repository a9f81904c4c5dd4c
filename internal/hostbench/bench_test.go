package hostbench

import (
	"bytes"
	"context"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/inproc"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// TestTraceMix: the trace is a function of its seed, holds every kind of
// pass, and each batch is one sglang could send: as many prefix lengths
// as sequence lengths, none past its sequence.
func TestTraceMix(t *testing.T) {
	trace := benchTrace(2000, 1)
	if !reflect.DeepEqual(trace, benchTrace(2000, 1)) {
		t.Fatal("two traces of one seed differ")
	}
	if reflect.DeepEqual(trace, benchTrace(2000, 2)) {
		t.Fatal("traces of two seeds are the same")
	}
	kinds := map[string]int{}
	for i, p := range trace {
		kinds[p.kind]++
		b := p.batch
		if len(b.SeqLens) == 0 || len(b.SeqLens) != len(b.ExtendPrefixLens) {
			t.Fatalf("pass %d (%s): %d sequences, %d prefixes", i, p.kind, len(b.SeqLens), len(b.ExtendPrefixLens))
		}
		for j := range b.SeqLens {
			if b.ExtendPrefixLens[j] < 0 || b.ExtendPrefixLens[j] >= b.SeqLens[j] {
				t.Fatalf("pass %d (%s): prefix %d of a sequence of %d", i, p.kind, b.ExtendPrefixLens[j], b.SeqLens[j])
			}
		}
	}
	for _, k := range []string{"prefill", "chunked-prefill", "target-verify", "decode-graph", "decode"} {
		if kinds[k] == 0 {
			t.Errorf("no %s pass in %v", k, kinds)
		}
	}
	if kinds["decode"] < len(trace)/2 {
		t.Errorf("decode passes %d of %d, want most", kinds["decode"], len(trace))
	}
}

// TestWriteTextListsPlugins: the table names every plugin started, in
// order, and the Python reference only when it ran.
func TestWriteTextListsPlugins(t *testing.T) {
	r := &Result{Backend: "fa3", Passes: 2, Layers: deepSeekV3Layers, InProcessNsPerPass: 1000, ProductionNsPerPass: 500,
		StreamRequests: 10, StreamRequestsPerSecond: 100, PythonSkipped: "no python3",
		PluginStartMs: map[string]float64{"fa3": 10, "aiter": 12}, PluginRSSKiB: map[string]int64{"fa3": 2048, "aiter": 1024}}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if a, f := strings.Index(s, "  aiter"), strings.Index(s, "  fa3"); a < 0 || f < a {
		t.Errorf("plugins not listed in order:\n%s", s)
	}
	if !strings.Contains(s, "Python reference skipped: no python3") || strings.Contains(s, "Python process") {
		t.Errorf("Python reference:\n%s", s)
	}
}

// TestRunReportsProgress: Run tells Options.Progress as each measurement
// starts, in order, over backends in process (no plugin binary; the
// process timed is /bin/true).
func TestRunReportsProgress(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip(err)
	}
	backends, err := inproc.Backends(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var steps []string
	res, err := Run(ctx, registry.Config{Backends: backends, Platform: core.PlatformCUDA, SocketDir: t.TempDir()},
		Options{Backend: "fa3", Passes: 4, RPCPasses: 2, MinTime: time.Millisecond, Host: exe, Logger: hclog.NewNullLogger(),
			Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cold start of the plugins", "(a) the rules in process, 4 passes", "(b) one gRPC call per layer, 2 passes",
		"(c) the production path, 4 passes", "the first answer of a new attnplug dispatch process, 15 runs"}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps:\n%q\nwant\n%q", steps, want)
	}
	if res.Mismatches != 0 {
		t.Errorf("%d answers differ from the rules in process", res.Mismatches)
	}
}
