package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/detect/detecttest"
	aiterrules "github.com/attnplug/attnplug/plugins/aiter/rules"
	ascendrules "github.com/attnplug/attnplug/plugins/ascend/rules"
	dsarules "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3rules "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinferrules "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	xpurules "github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// detectJSON is the output of attnplug detect --json.
type detectJSON struct {
	Platform string `json:"platform"`
	Devices  []struct {
		Vendor            string `json:"vendor"`
		Model             string `json:"model"`
		PCIAddress        string `json:"pci_address"`
		PCIID             string `json:"pci_id"`
		Arch              string `json:"arch"`
		ComputeCapability string `json:"compute_capability"`
		Usable            bool   `json:"usable"`
		Reason            string `json:"reason"`
	} `json:"devices"`
	CPU struct {
		AMX bool `json:"amx"`
	} `json:"cpu"`
	DefaultBackend struct {
		MLA    string `json:"mla"`
		DSA    string `json:"dsa"`
		SGLang *struct {
			MLA    string `json:"mla"`
			DSA    string `json:"dsa"`
			Reason string `json:"reason"`
		} `json:"sglang_default"`
	} `json:"default_backend"`
	Plugins []struct {
		Name   string   `json:"name"`
		Path   string   `json:"path"`
		Names  []string `json:"names"`
		Status string   `json:"status"`
		Served bool     `json:"served"`
		Reason string   `json:"reason"`
	} `json:"plugins"`
}

// fixtureDev is a device TestDetectFixturesJSON expects in a report.
type fixtureDev struct {
	addr   string
	usable bool
	reason string // a prefix of the reason
}

// detectJSONCase is one row of TestDetectFixturesJSON: a fixture and what
// attnplug detect --json reports for it.
type detectJSONCase struct {
	fixture  string
	platform string
	mla, dsa string
	amx      bool
	devs     []fixtureDev
	served   []string // the plugins served; every other one is not
}

func TestDetectFixturesJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs attnplug detect --json on every hardware fixture (make test runs it)")
	}
	tests := []detectJSONCase{
		{"h100", "cuda", "fa3", "dsa", true, []fixtureDev{{"0000:18:00.0", true, ""}, {"0000:2a:00.0", true, ""}}, []string{"dsa", "fa3", "flashinfer"}},
		{"h200", "cuda", "fa3", "dsa", true, []fixtureDev{{"0000:3b:00.0", true, ""}}, []string{"dsa", "fa3", "flashinfer"}},
		{"b200", "cuda", "trtllm_mla", "dsa", true, []fixtureDev{{"0000:1b:00.0", true, ""}, {"0000:43:00.0", true, ""}}, []string{"dsa", "fa3", "flashinfer"}},
		{"a100", "cuda", "triton", "triton", false, []fixtureDev{{"0000:07:00.0", true, ""}}, []string{"flashinfer"}},
		{"rtx4090", "cuda", "triton", "triton", false, []fixtureDev{{"0000:01:00.0", true, ""}}, []string{"flashinfer"}},
		{"nvidia_plus_igpu", "cuda", "triton", "triton", false,
			[]fixtureDev{{"0000:00:02.0", false, "capable: integrated GPU"}, {"0000:01:00.0", true, ""}}, []string{"flashinfer"}},
		{"container_no_driver", "cpu", "intel_amx", "intel_amx", true,
			[]fixtureDev{{"0000:3b:00.0", false, "driver: NVIDIA driver not loaded"}}, []string{"intel_xpu"}},
		{"vfio", "cpu", "intel_amx", "intel_amx", true,
			[]fixtureDev{{"0000:3b:00.0", false, "driver: bound to vfio-pci"}, {"0000:5e:00.0", false, "driver: no kernel driver"}}, []string{"intel_xpu"}},
		{"mi300x", "hip", "aiter", "dsa", false, []fixtureDev{{"0000:05:00.0", true, ""}, {"0000:26:00.0", true, ""}}, []string{"aiter", "dsa"}},
		{"mi355x", "hip", "aiter", "dsa", false, []fixtureDev{{"0000:75:00.0", true, ""}}, []string{"aiter", "dsa"}},
		{"ascend910b", "npu", "ascend", "ascend", false, []fixtureDev{{"0000:81:00.0", true, ""}, {"0000:c1:00.0", true, ""}}, []string{"ascend"}},
		{"intel_max1550", "xpu", "triton", "triton", true, []fixtureDev{{"0000:29:00.0", true, ""}}, []string{"intel_xpu"}},
		{"spr_amx", "cpu", "intel_amx", "intel_amx", true, nil, []string{"intel_xpu"}},
		{"cpu_noamx", "cpu", "torch_native", "torch_native", false, nil, nil},
		{"arm64", "cpu", "torch_native", "torch_native", false, nil, nil},
		{"acme", "cpu", "torch_native", "torch_native", false,
			[]fixtureDev{{"0000:41:00.0", true, ""}, {"0000:42:00.0", false, "driver: bound to vfio-pci"}}, nil},
		{"acme_no_node", "cpu", "torch_native", "torch_native", false,
			[]fixtureDev{{"0000:41:00.0", false, "device node: /dev/accel/accel0 missing"}, {"0000:61:00.0", false, "driver: no kernel driver"}}, nil},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.fixture] = true
		t.Run(tt.fixture, func(t *testing.T) { checkDetectJSON(t, tt) })
	}
	for _, n := range detecttest.Names() {
		if !seen[n] {
			t.Errorf("fixture %s has no test case", n)
		}
	}
}

