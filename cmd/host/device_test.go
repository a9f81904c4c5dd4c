package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
	"github.com/attnplug/attnplug/registry"
)

var (
	liarOnce sync.Once
	liarBin  string
	liarErr  error
)

// liarTree is a copy of the built tree with the liar plugin (fake PTX
// modules, plans that lie on command) and the fa3 and aiter plugins only.
func liarTree(t *testing.T) *testbin.Bins {
	t.Helper()
	liarOnce.Do(func() {
		liarBin, liarErr = testbin.BuildTestPlugin(filepath.Join(filepath.Dir(bins.Dir), "liar"), "liar")
	})
	if liarErr != nil {
		t.Fatal(liarErr)
	}
	var without []string
	for _, p := range bins.Plugins {
		if p != "fa3" && p != "aiter" {
			without = append(without, p)
		}
	}
	tree, err := bins.CopyTree(t.TempDir(), without...)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(liarBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree.PluginDir, "attnplug-backend-liar"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ATTNPLUG_LIE", "")
	return tree
}

type kernelRow struct {
	Plugin     string `json:"plugin"`
	Name       string `json:"name"`
	DeviceCode *struct {
		Device            string `json:"device"`
		ComputeCapability int    `json:"compute_capability"`
		Note              string `json:"note"`
		Modules           []struct {
			Name    string   `json:"name"`
			Arch    string   `json:"arch"`
			Format  string   `json:"format"`
			Bytes   int      `json:"bytes"`
			SHA256  string   `json:"sha256"`
			Entries []string `json:"entries"`
			Floor   *struct {
				PTXISA    string `json:"ptx_isa"`
				ImageArch string `json:"image_arch"`
				MinCUDA   string `json:"min_cuda"`
				MinDriver string `json:"min_driver"`
			} `json:"floor"`
		} `json:"modules"`
	} `json:"device_code"`
}

// kernelRows runs plugins --kernels --json and returns its rows by name.
func kernelRows(t *testing.T, tree *testbin.Bins, args ...string) map[string]kernelRow {
	t.Helper()
	r := host(t, tree, "", append([]string{"plugins", "--kernels", "--json", "--plugin-dir", tree.PluginDir}, args...)...)
	var rows []kernelRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 0 {
		t.Fatalf("plugins --kernels --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	out := map[string]kernelRow{}
	for _, row := range rows {
		out[row.Name] = row
	}
	return out
}

// gpuHere reports whether this machine has a GPU the host opens: the
// default device of the commands is then that GPU, not an example.
func gpuHere(t *testing.T) bool {
	_, source, err := (&deviceFlags{}).device()
	if err != nil {
		t.Fatal(err)
	}
	return source == "this machine's GPU"
}

// TestPluginsKernelsShowsDeviceCode checks plugins --kernels: the modules
// and architectures of each name with device code, for --arch or the
// example device; "none for this device", with the plugin's reason, where
// it has none;
// nothing for names without device code.
func TestPluginsKernelsShowsDeviceCode(t *testing.T) {
	if testing.Short() {
		t.Skip("long: builds the device code of every plugin for several architectures (make test runs it)")
	}
	tree := liarTree(t)
	for _, arch := range []string{"sm_90", "sm_100"} {
		rows := kernelRows(t, tree, "--arch", arch)
		liar := rows["liar"].DeviceCode
		want := strings.Replace(arch, "sm_", "compute_", 1)
		if liar == nil || liar.Note != "" || len(liar.Modules) != 1 || liar.Modules[0].Arch != want || liar.Modules[0].Format != "ptx" ||
			len(liar.Modules[0].SHA256) != 64 || strings.Join(liar.Modules[0].Entries, ",") != "liar_mla_split,liar_mla_combine,liar_mla_simple" {
			t.Errorf("--arch %s: liar's device code: %+v, want its module for %s", arch, liar, want)
		} else if f := liar.Modules[0].Floor; f == nil || f.PTXISA != "8.0" || f.ImageArch != strings.Replace(want, "compute_", "sm_", 1) ||
			f.MinCUDA != "12.0" || f.MinDriver != "525.60.13" {
			t.Errorf("--arch %s: liar's module needs %+v, want PTX ISA 8.0 for %s: CUDA 12.0, driver 525.60.13", arch, f, arch)
		}
		if rows["aiter"].DeviceCode != nil || rows["triton"].DeviceCode != nil {
			t.Errorf("--arch %s: device code listed for aiter or triton: %+v %+v", arch, rows["aiter"].DeviceCode, rows["triton"].DeviceCode)
		}
		if fa3 := rows["fa3"].DeviceCode; fa3 == nil || (len(fa3.Modules) == 0 && !strings.Contains(fa3.Note, "device code: none for this device: ")) {
			t.Errorf("--arch %s: fa3's device code: %+v, want its modules or none, with the reason", arch, fa3)
		}
	}
	r := host(t, tree, "", "plugins", "--kernels", "--plugin-dir", tree.PluginDir)
	if r.code != 0 || !strings.Contains(r.stdout, "DEVICE CODE for ") || !hasRow(r.stdout, "liar", "liar", "liar_mla") ||
		!hasRow(r.stdout, "PLUGIN", "NAME", "MODULE", "ARCH", "FORMAT", "ISA", "DRIVER") {
		t.Errorf("plugins --kernels: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !gpuHere(t) && (!strings.Contains(r.stdout, "DEVICE CODE for example sm_90 device (compute 90): no GPU here") ||
		!hasRow(r.stdout, "liar", "liar", "liar_mla", "compute_90", "ptx", "8.0", "525.60.13", "(CUDA", "12.0)")) {
		t.Errorf("without a GPU, the example device is not the sm_90 one, or liar's module lacks its PTX ISA and driver:\n%s", r.stdout)
	}
	// Where fa3 cannot build its device code here, it says why once for
	// its two names.
	if n := strings.Count(r.stdout, "none for this device: "); n > 1 || n == 1 && !hasRow(r.stdout, "fa3", "fa3,fa4", "device", "code:", "none") {
		t.Errorf("fa3's device-code error, %d times:\n%s", n, r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plugins", "--arch", "sm_90"}, "--arch needs --kernels"},
		{[]string{"plugins", "--kernels", "--arch", "hopper"}, `--arch: architecture "hopper": want sm_XY`},
		{[]string{"lock", "--arch", "sm_90"}, "--arch needs --modules"},
	} {
		r := host(t, tree, "", append(tc.args, "--plugin-dir", tree.PluginDir)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestLockModules checks attnplug lock --modules: the modules of every
// plugin with device code are pinned next to its binary, pins for several
// devices add up, a plain lock keeps them, and a plugin whose image then
// changes is refused naming both hashes and the fix.
func TestLockModules(t *testing.T) {
	tree := liarTree(t)
	os.Remove(filepath.Join(tree.PluginDir, "attnplug-backend-fa3"))
	lockPath := filepath.Join(tree.PluginDir, registry.LockFileName)
	for _, arch := range []string{"sm_90", "sm_100"} {
		r := host(t, tree, "", "lock", "--modules", "--arch", arch, "--plugin-dir", tree.PluginDir)
		if r.code != 0 || !strings.Contains(r.stdout, "module liar_mla") {
			t.Fatalf("lock --modules --arch %s: exit %d\n%s\n%s", arch, r.code, r.stdout, r.stderr)
		}
	}
	r := host(t, tree, "", "lock", "--plugin-dir", tree.PluginDir)
	if r.code != 0 {
		t.Fatalf("lock: exit %d\n%s", r.code, r.stderr)
	}
	lock, err := registry.ReadLock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := lock.Entry("attnplug-backend-liar")
	a, _ := lock.Entry("attnplug-backend-aiter")
	if len(e.Modules) != 2 || e.Modules[0].Arch == e.Modules[1].Arch || len(a.Modules) != 0 {
		t.Fatalf("lock: liar pins %+v, aiter %+v; want liar's modules for two devices, none for aiter", e.Modules, a.Modules)
	}
	// Same binary, other images: refused by the pins, and said how.
	t.Setenv("ATTNPLUG_LIE", "variant=rebuilt")
	rows := kernelRows(t, tree, "--arch", "sm_90")
	note := rows["liar"].DeviceCode.Note
	for _, want := range []string{"refused by the lock file", "kernel module liar_mla (ptx for compute_90) has sha256 ", "pins module liar_mla as sha256 " + e.Modules[0].SHA256[:8], "attnplug lock --modules"} {
		if !strings.Contains(note, want) {
			t.Errorf("liar's note %q lacks %q", note, want)
		}
	}
	// A plugin with device code that cannot build it here fails
	// lock --modules, which then writes nothing.
	t.Setenv("ATTNPLUG_LIE", "no_modules")
	before, _ := os.ReadFile(lockPath)
	r = host(t, tree, "", "lock", "--modules", "--arch", "sm_90", "--plugin-dir", tree.PluginDir)
	after, _ := os.ReadFile(lockPath)
	if r.code != 1 || !strings.Contains(r.stderr, "nothing written") || !strings.Contains(r.stderr, "liar: ") || string(before) != string(after) {
		t.Errorf("lock --modules without device code: exit %d, the file changed: %v\n%s", r.code, string(before) != string(after), r.stderr)
	}
}

// TestConformChecksPlans runs attnplug conform on the liar plugin, honest
// and lying.
func TestConformChecksPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug conform on the liar plugin three times (make test runs it)")
	}
	tree := liarTree(t)
	liar := filepath.Join(tree.PluginDir, "attnplug-backend-liar")
	r := host(t, tree, "", "conform", "--max-requests", "50", "--arch", "sm_100", liar)
	if r.code != 0 || !hasRow(r.stdout, "PASS", "device-code", "modules", "liar_mla", "(ptx", "for", "compute_100,", "PTX", "ISA", "8.0,", "driver", "525.60.13", "or", "newer)",
		"for", "example", "sm_100", "device", "pass") {
		t.Errorf("conform on the honest liar: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The plans checked for an example device do not run: NOT RUN, saying
	// why, no failure; the JSON counts the plans checked and none run.
	if !hasRow(r.stdout, "NOT", "RUN", "device-run", "not", "run:", "--arch", "asks", "for", "an", "example", "device;") ||
		!strings.Contains(r.stdout, "; not run here: device-run)") {
		t.Errorf("conform --arch sm_100 does not say the plans did not run, and why:\n%s", r.stdout)
	}
	var ran struct {
		Passed bool `json:"passed"`
		Checks []struct{ Name, Status, Detail string }
		// The field names of conform --json's device_code.
		DeviceCode struct {
			Device  string `json:"device"`
			Modules []struct {
				Name   string `json:"name"`
				Format string `json:"format"`
				Floor  struct {
					PTXISA    string `json:"ptx_isa"`
					MinCUDA   string `json:"min_cuda"`
					MinDriver string `json:"min_driver"`
				} `json:"floor"`
			} `json:"modules"`
			PlansChecked int    `json:"plans_checked"`
			PlansRun     *int   `json:"plans_run"`
			NoPlan       *int   `json:"no_plan"`
			WithoutRef   *int   `json:"plans_without_reference"`
			Failed       *int   `json:"plans_failed"`
			RanOn        string `json:"ran_on"`
			NotRun       string `json:"not_run"`
		} `json:"device_code"`
	}
	conformJSON := func(args ...string) {
		t.Helper()
		r := host(t, tree, "", append([]string{"conform", "--max-requests", "50", "--json"}, append(args, liar)...)...)
		ran.DeviceCode.PlansRun = nil
		if err := json.Unmarshal([]byte(r.stdout), &ran); err != nil || r.code != 0 || !ran.Passed {
			t.Fatalf("conform --json %v: exit %d, %v\n%s", args, r.code, err, r.stderr)
		}
	}
	conformJSON("--arch", "sm_100")
	d := ran.DeviceCode
	if d.Device != "example sm_100 device" || d.PlansChecked == 0 || d.PlansRun == nil || *d.PlansRun != 0 || d.NoPlan == nil ||
		d.WithoutRef == nil || d.Failed == nil || d.RanOn != "" || !strings.HasPrefix(d.NotRun, "--arch asks for an example device") ||
		len(d.Modules) != 1 || d.Modules[0].Name != "liar_mla" || d.Modules[0].Format != "ptx" ||
		d.Modules[0].Floor.PTXISA != "8.0" || d.Modules[0].Floor.MinCUDA != "12.0" || d.Modules[0].Floor.MinDriver != "525.60.13" {
		t.Errorf("conform --json --arch sm_100: device_code %+v, want plans checked, none run, and why", d)
	}
	for _, c := range ran.Checks {
		if c.Name == "device-run" && (c.Status != "not-run" || !strings.HasPrefix(c.Detail, "not run: --arch asks")) {
			t.Errorf("conform --json: device-run %s: %s, want not-run, saying why", c.Status, c.Detail)
		}
	}
	if !gpuHere(t) {
		conformJSON()
		if d := ran.DeviceCode; d.PlansChecked == 0 || d.PlansRun == nil || *d.PlansRun != 0 || d.NotRun != "no GPU here" {
			t.Errorf("conform --json without a GPU: device_code %+v, want plans checked, none run: no GPU here", d)
		}
	}
}

// TestConformChecksLyingPlans runs attnplug conform on the liar plugin
// without device code for the device (not checked, saying why, no
// failure) and lying about its plans (a failure naming the request).
func TestConformChecksLyingPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug conform on the liar plugin five times (make test runs it)")
	}
	tree := liarTree(t)
	liar := filepath.Join(tree.PluginDir, "attnplug-backend-liar")
	t.Setenv("ATTNPLUG_LIE", "no_modules")
	r := host(t, tree, "", "conform", "--max-requests", "50", liar)
	if r.code != 0 || !strings.Contains(r.stdout, "\nNOT CHECKED  device-code       not checked: no device code for ") ||
		!strings.Contains(r.stdout, "; not checked here: device-code, device-run)") || strings.Contains(r.stdout, "PASS         device-code") ||
		!strings.Contains(r.stdout, "\nNOT CHECKED  device-run        not checked: no device code for ") {
		t.Errorf("conform without device code for the device: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = host(t, tree, "", "conform", "--max-requests", "50", "--json", liar)
	var rep struct {
		Passed bool `json:"passed"`
		Checks []struct{ Name, Status, Detail string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 || !rep.Passed {
		t.Fatalf("conform --json: exit %d, %v\n%s", r.code, err, r.stderr)
	}
	for _, c := range rep.Checks {
		if (c.Name == "device-code" || c.Name == "device-run") && (c.Status != "not-checked" || !strings.HasPrefix(c.Detail, "not checked: ")) {
			t.Errorf("conform --json: %s %s: %s, want not-checked, saying why", c.Name, c.Status, c.Detail)
		}
	}
	t.Setenv("ATTNPLUG_LIE", "unknown_entry")
	r = host(t, tree, "", "conform", "--max-requests", "50", liar)
	if r.code != 1 || !strings.Contains(r.stdout, `FAIL  device-code`) || !strings.Contains(r.stdout, `has no entry "liar_mla_split_v2"`) ||
		!strings.Contains(r.stderr, "1 of 19 checks failed: device-code") {
		t.Errorf("conform on a lying plugin: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// A plugin that never reads the cache dtype (the top-k) fails, naming
	// the request its plan was not made for.
	for _, tc := range []struct{ lie, want string }{
		{"ignores_kv_dtype", `liar: probe a dense layer over an FP8 cache (kv_dtype fp8_e4m3): MLA plan for 3 requests (seq_lens [1 300 4097], q_lens [1 1 1]), page size 1, 16 heads, head dims 576/512, graph false, kv_dtype fp8_e4m3: plan refused: no launch binds tensor "kv_scale"`},
		{"ignores_top_k", `liar: probe a sparse layer (dims.top_k 2048) over a bf16 cache: MLA plan for 3 requests (seq_lens [1 300 4097], q_lens [1 1 1]), page size 1, 16 heads, head dims 576/512, graph false, top_k 2048: plan refused: no launch binds tensor "topk_indices"`},
	} {
		t.Setenv("ATTNPLUG_LIE", tc.lie)
		r = host(t, tree, "", "conform", "--max-requests", "50", liar)
		if r.code != 1 || !hasRow(r.stdout, "FAIL", "device-code") || !strings.Contains(r.stdout, tc.want) ||
			!strings.Contains(r.stderr, "1 of 19 checks failed: device-code") {
			t.Errorf("conform on a plugin that %s: exit %d, want it failed naming %q\n%s\n%s", strings.ReplaceAll(tc.lie, "_", " "), r.code, tc.want, r.stdout, r.stderr)
		}
	}
}

// hasRow reports whether a line of table starts with the fields want.
func hasRow(table string, want ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= len(want) && slices.Equal(f[:len(want)], want) {
			return true
		}
	}
	return false
}
