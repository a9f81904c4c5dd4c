package vendortest

import (
	"encoding/json"
	"strings"
	"testing"
)

type answer struct {
	Method   string `json:"method"`
	Handler  string `json:"handler"`
	Plugin   string `json:"plugin"`
	Fallback string `json:"fallback"`
	Error    string `json:"error"`
}

func answers(t *testing.T, out string) []answer {
	t.Helper()
	var as []answer
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var a answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %q: %v", line, err)
		}
		as = append(as, a)
	}
	return as
}

// TestVendorBackendServed builds examples/vendor-backend as its own module,
// puts it in a plugin directory, and checks that the unchanged host lists
// it and dispatches through it by acme's own rules.
func TestVendorBackendServed(t *testing.T) {
	dir := pluginDir(t, acmeBin)

	r := host(t, "", nil, "plugins", "--json", "--plugin-dir", dir)
	if r.code != 0 {
		t.Fatalf("plugins: exit %d\n%s", r.code, r.stderr)
	}
	var list []struct {
		Name            string   `json:"name"`
		Version         string   `json:"version"`
		ProtocolVersion int      `json:"protocol_version"`
		Names           []string `json:"names"`
		Status          string   `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("plugins --json: %v\n%s", err, r.stdout)
	}
	if len(list) != 1 || list[0].Name != "acme_mla" || list[0].Version != "1.0.0" || list[0].ProtocolVersion != 1 ||
		len(list[0].Names) != 1 || list[0].Names[0] != "acme_mla" {
		t.Fatalf("plugins: %s", r.stdout)
	}

	reqs := []struct {
		line string
		want string
	}{
		// Above sglang's default threshold, below acme's: the shared
		// rules would run MHA; acme runs MLA.
		{`{"backend":"acme_mla","forward_mode":"EXTEND","extend_prefix_lens":[8192],"seq_lens":[9216],"max_chunk_capacity":131072}`, "MLA"},
		{`{"backend":"acme_mla","forward_mode":"EXTEND","extend_prefix_lens":[8000,8383],"seq_lens":[9000,9383]}`, "MLA"},
		{`{"backend":"acme_mla","forward_mode":"EXTEND","extend_prefix_lens":[8000,8384],"seq_lens":[9000,9384]}`, "MHA_CHUNKED_KV"},
		{`{"backend":"acme_mla","forward_mode":"MIXED","extend_prefix_lens":[20000],"seq_lens":[21000],"layer":{"chunked_prefix_cache_threshold":100000}}`, "MHA_CHUNKED_KV"},
		{`{"backend":"acme_mla","forward_mode":"EXTEND","extend_prefix_lens":[20000],"seq_lens":[21000],"runtime":{"piecewise_cuda_graph":true}}`, "MLA"},
		{`{"backend":"acme_mla","forward_mode":"TARGET_VERIFY","extend_prefix_lens":[20000],"seq_lens":[21000]}`, "MLA"},
		{`{"backend":"acme_mla","forward_mode":"DECODE","extend_prefix_lens":[16384],"seq_lens":[16385]}`, "MLA"},
	}
	var stdin strings.Builder
	for _, q := range reqs {
		stdin.WriteString(q.line + "\n")
	}
	r = host(t, stdin.String(), nil, "dispatch", "--plugin-dir", dir, "--strict")
	if r.code != 0 {
		t.Fatalf("dispatch: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	as := answers(t, r.stdout)
	if len(as) != len(reqs) {
		t.Fatalf("%d answers for %d requests:\n%s", len(as), len(reqs), r.stdout)
	}
	for i, a := range as {
		if a.Method != reqs[i].want || a.Plugin != "acme_mla" || a.Handler != "acme_mla" || a.Fallback != "" || a.Error != "" {
			t.Errorf("request %d %s: got %+v, want %s from plugin acme_mla", i+1, reqs[i].line, a, reqs[i].want)
		}
	}
}

// TestVendorBackendConforms runs `attnplug conform` on the vendor's binary,
// as the vendor's CI does.
func TestVendorBackendConforms(t *testing.T) {
	r := host(t, "", nil, "conform", acmeBin)
	if r.code != 0 || !strings.Contains(r.stdout, "PASS: acme_mla conforms") {
		t.Fatalf("conform: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// acme's own constant is part of the generated requests.
	if !strings.Contains(r.stdout, "PASS  reads") || !strings.Contains(r.stdout, "declared constants") {
		t.Errorf("report:\n%s", r.stdout)
	}
	r = host(t, "", nil, "conform", "--json", "--max-requests", "100", acmeBin)
	var rep struct {
		Plugin string `json:"plugin"`
		Passed bool   `json:"passed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 || !rep.Passed || rep.Plugin != "acme_mla" {
		t.Fatalf("conform --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
}

// TestConformCommandFails checks the exit status and the report of
// `attnplug conform` on a plugin that breaks its catalog, and its usage
// errors.
func TestConformCommandFails(t *testing.T) {
	r := host(t, "", []string{"ATTNPLUG_FAULT=undeclared"}, "conform", "--timeout", "500ms", "--max-requests", "50", faultBin)
	if r.code != 1 {
		t.Fatalf("conform on a faulty plugin: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "FAIL  catalog") || !strings.Contains(r.stdout, "answered MHA_NPU, which it does not declare") ||
		!strings.Contains(r.stderr, "1 of 15 checks failed: catalog") {
		t.Errorf("report:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	r = host(t, "", []string{"ATTNPLUG_FAULT=undeclared"}, "conform", "--json", "--max-requests", "50", faultBin)
	var rep struct {
		Passed bool `json:"passed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.Passed {
		t.Errorf("conform --json on a faulty plugin: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	for _, args := range [][]string{{"conform"}, {"conform", "a", "b"}, {"conform", "--timeout", "0s", acmeBin}, {"conform", "--bogus", acmeBin}} {
		if r := host(t, "", nil, args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	if r := host(t, "", nil, "conform", t.TempDir()+"/no-such-plugin"); r.code != 2 || !strings.Contains(r.stderr, "no such file") { // a usage error
		t.Errorf("conform on a missing binary: exit %d\n%s", r.code, r.stderr)
	}
}
