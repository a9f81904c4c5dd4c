package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/conformance"
	"github.com/attnplug/attnplug/internal/testbin"
)

var (
	bins  *testbin.Bins
	fault string
	liar  string
	lab   string
)

func TestMain(m *testing.M) {
	testbin.Main(m, false, func(b *testbin.Bins) (err error) {
		bins = b
		if fault, err = testbin.BuildFault(filepath.Join(filepath.Dir(b.Dir), "fault")); err != nil {
			return err
		}
		if liar, err = testbin.BuildTestPlugin(filepath.Join(filepath.Dir(b.Dir), "liar"), "liar"); err != nil {
			return err
		}
		lab, err = testbin.BuildTestPlugin(filepath.Join(filepath.Dir(b.Dir), "lab"), "lab")
		return err
	})
}

// skipHeavy skips a test that runs the whole suite many times, saying
// what it runs (what), under -short and under the race detector: these
// runs are CPU-bound, and the suite's own concurrency (a goroutine per
// call in process, the plugin's output read as it comes) is what the
// smaller runs of this package check under it. make test runs them
// without it (go test ./conformance/).
func skipHeavy(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: " + what + " (make test runs it)")
	}
	if raceDetector {
		t.Skip("CPU-bound: " + what + "; make test runs it without the race detector (go test ./conformance/)")
	}
}

func run(t *testing.T, opts conformance.Options) *conformance.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := conformance.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func text(r *conformance.Report) string {
	var b bytes.Buffer
	r.WriteText(&b)
	return b.String()
}

// TestOurPlugins runs the whole suite, every generated request, on every
// plugin of the repository.
func TestOurPlugins(t *testing.T) {
	skipHeavy(t, "the whole suite on every plugin binary, every generated request")
	if len(bins.Plugins) != 6 {
		t.Fatalf("built %d plugins (%v), want 6", len(bins.Plugins), bins.Plugins)
	}
	for _, p := range bins.Plugins {
		t.Run(p, func(t *testing.T) {
			t.Parallel() // as many at once as -parallel, GOMAXPROCS by default
			r := run(t, conformance.Options{Binary: bins.Plugin(p)})
			if !r.Passed {
				t.Fatalf("%s does not conform:\n%s", p, text(r))
			}
			if r.Plugin != p || r.ProtocolVersion != 1 || r.Requests < 1000 || r.Latency.Samples != r.Requests {
				t.Errorf("report: plugin %q, protocol %d, %d requests, %d latency samples\n%s", r.Plugin, r.ProtocolVersion, r.Requests, r.Latency.Samples, text(r))
			}
			if len(r.Checks) != len(conformance.CheckNames()) {
				t.Errorf("%d checks, want %d", len(r.Checks), len(conformance.CheckNames()))
			}
			for i, c := range r.Checks {
				if c.Name != conformance.CheckNames()[i] {
					t.Errorf("check %d is %s, want %s", i, c.Name, conformance.CheckNames()[i])
				}
				// Without NVRTC, fa3 and flashinfer have no device code for
				// the example device: the check says so and is skipped.
				if c.Status == conformance.Skip && c.Name != conformance.CheckKernels && c.Name != conformance.CheckDeviceCode && c.Name != conformance.CheckDeviceRun {
					t.Errorf("check %s skipped: %s", c.Name, c.Detail)
				}
			}
			if testing.Verbose() && p == "fa3" {
				t.Logf("\n%s", text(r))
			}
		})
	}
}

