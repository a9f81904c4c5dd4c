package vendortest

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/detect/detecttest"
	"github.com/attnplug/attnplug/registry"
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
		Vendor          string   `json:"vendor"`
		ProtocolVersion int      `json:"protocol_version"`
		Names           []string `json:"names"`
		Status          string   `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("plugins --json: %v\n%s", err, r.stdout)
	}
	if len(list) != 1 || list[0].Name != "acme_mla" || list[0].Version != "1.0.0" || list[0].ProtocolVersion != 1 ||
		len(list[0].Names) != 1 || list[0].Names[0] != "acme_mla" || list[0].Vendor != "Acme (an example)" {
		t.Fatalf("plugins: %s", r.stdout)
	}
	r = host(t, "", nil, "plugins", "--plugin-dir", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "VENDOR") || !strings.Contains(r.stdout, "Acme (an example)") {
		t.Errorf("plugins: exit %d, want a VENDOR column naming acme's vendor\n%s", r.code, r.stdout)
	}
	// The catalog covers MLA; the host's reference kernel runs
	// MHA_CHUNKED_KV, and says so.
	r = host(t, "", nil, "plugins", "--kernels", "--plugin-dir", dir)
	if r.code != 0 || !regexp.MustCompile(`acme_mla +acme_mla +MLA +acme_mla_decode +acme `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^acme_mla +acme_mla +MHA_CHUNKED_KV +reference +reference \(host\) .* any +no +host$`).MatchString(r.stdout) {
		t.Errorf("plugins --kernels: exit %d\n%s", r.code, r.stdout)
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

// TestVendorBackendIsStatic: built with CGO_ENABLED=0 on the SDK's pure-Go
// packages (core, wire, refkernels), acme's plugin is a static binary: no
// program interpreter, no dynamic section.
func TestVendorBackendIsStatic(t *testing.T) {
	f, err := elf.Open(acmeBin)
	if err != nil {
		t.Skipf("not an ELF binary here: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("acme's plugin has a %s program header: it is dynamically linked", p.Type)
		}
	}
}

// TestVendorBackendConforms runs `attnplug conform` on the vendor's binary,
// as the vendor's CI does.
func TestVendorBackendConforms(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug conform on the vendor's plugin five times (make test runs it)")
	}
	r := host(t, "", nil, "conform", acmeBin)
	if r.code != 0 || !strings.Contains(r.stdout, "PASS: acme_mla conforms") {
		t.Fatalf("conform: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// acme's own constant is part of the generated requests.
	if !regexp.MustCompile(`PASS +reads `).MatchString(r.stdout) || !strings.Contains(r.stdout, "declared constants") {
		t.Errorf("report:\n%s", r.stdout)
	}
	// Its one kernel runs by the SDK's reference package; the host runs
	// the method its catalog leaves out.
	if !regexp.MustCompile(`PASS +kernels +1 kernels ran over shared memory`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "the host's reference kernels run what the catalog leaves out: acme_mla MHA_CHUNKED_KV") ||
		!strings.Contains(r.stdout, "plugin acme_mla 1.0.0 by Acme (an example), protocol 1") {
		t.Errorf("report:\n%s", r.stdout)
	}
	// Flags before and after the binary, as a vendor types them.
	for _, args := range [][]string{
		{"conform", "--json", "--max-requests", "100", "--seed", "5", acmeBin},
		{"conform", acmeBin, "--json", "--max-requests", "100", "--seed", "5"},
		{"conform", "--max-requests", "100", acmeBin, "--seed=5", "--json"},
	} {
		r = host(t, "", nil, args...)
		var rep struct {
			Plugin string `json:"plugin"`
			Passed bool   `json:"passed"`
			Seed   uint64 `json:"seed"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 || !rep.Passed || rep.Plugin != "acme_mla" || rep.Seed != 5 {
			t.Fatalf("%v: exit %d, %v\n%s\n%s", args, r.code, err, r.stdout, r.stderr)
		}
	}
	// A binary staged beside its final name is checked as what it becomes.
	staged := filepath.Join(t.TempDir(), "attnplug-backend-acme_mla.new")
	data, err := os.ReadFile(acmeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := host(t, "", nil, "conform", staged, "--max-requests", "100"); r.code != 0 {
		t.Errorf("conform on a staged binary: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestConformCommandFails checks the exit status and the report of
// `attnplug conform` on a plugin that breaks its catalog, and its usage
// errors.
func TestConformCommandFails(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug conform on a failing plugin and on every usage error (make test runs it)")
	}
	r := host(t, "", []string{"ATTNPLUG_FAULT=undeclared"}, "conform", "--timeout", "500ms", "--max-requests", "50", faultBin)
	if r.code != 1 {
		t.Fatalf("conform on a faulty plugin: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`FAIL +catalog `).MatchString(r.stdout) || !strings.Contains(r.stdout, "answered MHA_NPU, which it does not declare") ||
		!strings.Contains(r.stderr, "1 of 19 checks failed: catalog") {
		t.Errorf("report:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	r = host(t, "", []string{"ATTNPLUG_FAULT=undeclared"}, "conform", "--json", "--max-requests", "50", faultBin)
	var rep struct {
		Passed bool `json:"passed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.Passed {
		t.Errorf("conform --json on a faulty plugin: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	for _, args := range [][]string{{"conform"}, {"conform", "a", "b"}, {"conform", "--timeout", "0s", acmeBin}, {"conform", "--bogus", acmeBin},
		{"conform", acmeBin, "--bogus"}, {"conform", acmeBin, "--latency-budget", "-1ms"}, {"conform", acmeBin, "--", "--json"}} {
		if r := host(t, "", nil, args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	if r := host(t, "", nil, "conform", t.TempDir()+"/no-such-plugin"); r.code != 2 || !strings.Contains(r.stderr, "no such file") { // a usage error
		t.Errorf("conform on a missing binary: exit %d\n%s", r.code, r.stderr)
	}
}

// TestVendorHardwareDetected puts acme's made-up accelerator (PCI vendor
// 0xacce, of a platform no host lists) in a fixture root: detect lists it
// generically, names the platform acme_mla declares for it, and serves the
// plugin; where the device node is missing, it does not, and says why. A
// registry given that hardware starts the plugin and answers through it,
// or, where no device is usable, never starts it.
func TestVendorHardwareDetected(t *testing.T) {
	dir := pluginDir(t, acmeBin)
	type device struct {
		Vendor         string `json:"vendor"`
		PCIID          string `json:"pci_id"`
		VendorID       string `json:"vendor_id"`
		DeviceID       string `json:"device_id"`
		Driver         string `json:"driver"`
		Usable         bool   `json:"usable"`
		Reason         string `json:"reason"`
		PluginPlatform string `json:"plugin_platform"`
		DeviceNodes    []struct {
			Path      string `json:"path"`
			Present   bool   `json:"present"`
			Permitted bool   `json:"permitted"`
		} `json:"device_nodes"`
	}
	var rep struct {
		Platform string   `json:"platform"`
		Devices  []device `json:"devices"`
		Plugins  []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Reason string `json:"reason"`
		} `json:"plugins"`
	}
	r := host(t, "", nil, "detect", "--json", "--root", detecttest.Fixture(t, "acme"), "--plugin-dir", dir)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("detect: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if len(rep.Devices) != 2 {
		t.Fatalf("devices: %+v", rep.Devices)
	}
	d := rep.Devices[0]
	if d.Vendor != "unlisted" || d.PCIID != "acce:0001" || d.VendorID != "acce" || d.DeviceID != "0001" || d.Driver != "acme" ||
		!d.Usable || d.PluginPlatform != "acme" || len(d.DeviceNodes) != 1 || d.DeviceNodes[0].Path != "/dev/accel/accel0" ||
		!d.DeviceNodes[0].Present || !d.DeviceNodes[0].Permitted {
		t.Errorf("acme device: %+v", d)
	}
	if len(rep.Plugins) != 1 || rep.Plugins[0].Name != "acme_mla" || !rep.Plugins[0].Served {
		t.Errorf("plugins: %+v", rep.Plugins)
	}
	table := host(t, "", nil, "detect", "--root", detecttest.Fixture(t, "acme"), "--plugin-dir", dir)
	if !strings.Contains(table.stdout, "unlisted (acme)") || !strings.Contains(table.stdout, "acce:0001") {
		t.Errorf("detect table:\n%s", table.stdout)
	}

	// The vendor's name is selected where its hardware is usable, and
	// refused, saying why, where it is not.
	pick := host(t, "", nil, "detect", "--root", detecttest.Fixture(t, "acme"), "--plugin-dir", dir, "--backend", "acme_mla")
	if pick.code != 0 || !strings.Contains(pick.stdout, "prefill=acme_mla (flag)  decode=acme_mla (flag)") {
		t.Errorf("detect --backend acme_mla: exit %d\n%s\n%s", pick.code, pick.stdout, pick.stderr)
	}
	pick = host(t, "", nil, "detect", "--root", detecttest.Fixture(t, "acme_no_node"), "--plugin-dir", dir, "--backend", "acme_mla")
	if pick.code != 1 || !strings.Contains(pick.stderr, `backend "acme_mla" (from flag) cannot run`) || !strings.Contains(pick.stderr, "acce:0001") {
		t.Errorf("detect --backend acme_mla without a usable device: exit %d\n%s", pick.code, pick.stderr)
	}

	r = host(t, "", nil, "detect", "--json", "--root", detecttest.Fixture(t, "acme_no_node"), "--plugin-dir", dir)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("detect: exit %d, %v\n%s", r.code, err, r.stderr)
	}
	const why = "acme_mla: needs a usable PCI device acce:0001 (driver acme) (acme), host has none"
	if len(rep.Plugins) != 1 || rep.Plugins[0].Served || rep.Plugins[0].Reason != why {
		t.Errorf("plugins without a usable acme device: %+v, want not served: %s", rep.Plugins, why)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		fixture string
		served  bool
	}{{"acme", true}, {"acme_no_node", false}} {
		hw, err := detect.Detect(ctx, detect.Options{Root: detecttest.Fixture(t, tc.fixture), NoDriverQuery: true})
		if err != nil {
			t.Fatal(err)
		}
		info := hw.HostInfo()
		reg, err := registry.New(ctx, registry.Config{PluginDirs: []string{dir}, Host: &info, Strict: true})
		if err != nil {
			t.Fatal(err)
		}
		req := core.NewRequest("acme_mla", core.ModeExtend)
		req.Batch.ExtendPrefixLens, req.Batch.SeqLens = []int64{16384}, []int64{17408}
		a, err := reg.Dispatch(ctx, &req)
		started := false
		for _, p := range reg.Plugins() {
			started = started || p.PID != 0 || p.Status == registry.StatusRunning
		}
		reg.Close()
		switch {
		case tc.served && (err != nil || a.Plugin != "acme_mla" || a.Method != core.MHAChunkedKV || !started):
			t.Errorf("%s: got %+v, %v (started %v), want MHA_CHUNKED_KV from the running acme_mla", tc.fixture, a, err, started)
		case !tc.served && (!errors.Is(err, core.ErrRefused) || !strings.Contains(err.Error(), "plugin_unsupported_hardware") || started):
			t.Errorf("%s: got %+v, %v (started %v), want a strict refusal for unsupported hardware and no process", tc.fixture, a, err, started)
		}
	}
}

// TestStrictRefusesGoneVendor: with --strict, a request for acme_mla whose
// plugin is gone, or broken, is refused with the reason and the exit
// status says so; without --strict, a name never seen gets the triton
// rules, as in sglang, and a broken plugin's name a fallback.
func TestStrictRefusesGoneVendor(t *testing.T) {
	line := `{"backend":"acme_mla","forward_mode":"DECODE"}` + "\n"
	empty := t.TempDir()
	r := host(t, line, nil, "dispatch", "--strict", "--plugin-dir", empty)
	if as := answers(t, r.stdout); r.code != 1 || len(as) != 1 || !strings.Contains(as[0].Error, `backend_unknown: "acme_mla" was never seen: no plugin in `+empty+" serves it") {
		t.Errorf("strict, no plugin: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = host(t, line, nil, "dispatch", "--plugin-dir", empty)
	if as := answers(t, r.stdout); r.code != 0 || len(as) != 1 || as[0].Plugin != "core" || as[0].Fallback != "" {
		t.Errorf("not strict, no plugin: exit %d\n%s", r.code, r.stdout)
	}
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "attnplug-backend-acme_mla"), []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = host(t, line, nil, "dispatch", "--strict", "--plugin-dir", broken)
	if as := answers(t, r.stdout); r.code != 1 || len(as) != 1 || !strings.Contains(as[0].Error, "plugin_broken: plugin acme_mla") {
		t.Errorf("strict, broken plugin: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = host(t, line, nil, "dispatch", "--plugin-dir", broken)
	if as := answers(t, r.stdout); r.code != 0 || len(as) != 1 || !strings.HasPrefix(as[0].Fallback, "plugin_broken: plugin acme_mla") {
		t.Errorf("not strict, broken plugin: exit %d\n%s", r.code, r.stdout)
	}
}