// checkDetectJSON runs attnplug detect --json on one fixture and checks its
// keys, platform, defaults, devices and plugins.
func checkDetectJSON(t *testing.T, tt detectJSONCase) {
	t.Helper()
	res := host(t, bins, "", "detect", "--json", "--root", detecttest.Fixture(t, tt.fixture))
	if res.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.stdout), &top); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.stdout)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range top {
			if !yield(k) {
				return
			}
		}
	}); !reflect.DeepEqual(got, []string{"cpu", "default_backend", "devices", "platform", "plugins"}) {
		t.Errorf("keys: got %v", got)
	}
	var got detectJSON
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Platform != tt.platform {
		t.Errorf("platform: got %q, want %q", got.Platform, tt.platform)
	}
	if got.DefaultBackend.MLA != tt.mla || got.DefaultBackend.DSA != tt.dsa {
		t.Errorf("default backend: got mla=%s dsa=%s, want mla=%s dsa=%s", got.DefaultBackend.MLA, got.DefaultBackend.DSA, tt.mla, tt.dsa)
	}
	// Where attnplug's DSA default differs from sglang's (sm80-89,
	// XPU), sglang's own choice comes along with the reason.
	sg := got.DefaultBackend.SGLang
	differs := slices.Contains([]string{"a100", "rtx4090", "nvidia_plus_igpu", "intel_max1550"}, tt.fixture)
	switch {
	case differs && (sg == nil || sg.MLA != tt.mla || sg.DSA != "dsa" || !strings.HasPrefix(sg.Reason, "dsa: sglang picks dsa, which cannot run here (needs ")):
		t.Errorf("sglang_default: got %+v, want mla=%s dsa=dsa with the reason", sg, tt.mla)
	case !differs && sg != nil:
		t.Errorf("sglang_default: got %+v where attnplug agrees with sglang", sg)
	}
	if got.CPU.AMX != tt.amx {
		t.Errorf("cpu.amx: got %v, want %v", got.CPU.AMX, tt.amx)
	}
	if len(got.Devices) != len(tt.devs) {
		t.Fatalf("devices: got %+v, want %d", got.Devices, len(tt.devs))
	}
	for i, w := range tt.devs {
		d := got.Devices[i]
		if d.PCIAddress != w.addr || d.Usable != w.usable || !strings.HasPrefix(d.Reason, w.reason) || (w.usable && d.Reason != "") {
			t.Errorf("device %d: got %s usable=%v reason=%q, want %s usable=%v reason %q...", i, d.PCIAddress, d.Usable, d.Reason, w.addr, w.usable, w.reason)
		}
	}
	var names []string
	for _, p := range got.Plugins {
		names = append(names, p.Name)
		want := slices.Contains(tt.served, p.Name)
		if p.Served != want {
			t.Errorf("plugin %s: served %v (reason %q), want %v", p.Name, p.Served, p.Reason, want)
		}
		if !p.Served && p.Reason == "" {
			t.Errorf("plugin %s: not served and no reason", p.Name)
		}
		if p.Status != "ready" || len(p.Names) == 0 || p.Path != bins.Plugin(p.Name) {
			t.Errorf("plugin %s: got status %q names %v path %s", p.Name, p.Status, p.Names, p.Path)
		}
	}
	if !reflect.DeepEqual(names, bins.Plugins) {
		t.Errorf("plugins listed: got %v, want %v", names, bins.Plugins)
	}
}