// TestFaults runs the suite on the fault-injection plugin: each fault must
// fail the report, naming the check that caught it, with a detail that says
// what went wrong.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("long: the suite on eleven faults of the fault plugin (make test runs it)")
	}
	for _, tc := range []struct {
		fault  string
		failed []string // checks that must fail
		detail string   // in the text report
	}{
		{"", nil, "PASS: fault conforms"},
		{"undeclared", []string{conformance.CheckCatalog}, "fault answered MHA_NPU, which it does not declare (declared: MLA, MHA)"},
		{"garbage", []string{conformance.CheckCoverage}, "unknown method 200"},
		{"rules=flip", []string{conformance.CheckReads}, "fault reads prefix_sum at "},
		{"refuse", []string{conformance.CheckCoverage}, "the fault plugin refuses every request"},
		{"hang_after=20", []string{conformance.CheckCoverage, conformance.CheckProcess}, "the plugin stopped answering: 2 calls in a row passed the 300ms deadline"},
		{"crash_after=20", []string{conformance.CheckCoverage, conformance.CheckProcess}, "the plugin process exited (exit status 2)"},
		{"protocol=2", []string{conformance.CheckHandshake}, "the plugin speaks protocol version 2, this host speaks 1"},
		{"bad_cookie", []string{conformance.CheckHandshake}, "This binary is a plugin"},
		{"stdout_noise", []string{conformance.CheckRunByHand, conformance.CheckHandshake}, "bytes to stdout (only go-plugin's handshake line may ever go there)"},
		{"sleep=400ms", []string{conformance.CheckUnknownName}, "stopped answering"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			// The faults that hang or sleep are caught by a short deadline;
			// the others get one that a loaded machine does not pass.
			deadline := 5 * time.Second
			if strings.HasPrefix(tc.fault, "hang_after=") || strings.HasPrefix(tc.fault, "sleep=") {
				deadline = 300 * time.Millisecond
			}
			r := run(t, conformance.Options{
				Binary:      fault,
				Env:         []string{"ATTNPLUG_FAULT=" + tc.fault},
				CallTimeout: deadline,
				MaxRequests: 200,
				Probes:      4,
			})
			out := text(r)
			if r.Passed != (tc.failed == nil) {
				t.Fatalf("passed = %v, want %v\n%s", r.Passed, tc.failed == nil, out)
			}
			for _, name := range tc.failed {
				if c, ok := r.Check(name); !ok || c.Status != conformance.Fail {
					t.Errorf("check %s: %+v, want it failed\n%s", name, c, out)
				}
				if !strings.Contains(r.Summary(), name) {
					t.Errorf("summary %q does not name %s", r.Summary(), name)
				}
			}
			if !strings.Contains(out, tc.detail) {
				t.Errorf("report does not say %q:\n%s", tc.detail, out)
			}
			if testing.Verbose() {
				t.Logf("\n%s", out)
			}
		})
	}
}

// TestStartedAsByTheHost: the suite starts the plugin with the host's
// launcher: the fault plugin exits at start without the parent-death pipe,
// and its description is over gRPC's default limit of 4 MiB.
func TestStartedAsByTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("long: the suite on the fault plugin with a 5 MB description (make test runs it)")
	}
	r := run(t, conformance.Options{
		Binary: fault, Env: []string{"ATTNPLUG_FAULT=parent_pipe,describe_pad=5000000"}, MaxRequests: 100, Probes: 4,
	})
	if !r.Passed || len(r.Names) != 2 {
		t.Fatalf("want a pass with the padded alias:\n%s", text(r))
	}
}

// TestReportJSON checks the JSON form of a report.
func TestReportJSON(t *testing.T) {
	r := run(t, conformance.Options{Binary: bins.Plugin("dsa"), MaxRequests: 50, Probes: -1})
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Binary  string   `json:"binary"`
		Plugin  string   `json:"plugin"`
		Names   []string `json:"names"`
		Passed  bool     `json:"passed"`
		Latency struct {
			Samples int   `json:"samples"`
			P50     int64 `json:"p50_ns"`
			P99     int64 `json:"p99_ns"`
		} `json:"latency"`
		Checks []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Passed || back.Plugin != "dsa" || len(back.Names) != 2 || back.Latency.Samples == 0 ||
		back.Latency.P50 <= 0 || back.Latency.P99 < back.Latency.P50 || len(back.Checks) != len(conformance.CheckNames()) {
		t.Fatalf("JSON report: %s", data)
	}
	for _, c := range back.Checks {
		if c.Status == "" || c.Detail == "" {
			t.Errorf("check %q has no status or detail", c.Name)
		}
	}
}

// TestRunErrors checks the errors of a run that cannot be made.
func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := conformance.Run(ctx, conformance.Options{}); err == nil {
		t.Error("no binary: no error")
	}
	if _, err := conformance.Run(ctx, conformance.Options{Binary: t.TempDir() + "/nope"}); err == nil {
		t.Error("missing binary: no error")
	}
}
