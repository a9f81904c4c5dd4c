package reference_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/inproc"
	"github.com/attnplug/attnplug/internal/reference"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// skipUnderRace skips a comparison of tens of thousands of requests under
// the race detector: decided one by one, CPU-bound, it is slow there and
// checks no concurrency (the registry's tests do, under it). make test
// runs it without the race detector (go test ./internal/reference/).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("CPU-bound comparison of tens of thousands of requests: make test runs it without the race detector (go test ./internal/reference/)")
	}
}

// inProcess decides requests by a registry that serves every plugin's
// backend in this process (registry.Config.Backends): the same routes,
// answer cache and triton fallback as the plugin processes get, so that
// the comparison with sglang covers the cache keys too.
func inProcess(t *testing.T) func(*core.Request) (core.Method, string) {
	t.Helper()
	backends, err := inproc.Backends(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(context.Background(), registry.Config{
		Backends: backends, ExpectedNames: []string{}, QuietDeprecated: true, SocketDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return func(req *core.Request) (core.Method, string) {
		a, err := reg.Dispatch(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", req.Backend, err)
		}
		if a.Fallback != "" {
			t.Fatalf("%s: fell back: %s", req.Backend, a.Fallback)
		}
		return a.Method, a.Handler
	}
}

func oracle(t *testing.T) *reference.Oracle {
	t.Helper()
	o, err := reference.Find(".", t.TempDir())
	if errors.Is(err, reference.ErrNotAvailable) {
		t.Skipf("skipping the comparison with sglang's code: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestRulesMatchGolden compares the rules of core and of every plugin
// with the answers sglang's code gave the golden file's requests: it runs
// without python3 or the reference file, so every make test checks
// fidelity.
func TestRulesMatchGolden(t *testing.T) {
	skipUnderRace(t)
	g, err := reference.LoadGolden(".")
	if err != nil {
		t.Fatalf("%v (make golden writes it when the reference is present)", err)
	}
	if len(g.Cases) < 20000 {
		t.Fatalf("the golden file has %d cases, want tens of thousands", len(g.Cases))
	}
	lines := make([][]byte, len(g.Cases))
	want := make([]reference.Answer, len(g.Cases))
	for i, c := range g.Cases {
		lines[i], want[i] = c.Request, reference.Answer{Method: c.Method, Handler: c.Handler}
	}
	compareRules(t, lines, want, g.Header.DefaultPlatform)
}

// TestGoldenIsCurrent: with the reference at hand, the golden file was
// made from this very file, and sglang's code still gives its answers.
func TestGoldenIsCurrent(t *testing.T) {
	skipUnderRace(t)
	if testing.Short() {
		t.Skip("long: runs sglang's code on the 40 000 requests of the golden file (make test runs it)")
	}
	o := oracle(t)
	g, err := reference.LoadGolden(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := o.ReferenceSHA256()
	if err != nil {
		t.Fatal(err)
	}
	if sum != g.Header.ReferenceSHA256 {
		t.Errorf("the golden file was made from a reference with sha256 %s, the reference now has %s: run make golden", g.Header.ReferenceSHA256, sum)
	}
	var in bytes.Buffer
	for _, c := range g.Cases {
		in.Write(c.Request)
		in.WriteByte('\n')
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := o.Evaluate(ctx, in.Bytes(), g.Header.DefaultPlatform)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(g.Cases) {
		t.Fatalf("the reference answered %d of %d requests", len(got), len(g.Cases))
	}
	bad := 0
	for i, c := range g.Cases {
		if got[i].Method != c.Method || got[i].Handler != c.Handler {
			if bad++; bad <= 5 {
				t.Errorf("case %d %s: the golden file says %s by %s, the reference now %s by %s (%s)", i+1, c.Request, c.Method, c.Handler, got[i].Method, got[i].Handler, got[i].Error)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d golden answers are stale: run make golden", bad, len(g.Cases))
	}
}

// TestRulesMatchReference compares the rules of core and of every plugin
// with sglang's own code, run live, on requests generated afresh.
func TestRulesMatchReference(t *testing.T) {
	skipUnderRace(t)
	if testing.Short() {
		t.Skip("long: runs sglang's code on 40 000 fresh requests, which it takes to reach every method; TestRulesMatchGolden compares with its recorded answers (make test runs it)")
	}
	o := oracle(t)
	const n = 40000
	rng := rand.New(rand.NewPCG(1, 2))
	var in bytes.Buffer
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = reference.Generate(rng)
		in.Write(lines[i])
		in.WriteByte('\n')
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want, err := o.Evaluate(ctx, in.Bytes(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != n {
		t.Fatalf("oracle answered %d of %d requests", len(want), n)
	}
	compareRules(t, lines, want, "cpu")
}

// compareRules decides every request of lines in process and compares
// with want; defaultPlatform stands for a request without a platform. The
// requests must reach every method some name can answer.
func compareRules(t *testing.T, lines [][]byte, want []reference.Answer, defaultPlatform string) {
	t.Helper()
	platform, err := core.ParsePlatform(defaultPlatform)
	if err != nil {
		t.Fatal(err)
	}
	decide := inProcess(t)
	seen := map[string]bool{}
	failures := 0
	for i, line := range lines {
		var req core.Request
		if err := jsonl.DecodeRequest(line, &req); err != nil {
			t.Fatalf("request %d %s: decode: %v", i, line, err)
		}
		if req.Runtime.Platform == core.PlatformUnset {
			req.Runtime.Platform = platform
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("request %d %s: %v", i, line, err)
		}
		if want[i].Error != "" {
			t.Fatalf("request %d %s: the reference has no answer: %s", i, line, want[i].Error)
		}
		m, handler := decide(&req)
		seen[req.Backend+"/"+m.String()] = true
		if m.String() != want[i].Method || handler != want[i].Handler {
			failures++
			if failures <= 10 {
				t.Errorf("request %d %s: got %s by %s, want %s by %s", i, line, m, handler, want[i].Method, want[i].Handler)
			}
		}
	}
	if failures > 0 {
		t.Fatalf("%d of %d answers differ from the reference", failures, len(lines))
	}
	for _, must := range []string{"fa3/MHA_ONE_SHOT", "fa3/MHA_CHUNKED_KV", "fa3/MLA", "fa3/MLA_FUSED_ROPE_ROCM", "fa3/MLA_FUSED_ROPE_CPU",
		"triton/MHA", "aiter/MHA", "aiter/MLA", "ascend/DSA_NPU", "ascend/MHA_NPU", "ascend/MLA_NPU", "dsa/MHA_ONE_SHOT", "fa4/MHA_CHUNKED_KV",
		"trtllm_mla/MHA_CHUNKED_KV", "flashmla/MHA_ONE_SHOT", "cutlass_mla/MHA_CHUNKED_KV", "intel_xpu/MHA_CHUNKED_KV", "FA3/MHA"} {
		if !seen[must] {
			t.Errorf("the requests never reached %s", must)
		}
	}
}