// TestDetectPluginReasons checks that a plugin the hardware cannot run
// says what its names need.
func TestDetectPluginReasons(t *testing.T) {
	res := host(t, bins, "", "detect", "--json", "--root", detecttest.Fixture(t, "h200"))
	if res.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
	}
	var got detectJSON
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"aiter":     "aiter: needs platform hip, host is cuda",
		"ascend":    "ascend: needs platform npu, host is cuda",
		"intel_xpu": "intel_xpu: needs platform xpu, host is cuda; intel_amx: needs platform cpu, host is cuda",
	}
	for _, p := range got.Plugins {
		if w, ok := want[p.Name]; ok && p.Reason != w {
			t.Errorf("plugin %s: reason %q, want %q", p.Name, p.Reason, w)
		}
	}
	res = host(t, bins, "", "detect", "--json", "--root", detecttest.Fixture(t, "a100"))
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatal(err)
	}
	for _, p := range got.Plugins {
		if p.Name == "fa3" && p.Reason != "fa3: needs compute capability >= 9.0, host has 8.0; fa4: needs compute capability >= 10.0, host has 8.0" {
			t.Errorf("fa3 on a100: reason %q", p.Reason)
		}
	}
}

// TestDetectReasonNamesEveryName: the reason a plugin is not served names
// every name the plugin serves, from its description: tokenspeed_mla of
// flashinfer and nsa of dsa, which share another name's rules, too.
func TestDetectReasonNamesEveryName(t *testing.T) {
	res := host(t, bins, "", "detect", "--json", "--root", detecttest.Fixture(t, "cpu_noamx"))
	var got detectJSON
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || res.code != 0 {
		t.Fatalf("exit %d, %v:\n%s", res.code, err, res.stderr)
	}
	var flashinfer bool
	for _, p := range got.Plugins {
		if p.Served {
			continue
		}
		for _, n := range p.Names {
			if !slices.Contains(strings.FieldsFunc(p.Reason, func(r rune) bool { return r == ',' || r == ':' || r == ';' || r == ' ' }), n) {
				t.Errorf("plugin %s: reason %q does not name %s", p.Name, p.Reason, n)
			}
		}
		flashinfer = flashinfer || p.Name == "flashinfer" && slices.Contains(p.Names, "tokenspeed_mla")
	}
	if !flashinfer {
		t.Errorf("flashinfer, serving tokenspeed_mla, is served on a CPU host, or missing: %+v", got.Plugins)
	}
}

func TestDetectTable(t *testing.T) {
	res := host(t, bins, "", "detect", "--root", detecttest.Fixture(t, "h200"))
	if res.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
	}
	for _, want := range []string{"platform:", "cuda", "mla=fa3  dsa=dsa", "NVIDIA H200", "0000:3b:00.0", "PLUGIN", "fa3,fa4", "prefill=fa3 (default)  decode=fa3 (default)"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, res.stdout)
		}
	}
}

