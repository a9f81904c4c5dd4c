package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/inproc"
	"github.com/hashicorp/go-hclog"
)

// inProcessOpts keeps the in-process runs short: the plugins' binary runs
// ask every generated request.
var inProcessOpts = conformance.Options{MaxRequests: 300, Seed: 5}

func runBackend(t *testing.T, b core.Backend, opts conformance.Options) *conformance.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := conformance.RunBackend(ctx, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBackendsInProcess runs the backend layer on the triton rules (alone,
// and with backendkit's kernels) and on every plugin's rules, linked into
// this process: the same checks Run runs over a plugin's connection, in
// the same order.
func TestBackendsInProcess(t *testing.T) {
	triton, err := core.NewRuleBackend(core.PluginCore, core.Version, nil, core.TritonRule())
	if err != nil {
		t.Fatal(err)
	}
	backends := map[string]core.Backend{core.PluginCore: triton, core.PluginCore + "+kernels": backendkit.New(triton)}
	plugins, err := inproc.Backends(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range plugins {
		d, err := b.Describe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		backends[d.Name] = b
	}
	if len(backends) != 8 {
		t.Fatalf("%d backends, want triton twice and 6 plugins' rules", len(backends))
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			r := runBackend(t, b, inProcessOpts)
			if !r.Passed {
				t.Fatalf("%s does not conform in process:\n%s", name, text(r))
			}
			if r.Plugin != strings.TrimSuffix(name, "+kernels") || r.Binary != "" || r.PID != 0 || r.Requests < 100 {
				t.Errorf("report: plugin %q, binary %q, pid %d, %d requests", r.Plugin, r.Binary, r.PID, r.Requests)
			}
			want := conformance.BackendCheckNames()
			if len(r.Checks) != len(want) {
				t.Fatalf("%d checks, want %d:\n%s", len(r.Checks), len(want), text(r))
			}
			for i, c := range r.Checks {
				if c.Name != want[i] {
					t.Errorf("check %d is %s, want %s", i, c.Name, want[i])
				}
				// The triton rules declare kernels that a host runs itself;
				// without NVRTC, fa3 and flashinfer have no device code for
				// the example device.
				device := c.Name == conformance.CheckDeviceCode || c.Name == conformance.CheckDeviceRun
				skippable := device || (name == core.PluginCore && c.Name == conformance.CheckKernels)
				if c.Status == conformance.Skip && !skippable {
					t.Errorf("check %s skipped: %s", c.Name, c.Detail)
				}
				// Device code that could not be checked here, or that the
				// backend does not declare, is not checked, and says so:
				// never a pass, never a plain skip.
				if device && (c.Status == conformance.Skip ||
					name == "aiter" && (c.Status != conformance.NotChecked || c.Detail != "not checked: the plugin declares no device code")) {
					t.Errorf("%s: %s %s: %s", name, c.Name, c.Status, c.Detail)
				}
			}
			if !strings.Contains(text(r), "in process") {
				t.Errorf("the text report does not say the backend ran in process:\n%s", text(r))
			}
			if testing.Verbose() && (name == "fa3" || name == core.PluginCore) {
				t.Logf("\n%s", text(r))
			}
		})
	}
}

// TestTritonHonoursTheContract: core.Triton, the fallback, is a
// core.Backend like any other: it serves "triton" and refuses other names
// as unknown (the registry asks it for "triton" when it answers a name
// nobody serves), so every check passes, the unknown-name check included.
func TestTritonHonoursTheContract(t *testing.T) {
	r := runBackend(t, core.Triton{}, inProcessOpts)
	if failed := r.Failed(); len(failed) != 0 {
		t.Fatalf("want no check failed:\n%s", text(r))
	}
	if c, _ := r.Check(conformance.CheckUnknownName); c.Status != conformance.Pass {
		t.Errorf("unknown-name check: %+v", c)
	}
	if c, _ := r.Check(conformance.CheckBatch); c.Status != conformance.Skip || !strings.Contains(c.Detail, "not a core.BatchBackend") {
		t.Errorf("batch check of a backend without DispatchBatch: %+v", c)
	}
}

// broken is an in-process backend that breaks on command.
type broken struct {
	core.BatchBackend
	mode  string
	calls atomic.Int64
}

func (b *broken) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	switch n := b.calls.Add(1); {
	case b.mode == "mutate" && req.Batch.SeqLens != nil:
		req.Batch.SeqLens[0]++
	case b.mode == "panic" && n > 30:
		var lens []int64
		_ = lens[n] // an index out of range, as a careless rule would
	case b.mode == "hang" && n > 30:
		select {} // never return, whatever ctx says
	case b.mode == "refuse_wrongly" && req.Validate() != nil:
		return 0, errors.New("no")
	}
	return b.BatchBackend.Dispatch(ctx, req)
}

// TestBackendBreaksInProcess: what a backend does wrong in the host's
// process fails the check that must catch it, with a message that says
// what, and never hangs or crashes the suite.
func TestBackendBreaksInProcess(t *testing.T) {
	for _, tc := range []struct {
		mode, check string
		says        []string
	}{
		{"mutate", conformance.CheckMutation, []string{"the rules changed the request they were given: seq_lens ["}},
		{"panic", conformance.CheckCoverage, []string{"the backend panicked in Dispatch: runtime error: index out of range"}},
		{"hang", conformance.CheckCoverage, []string{"the backend stopped answering: 2 calls in a row passed the 100ms deadline"}},
		{"refuse_wrongly", conformance.CheckBadRequests, []string{"was refused with no; want an invalid-request error"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rb, err := core.NewRuleBackend(core.PluginCore, core.Version, nil, core.TritonRule())
			if err != nil {
				t.Fatal(err)
			}
			opts := inProcessOpts
			opts.CallTimeout = 100 * time.Millisecond
			r := runBackend(t, &broken{BatchBackend: rb, mode: tc.mode}, opts)
			c, _ := r.Check(tc.check)
			if r.Passed || c.Status != conformance.Fail {
				t.Fatalf("check %s: %s, want fail\n%s", tc.check, c.Status, text(r))
			}
			all := c.Detail + "\n" + strings.Join(c.Problems, "\n")
			for _, want := range tc.says {
				if !strings.Contains(all, want) {
					t.Errorf("check %s does not say %q:\n%s", tc.check, want, text(r))
				}
			}
			if !slices.Contains(conformance.BackendCheckNames(), tc.check) {
				t.Errorf("%s is not a check of the backend layer", tc.check)
			}
		})
	}
}

// TestRunBackendErrors: no backend is an error, not a report.
func TestRunBackendErrors(t *testing.T) {
	if _, err := conformance.RunBackend(context.Background(), nil, conformance.Options{}); err == nil {
		t.Error("no backend: no error")
	}
}
