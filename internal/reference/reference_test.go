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
)

// inProcess decides a request by the plugins' rule packages, linked in,
// with the triton rules for names none of them serves.
func inProcess() func(*core.Request) (core.Method, string) {
	return inproc.NewDecider().Decide
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

// TestRulesMatchReference compares the rules of core and of every plugin
// with sglang's own code on generated requests.
func TestRulesMatchReference(t *testing.T) {
	o := oracle(t)
	n := 40000
	if testing.Short() {
		n = 4000
	}
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
	decide := inProcess()
	seen := map[string]bool{}
	failures := 0
	for i, line := range lines {
		var req core.Request
		if err := jsonl.DecodeRequest(line, &req); err != nil {
			t.Fatalf("request %d %s: decode: %v", i, line, err)
		}
		if req.Runtime.Platform == core.PlatformUnset {
			req.Runtime.Platform = core.PlatformCPU
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
		t.Fatalf("%d of %d answers differ from the reference", failures, n)
	}
	// The generator must reach every method some name can answer.
	for _, must := range []string{"fa3/MHA_ONE_SHOT", "fa3/MHA_CHUNKED_KV", "fa3/MLA", "fa3/MLA_FUSED_ROPE_ROCM", "fa3/MLA_FUSED_ROPE_CPU",
		"triton/MHA", "aiter/MHA", "aiter/MLA", "ascend/DSA_NPU", "ascend/MHA_NPU", "ascend/MLA_NPU", "dsa/MHA_ONE_SHOT", "fa4/MHA_CHUNKED_KV",
		"trtllm_mla/MHA_CHUNKED_KV", "flashmla/MHA_ONE_SHOT", "cutlass_mla/MHA_CHUNKED_KV", "intel_xpu/MHA_CHUNKED_KV", "FA3/MHA"} {
		if !seen[must] {
			t.Errorf("the generated requests never reached %s", must)
		}
	}
}
