package conformance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/conformance"
)

// TestLabConforms: the lab plugin reads one quantity of each kind and
// declares them all; it passes every check, kernels included.
func TestLabConforms(t *testing.T) {
	skipHeavy(t, "the suite with every probe on the lab plugin")
	t.Parallel()
	r := run(t, conformance.Options{Binary: lab, MaxRequests: 500, Seed: 7})
	if !r.Passed || r.Seed != 7 {
		t.Fatalf("lab does not conform (seed %d):\n%s", r.Seed, text(r))
	}
	for _, c := range r.Checks {
		if c.Status != conformance.Pass && c.Name != conformance.CheckDeviceCode && c.Name != conformance.CheckDeviceRun { // the lab hands no device code
			t.Errorf("check %s: %s: %s", c.Name, c.Status, c.Detail)
		}
	}
	if !strings.Contains(text(r), "seed 7 (run again with --seed 7") {
		t.Errorf("the text report does not give the seed:\n%s", text(r))
	}
}

// TestLabBreaks: each way the lab plugin breaks fails the check that must
// catch it, with a message that names the problem. The suite varies 12
// base requests (probes) where only its variants of a base find the break,
// and asks the fixed and random requests alone where they do: the probes
// are most of the suite's calls.
func TestLabBreaks(t *testing.T) {
	skipHeavy(t, "the suite on twenty-one breaks of the lab plugin")
	variantsOnly := map[string]bool{
		"undeclared=prefix_sum": true, "undeclared=seq_max": true, "undeclared=max_chunk_capacity": true,
		"undeclared=prefix_max": true, "off_by_one": true,
	}
	for _, tc := range []struct {
		breaks string
		check  string
		says   []string
	}{
		{"undeclared=prefix_sum", conformance.CheckReads, []string{"reads prefix_sum at 1000, which it does not declare", "prefix_sum 999→1000"}},
		{"undeclared=compute_capability", conformance.CheckReads, []string{"lab reads compute_capability at 100, which it does not declare", "compute_capability 99→100"}},
		{"undeclared=kv_cache_dtype", conformance.CheckReads, []string{"lab reads kv_cache_dtype, which it does not declare", "fp8_e5m2"}},
		{"undeclared=seq_max", conformance.CheckReads, []string{"which it does not declare", "seq_max 2048→2049"}},
		{"undeclared=max_chunk_capacity", conformance.CheckReads, []string{"lab reads max_chunk_capacity at 65536, which it does not declare"}},
		{"undeclared=seq_count", conformance.CheckReads, []string{"seq_count 3→4"}},
		{"undeclared=prefix_max", conformance.CheckReads, []string{"prefix_max ", "→512"}},
		{"undeclared=platform", conformance.CheckReads, []string{"lab reads platform, which it does not declare"}},
		{"undeclared=piecewise_cuda_graph", conformance.CheckReads, []string{"lab reads piecewise_cuda_graph, which it does not declare"}},
		{"undeclared=forward_mode", conformance.CheckReads, []string{"reads forward_mode, which it does not declare"}},
		{"condition_lies", conformance.CheckReads, []string{"lab, where kv_cache_dense_dtype holds (its reads then: piecewise_cuda_graph), reads ", "which it does not declare"}},
		{"off_by_one", conformance.CheckReads, []string{"lab reads prefix_sum at 1000, which it does not declare (declared thresholds: [999])"}},
		{"rare_method", conformance.CheckCatalog, []string{"answered MHA_NPU, which it does not declare", "kv_cache_dtype=fp4_e2m1"}},
		{"time", conformance.CheckDeterminism, []string{"an answer must depend on the request alone, not on the time"}},
		{"stdout", conformance.CheckStdout, []string{"bytes to stdout after the handshake", "a line on stdout"}},
		{"mutate", conformance.CheckMutation, []string{"the rules changed the request they were given: seq_lens ["}},
		{"catalog=dtype", conformance.CheckKernelCatalog, []string{`dtype "bfloat17" is not a KV cache dtype`}},
		{"catalog=headdim", conformance.CheckKernelCatalog, []string{"head dim -3 is not in 1..16384"}},
		{"catalog=hardware", conformance.CheckKernelCatalog, []string{"kernel lab_mha_chunked_kv: hardware entry 1 names no platform"}},
		{"catalog=method", conformance.CheckKernelCatalog, []string{"kernel lab_npu runs MHA_NPU, a method lab does not declare"}},
		{"sleep=2ms", conformance.CheckLatency, []string{"over the latency budget of 1ms", "the round trip"}},
	} {
		t.Run(tc.breaks, func(t *testing.T) {
			t.Parallel()
			probes := -1 // none
			if variantsOnly[tc.breaks] {
				probes = 12
			}
			r := run(t, conformance.Options{Binary: lab, Env: []string{"ATTNPLUG_LAB=" + tc.breaks}, MaxRequests: 100, Probes: probes, Seed: 11})
			out := text(r)
			c, _ := r.Check(tc.check)
			if r.Passed || c.Status != conformance.Fail {
				t.Fatalf("check %s: %s, want fail\n%s", tc.check, c.Status, out)
			}
			all := c.Detail + "\n" + strings.Join(c.Problems, "\n")
			for _, want := range tc.says {
				if !strings.Contains(all, want) {
					t.Errorf("check %s does not say %q:\n%s", tc.check, want, all)
				}
			}
			if testing.Verbose() {
				t.Logf("\n%s", out)
			}
		})
	}
}

// TestSlowPluginAskedSamples: a plugin over its latency budget is asked a
// sample of each name only, once the suite has seen its first calls.
func TestSlowPluginAskedSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("long: the suite on a plugin that sleeps in every call (make test runs it)")
	}
	r := run(t, conformance.Options{Binary: lab, Env: []string{"ATTNPLUG_LAB=sleep=2ms"}, Seed: 3})
	cov, _ := r.Check(conformance.CheckCoverage)
	if r.Requests > 2*64 || !strings.Contains(cov.Detail, "asked 64 requests only") {
		t.Errorf("a slow plugin was asked %d requests: %s", r.Requests, cov.Detail)
	}
	if r.Latency.P50 < 2*time.Millisecond {
		t.Errorf("p50 %s of a plugin that sleeps 2ms a call", r.Latency.P50)
	}
}

// TestSeedReproduces: the same seed asks the same probes, so a failure
// found once is found again, with the same words.
func TestSeedReproduces(t *testing.T) {
	skipHeavy(t, "the suite three times on the lab plugin")
	t.Parallel()
	// The fixed and random requests find this break (TestLabBreaks): the
	// random ones are drawn from the seed as the probes are.
	opts := conformance.Options{Binary: lab, Env: []string{"ATTNPLUG_LAB=undeclared=compute_capability"}, MaxRequests: 100, Probes: -1, Seed: 99}
	a, b := run(t, opts), run(t, opts)
	ca, _ := a.Check(conformance.CheckReads)
	cb, _ := b.Check(conformance.CheckReads)
	if len(ca.Problems) == 0 {
		t.Fatalf("seed 99 found no problem:\n%s", text(a))
	}
	if strings.Join(ca.Problems, "\n") != strings.Join(cb.Problems, "\n") || a.Requests != b.Requests {
		t.Errorf("seed 99 twice:\n%s\n---\n%s", strings.Join(ca.Problems, "\n"), strings.Join(cb.Problems, "\n"))
	}
	opts.Seed = 0
	if c := run(t, opts); c.Seed == 0 {
		t.Error("a run without a seed reports seed 0; it must give the seed it picked")
	}
}