func TestDoctorExplains(t *testing.T) {
	tests := []struct {
		fixture string
		want    []string
	}{
		{"container_no_driver", []string{"[error]", "NVIDIA H100", "0000:3b:00.0", "NVIDIA driver not loaded", "modprobe nvidia", "NVIDIA runtime", "--gpus all"}},
		{"vfio", []string{"[error]", "0000:3b:00.0", "vfio-pci", "echo 0000:3b:00.0 > /sys/bus/pci/drivers/vfio-pci/unbind", "0000:5e:00.0", "no kernel driver bound", "modprobe nvidia"}},
		{"h200", []string{"[ok]", "healthy"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			res := host(t, bins, "", "doctor", "--root", detecttest.Fixture(t, tt.fixture))
			if res.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", res.code, res.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.stdout, w) {
					t.Errorf("doctor lacks %q:\n%s", w, res.stdout)
				}
			}
		})
	}
	res := host(t, bins, "", "doctor", "--json", "--root", detecttest.Fixture(t, "vfio"))
	var findings []detect.Finding
	if err := json.Unmarshal([]byte(res.stdout), &findings); err != nil || len(findings) != 2 || len(findings[0].Advice) == 0 {
		t.Errorf("doctor --json: got %+v, %v", findings, err)
	}
}

