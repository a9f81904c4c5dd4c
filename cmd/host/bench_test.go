package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/devicecheck"
)

func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug bench, which measures for seconds (make test runs it)")
	}
	res := host(t, bins, "", "bench", "--json", "--passes", "40", "--rpc-passes", "2", "--min-time", "1ms", "--stream", "2000")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatalf("%v:\n%s", err, res.stdout)
	}
	for _, k := range []string{"in_process_ns_per_pass", "rpc_per_layer_ns_per_pass", "production_ns_per_pass", "cold_start_ms", "dispatch_stream_requests_per_s", "first_answer_ms", "version_process_ms", "dispatch_process_s"} {
		if v, ok := got[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, got[k])
		}
	}
	if got["mismatches"] != 0.0 {
		t.Errorf("the production path answered %v requests differently from the rules in process", got["mismatches"])
	}
	if got["production_allocs_per_pass"] != 0.0 {
		t.Errorf("production path allocates %v per pass", got["production_allocs_per_pass"])
	}
	if n, _ := got["cold_start_plugins"].(float64); int(n) != len(bins.Plugins) {
		t.Errorf("cold start of %v plugins, want %d", got["cold_start_plugins"], len(bins.Plugins))
	}
}

// TestBenchPlotFrom: bench --plot-from draws an earlier bench --gpu --json
// run's chart into --plot's file without a GPU; --plot needs a run to draw,
// and a file that is not such an output is named.
func TestBenchPlotFrom(t *testing.T) {
	dir := t.TempDir()
	rep := devicecheck.Report{When: "2026-12-05T16:19:07Z", Floors: devicecheck.Floors{Device: "NVIDIA H100 80GB HBM3", CopyTBs: 3, MatmulTFLOPs: 800},
		Decode: []devicecheck.BenchResult{{Name: "h16_b16_s4096", US: 40, FloorUS: 20, TBs: 1.5, TFLOPs: 40, TorchUS: 80}}}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run.json")
	if err := os.WriteFile(run, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run.svg")
	res := host(t, bins, "", "bench", "--plot-from", run, "--plot", out)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	svg, err := os.ReadFile(out)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "h16_b16_s4096") {
		t.Fatalf("the chart: %v\n%.300s", err, svg)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--plot", out}, 2, "--plot draws the chart of a --gpu run"},
		{[]string{"--plot-from", run}, 2, "--plot-from draws an earlier run's chart"},
		{[]string{"--plot-from", filepath.Join(dir, "none.json"), "--plot", out}, 1, "none.json"},
		{[]string{"--plot-from", out, "--plot", out}, 1, "not the output of bench --gpu --json"},
	} {
		res := host(t, bins, "", append([]string{"bench"}, tc.args...)...)
		if res.code != tc.code || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("bench %v: exit %d, want %d and %q: %s", tc.args, res.code, tc.code, tc.want, res.stderr)
		}
	}
}
