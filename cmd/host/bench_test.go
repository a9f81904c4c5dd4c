package main

import (
	"encoding/json"
	"testing"
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