func TestDetectSelectForced(t *testing.T) {
	h100 := detecttest.Fixture(t, "h100")
	res := host(t, bins, "", "detect", "--root", h100, "--backend", "aiter")
	if res.code != 1 || !strings.Contains(res.stderr, `"aiter"`) || !strings.Contains(res.stderr, "hip") || !strings.Contains(res.stderr, "from flag") {
		t.Errorf("--backend aiter on h100: exit %d, stderr %q; want 1 and a reason naming aiter and hip", res.code, res.stderr)
	}
	if res.stdout != "" {
		t.Errorf("a failed selection printed %q", res.stdout)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--backend", "aiter", "--allow-fallback")
	if res.code != 0 || !strings.Contains(res.stderr, "[WARN]") || !strings.Contains(res.stderr, "falling back to triton") {
		t.Errorf("--allow-fallback: exit %d, stderr %q; want 0 and a warning", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "prefill=triton (fallback)  decode=triton (fallback)") {
		t.Errorf("--allow-fallback: selection not shown:\n%s", res.stdout)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--prefill-backend", "flashinfer", "--decode-backend", "flashmla")
	if res.code != 0 || !strings.Contains(res.stdout, "prefill=flashinfer (flag)  decode=flashmla (flag)") {
		t.Errorf("per-phase flags: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--decode-backend", "trtllm_mla")
	if res.code != 1 || !strings.Contains(res.stderr, `decode backend "trtllm_mla"`) || !strings.Contains(res.stderr, "10.0") {
		t.Errorf("--decode-backend trtllm_mla on h100: exit %d, stderr %q", res.code, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--backend", "no_such")
	if res.code != 2 || !strings.Contains(res.stderr, "unknown attention backend") { // a usage error
		t.Errorf("unknown backend: exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestDetectSelectEnv(t *testing.T) {
	h100 := detecttest.Fixture(t, "h100")
	t.Setenv(detect.EnvBackend, "aiter")
	res := host(t, bins, "", "detect", "--root", h100)
	if res.code != 1 || !strings.Contains(res.stderr, `"aiter" (from env)`) {
		t.Errorf("ATTNPLUG_BACKEND=aiter on h100: exit %d, stderr %q", res.code, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--backend", "fa3")
	if res.code != 0 || !strings.Contains(res.stdout, "prefill=fa3 (flag)") {
		t.Errorf("a flag beats the environment: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	t.Setenv(detect.EnvBackend, "flashinfer")
	res = host(t, bins, "", "detect", "--root", h100)
	if res.code != 0 || !strings.Contains(res.stdout, "prefill=flashinfer (env)  decode=flashinfer (env)") {
		t.Errorf("ATTNPLUG_BACKEND=flashinfer: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

func TestDetectSelectConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	h100 := detecttest.Fixture(t, "h100")
	res := host(t, bins, "", "detect", "--root", h100, "--config", write("ascend.json", `{"backend": "ascend"}`))
	if res.code != 1 || !strings.Contains(res.stderr, `"ascend" (from config)`) || !strings.Contains(res.stderr, "npu") {
		t.Errorf("config ascend on h100: exit %d, stderr %q", res.code, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--config", write("decode.json", `{"decode_backend": "flashmla"}`))
	if res.code != 0 || !strings.Contains(res.stdout, "prefill=fa3 (default)  decode=flashmla (config)") {
		t.Errorf("config decode_backend: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	t.Setenv(detect.EnvBackend, "triton")
	res = host(t, bins, "", "detect", "--root", h100, "--config", write("decode.json", `{"decode_backend": "flashmla"}`))
	if res.code != 0 || !strings.Contains(res.stdout, "prefill=triton (env)  decode=triton (env)") {
		t.Errorf("the environment beats the config file: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	t.Setenv(detect.EnvBackend, "")
	// tp_size 2 on ROCm: 64 heads per GPU, which aiter does not take.
	mi300x := detecttest.Fixture(t, "mi300x")
	tp2 := write("tp2.json", `{"tp_size": 2}`)
	res = host(t, bins, "", "detect", "--json", "--root", mi300x, "--config", tp2)
	var got detectJSON
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || got.DefaultBackend.MLA != "triton" {
		t.Errorf("config tp_size 2 on mi300x: got %+v, %v; stderr %s", got.DefaultBackend, err, res.stderr)
	}
	res = host(t, bins, "", "detect", "--json", "--root", mi300x, "--config", tp2, "--tp-size", "8")
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || got.DefaultBackend.MLA != "aiter" {
		t.Errorf("--tp-size 8 beats the config: got %+v, %v; stderr %s", got.DefaultBackend, err, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--config", write("typo.json", `{"bakend": "fa3"}`))
	if res.code != 2 || !strings.Contains(res.stderr, "bakend") {
		t.Errorf("config with a typo: exit %d, stderr %q; want 2 naming the key", res.code, res.stderr)
	}
	res = host(t, bins, "", "detect", "--root", h100, "--tp-size", "0")
	if res.code != 2 {
		t.Errorf("--tp-size 0: exit %d, want 2", res.code)
	}
}

// TestSelectBackends runs selectBackends in process, as serve does.
func TestSelectBackends(t *testing.T) {
	r, err := detect.Detect(context.Background(), detect.Options{Root: detecttest.Fixture(t, "mi355x")})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(detect.EnvBackend, "")
	sf := selectFlags{attention: detect.AttentionDSA}
	sel, err := selectBackends(r, &sf, nil)
	if err != nil || sel.Prefill != "dsa" || sel.Decode != "dsa" || sel.TPSize != 1 {
		t.Errorf("dsa default on mi355x: got %+v, %v", sel, err)
	}
	sf = selectFlags{backend: "fa3"}
	_, err = selectBackends(r, &sf, nil)
	if !errors.Is(err, detect.ErrUnsupportedBackend) {
		t.Errorf("fa3 on mi355x: got %v, want ErrUnsupportedBackend", err)
	}
	sf.allowFallback = true
	sel, err = selectBackends(r, &sf, nil)
	if err != nil || sel.Prefill != "triton" || len(sel.Warnings) != 2 {
		t.Errorf("fa3 on mi355x with fallback: got %+v, %v", sel, err)
	}
	sf = selectFlags{config: filepath.Join(t.TempDir(), "missing.json")}
	var ue *usageError
	if _, err := selectBackends(r, &sf, nil); !errors.As(err, &ue) {
		t.Errorf("missing config: got %v, want a usage error", err)
	}
}

// TestDetectPluginHardwareMatchesTable holds every plugin's declared
// hardware to detect's requirement table, the one source of both.
func TestDetectPluginHardwareMatchesTable(t *testing.T) {
	rules := map[string][]core.Rule{
		"aiter": aiterrules.Rules(), "ascend": ascendrules.Rules(), "dsa": dsarules.Rules(),
		"fa3": fa3rules.Rules(), "flashinfer": flashinferrules.Rules(), "intel_xpu": xpurules.Rules(),
	}
	for plugin, rs := range rules {
		for _, r := range rs {
			want, ok := detect.HardwareFor(r.Name)
			if !ok {
				t.Errorf("%s/%s: not in detect's requirement table", plugin, r.Name)
				continue
			}
			if !reflect.DeepEqual(r.Hardware, want) {
				t.Errorf("%s/%s: declares %+v, detect's table says %+v", plugin, r.Name, r.Hardware, want)
			}
		}
	}
}

// TestConfigureRefuses checks that a plugin asked to serve on hardware it
// does not support refuses with a clear error: in process, and through the
// real fa3 binary over go-plugin.
func TestConfigureRefuses(t *testing.T) {
	cpu := core.HostInfo{Platform: core.PlatformCPU, Archs: []string{"amd64"}}
	h200 := core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 90, Archs: []string{"sm90"}}
	check := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, core.ErrRefused) {
			t.Fatalf("configure on cpu: got %v, want core.ErrRefused", err)
		}
		for _, w := range []string{"fa3", "cuda", "fa4"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("configure on cpu: %q does not name %s", err, w)
			}
		}
	}
	t.Run("in process", func(t *testing.T) {
		b, err := fa3rules.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := b.(core.Configurer)
		if !ok {
			t.Fatalf("fa3 backend %T is not a core.Configurer", b)
		}
		check(t, c.Configure(context.Background(), cpu))
		if err := c.Configure(context.Background(), h200); err != nil {
			t.Errorf("configure on h200: %v", err)
		}
	})
	t.Run("plugin process", func(t *testing.T) {
		client := goplugin.NewClient(&goplugin.ClientConfig{
			HandshakeConfig:  wire.Handshake(),
			VersionedPlugins: wire.VersionedPlugins(nil),
			Cmd:              exec.Command(bins.Plugin("fa3")),
			AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
			Logger:           hclog.NewNullLogger(),
		})
		defer client.Kill()
		rpc, err := client.Client()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := rpc.Dispense(wire.PluginName)
		if err != nil {
			t.Fatal(err)
		}
		wc, ok := raw.(*wire.Client)
		if !ok {
			t.Fatalf("dispensed %T, want *wire.Client", raw)
		}
		ctx := testContext(t)
		check(t, wc.Configure(ctx, cpu))
		if err := wc.Configure(ctx, h200); err != nil {
			t.Errorf("configure on h200: %v", err)
		}
	})
}

// TestDetectPlatformDefault checks hostPlatform: --platform wins, and
// without it the real root's platform comes from files alone.
func TestDetectPlatformDefault(t *testing.T) {
	h := hostFlags{platform: "hip"}
	if p, err := h.hostPlatform(t.Context()); err != nil || p != core.PlatformHIP {
		t.Errorf("--platform hip: got %v, %v", p, err)
	}
	h = hostFlags{platform: "gpu"}
	if _, err := h.hostPlatform(t.Context()); err == nil {
		t.Errorf("--platform gpu: no error")
	}
	h = hostFlags{}
	p, err := h.hostPlatform(t.Context())
	if err != nil || p == core.PlatformUnset || !p.Valid() {
		t.Errorf("detected platform: got %v, %v", p, err)
	}
}
