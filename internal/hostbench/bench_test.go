package hostbench

import (
	"bytes"
	"context"
	"errors"
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

// inProcess returns the configuration of a Run over the backends in
// process (no plugin binary) and its options: fa3's trace of 4 passes, 2
// of them over gRPC, the process timed /bin/true.
func inProcess(t *testing.T) (registry.Config, Options) {
	t.Helper()
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip(err)
	}
	backends, err := inproc.Backends(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return registry.Config{Backends: backends, Platform: core.PlatformCUDA, SocketDir: t.TempDir()},
		Options{Backend: "fa3", Passes: 4, RPCPasses: 2, MinTime: time.Millisecond, Host: exe, Logger: hclog.NewNullLogger()}
}

// TestRunReportsProgress: Run tells Options.Progress as each measurement
// starts, in order.
func TestRunReportsProgress(t *testing.T) {
	cfg, o := inProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var steps []string
	o.Progress = func(s string) { steps = append(steps, s) }
	res, err := Run(ctx, cfg, o)
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

// TestOptionsCheck: each option out of its bounds is refused, named by its
// flag with its value and the bounds; the bounds themselves pass.
func TestOptionsCheck(t *testing.T) {
	ok := Options{Passes: 1, RPCPasses: MaxPasses, MinTime: MaxMinTime, Stream: MaxStream}
	if err := ok.Check(); err != nil {
		t.Fatalf("options at their bounds: %v", err)
	}
	if err := (&Options{Passes: MaxPasses, RPCPasses: 1}).Check(); err != nil {
		t.Fatalf("options at their other bounds: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Passes = 0 }, "--passes: 0 is out of range (want 1 to 100000)"},
		{func(o *Options) { o.Passes = MaxPasses + 1 }, "--passes: 100001 is out of range"},
		{func(o *Options) { o.RPCPasses = -1 }, "--rpc-passes: -1 is out of range"},
		{func(o *Options) { o.RPCPasses = 1 << 40 }, "--rpc-passes: 1099511627776 is out of range"},
		{func(o *Options) { o.MinTime = -time.Nanosecond }, "--min-time: -1ns is out of range (want 0 to 1h0m0s)"},
		{func(o *Options) { o.MinTime = MaxMinTime + 1 }, "--min-time: 1h0m0.000000001s is out of range"},
		{func(o *Options) { o.Stream = -1 }, "--stream: -1 is out of range (want 0 to 1000000; 0 skips the stream)"},
		{func(o *Options) { o.Stream = MaxStream + 1 }, "--stream: 1000001 is out of range"},
	} {
		o := ok
		tc.edit(&o)
		err := o.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check() = %v, want %q", err, tc.want)
		}
	}
}

// TestRunEndsWithItsContext: a measurement asked to take an hour ends once
// Run's context does, and Run returns the context's error. The context
// ends as the rules in process start to be timed.
func TestRunEndsWithItsContext(t *testing.T) {
	cfg, o := inProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.MinTime = MaxMinTime
	o.Progress = func(s string) {
		if strings.HasPrefix(s, "(a)") {
			cancel()
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg, o)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want %v", err, context.Canceled)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run still measuring a minute after its context ended")
	}
}
