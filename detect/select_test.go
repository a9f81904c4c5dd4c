package detect

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestSelectOverrides(t *testing.T) {
	tests := []struct {
		fixture string
		sel     SelectOptions
		prefill string
		decode  string
		psrc    string
		dsrc    string
		warn    string // a substring of the first warning, "" for none
		errSub  []string
		errIs   error
	}{
		// Defaults per platform.
		{fixture: "h200", prefill: "fa3", decode: "fa3", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "h200", sel: SelectOptions{Attention: AttentionDSA}, prefill: "dsa", decode: "dsa", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "b200", prefill: "trtllm_mla", decode: "trtllm_mla", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "a100", prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "ascend910b", sel: SelectOptions{Attention: AttentionDSA}, prefill: "ascend", decode: "ascend", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "intel_max1550", prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "spr_amx", sel: SelectOptions{Attention: AttentionDSA}, prefill: "intel_amx", decode: "intel_amx", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "arm64", prefill: "torch_native", decode: "torch_native", psrc: SourceDefault, dsrc: SourceDefault},

		// ROCm: aiter when 128/tp is 16 or 128.
		{fixture: "mi300x", sel: SelectOptions{TPSize: 1}, prefill: "aiter", decode: "aiter", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{TPSize: 2}, prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{TPSize: 4}, prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{TPSize: 8}, prefill: "aiter", decode: "aiter", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{TPSize: 16}, prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{Config: &Config{TPSize: 2}}, prefill: "triton", decode: "triton", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi300x", sel: SelectOptions{TPSize: 8, Config: &Config{TPSize: 2}}, prefill: "aiter", decode: "aiter", psrc: SourceDefault, dsrc: SourceDefault},
		{fixture: "mi355x", sel: SelectOptions{Attention: AttentionDSA, TPSize: 2}, prefill: "dsa", decode: "dsa", psrc: SourceDefault, dsrc: SourceDefault},

		// Precedence: flags > env > config > default.
		{fixture: "h200", sel: SelectOptions{Backend: "flashinfer", Env: "triton", Config: &Config{Backend: "flashmla"}}, prefill: "flashinfer", decode: "flashinfer", psrc: SourceFlag, dsrc: SourceFlag},
		{fixture: "h200", sel: SelectOptions{Env: "triton", Config: &Config{Backend: "flashmla"}}, prefill: "triton", decode: "triton", psrc: SourceEnv, dsrc: SourceEnv},
		{fixture: "h200", sel: SelectOptions{Config: &Config{Backend: "flashmla"}}, prefill: "flashmla", decode: "flashmla", psrc: SourceConfig, dsrc: SourceConfig},
		{fixture: "h200", sel: SelectOptions{Config: &Config{Backend: "flashmla", PrefillBackend: "fa3"}}, prefill: "fa3", decode: "flashmla", psrc: SourceConfig, dsrc: SourceConfig},
		{fixture: "h200", sel: SelectOptions{Env: "triton", Config: &Config{PrefillBackend: "fa3"}}, prefill: "triton", decode: "triton", psrc: SourceEnv, dsrc: SourceEnv},
		{fixture: "h200", sel: SelectOptions{DecodeBackend: "flashmla", Env: "triton"}, prefill: "triton", decode: "flashmla", psrc: SourceEnv, dsrc: SourceFlag},
		{fixture: "h200", sel: SelectOptions{Backend: "triton", PrefillBackend: "fa3"}, prefill: "fa3", decode: "triton", psrc: SourceFlag, dsrc: SourceFlag},
		{fixture: "h200", sel: SelectOptions{Backend: " FA3 "}, prefill: "fa3", decode: "fa3", psrc: SourceFlag, dsrc: SourceFlag},
		{fixture: "h200", sel: SelectOptions{Attention: AttentionDSA, Backend: "nsa"}, prefill: "dsa", decode: "dsa", psrc: SourceFlag, dsrc: SourceFlag},
		{fixture: "mi300x", sel: SelectOptions{Backend: "aiter", TPSize: 2}, prefill: "aiter", decode: "aiter", psrc: SourceFlag, dsrc: SourceFlag},
		{fixture: "intel_max1550", sel: SelectOptions{DecodeBackend: "intel_xpu"}, prefill: "triton", decode: "intel_xpu", psrc: SourceDefault, dsrc: SourceFlag},
		{fixture: "cpu_noamx", sel: SelectOptions{Backend: "triton"}, prefill: "triton", decode: "triton", psrc: SourceFlag, dsrc: SourceFlag},

		// Forced backends this hardware cannot run.
		{fixture: "mi300x", sel: SelectOptions{Backend: "fa3"}, errSub: []string{`"fa3"`, "platform hip", "needs platform cuda"}, errIs: ErrUnsupportedBackend},
		{fixture: "a100", sel: SelectOptions{Backend: "fa3"}, errSub: []string{`"fa3"`, "platform cuda", "needs compute capability 9.0 or newer, lowest usable GPU has 8.0"}, errIs: ErrUnsupportedBackend},
		{fixture: "b200", sel: SelectOptions{Env: "fa3"}, errSub: []string{`"fa3" (from env)`, "at most 9.x, highest usable GPU has 10.0"}, errIs: ErrUnsupportedBackend},
		{fixture: "h200", sel: SelectOptions{Config: &Config{DecodeBackend: "trtllm_mla"}}, errSub: []string{`decode backend "trtllm_mla" (from config)`, "10.0 or newer"}, errIs: ErrUnsupportedBackend},
		{fixture: "h100", sel: SelectOptions{Backend: "ascend"}, errSub: []string{`"ascend"`, "needs platform npu"}, errIs: ErrUnsupportedBackend},
		{fixture: "h100", sel: SelectOptions{Backend: "aiter"}, errSub: []string{`"aiter"`, "needs platform hip"}, errIs: ErrUnsupportedBackend},
		{fixture: "cpu_noamx", sel: SelectOptions{Backend: "intel_amx"}, errSub: []string{`"intel_amx"`, "platform cpu", "needs usable Intel AMX: CPU lacks AMX"}, errIs: ErrUnsupportedBackend},
		{fixture: "arm64", sel: SelectOptions{Backend: "intel_amx"}, errSub: []string{"needs CPU architecture amd64, this CPU is arm64"}, errIs: ErrUnsupportedBackend},
		{fixture: "intel_max1550", sel: SelectOptions{Backend: "intel_xpu"}, errSub: []string{`prefill backend "intel_xpu"`, "decode only"}, errIs: ErrUnsupportedBackend},
		{fixture: "vfio", sel: SelectOptions{Backend: "fa3"}, errSub: []string{"platform cpu", "needs platform cuda"}, errIs: ErrUnsupportedBackend},
		{fixture: "h200", sel: SelectOptions{Backend: "trtllm_mha"}, errSub: []string{`"trtllm_mha"`, "known: "}, errIs: ErrUnknownBackend},

		// AllowFallback turns the error into triton plus a warning.
		{fixture: "mi300x", sel: SelectOptions{Backend: "fa3", AllowFallback: true}, prefill: "triton", decode: "triton", psrc: SourceFallback, dsrc: SourceFallback, warn: "prefill backend fa3 (from flag) cannot run on platform hip: needs platform cuda, this host serves on hip; falling back to triton"},
		{fixture: "h200", sel: SelectOptions{PrefillBackend: "fa3", DecodeBackend: "trtllm_mla", AllowFallback: true}, prefill: "fa3", decode: "triton", psrc: SourceFlag, dsrc: SourceFallback, warn: "decode backend trtllm_mla"},
	}
	for _, tt := range tests {
		name := tt.fixture + "/" + describe(tt.sel)
		t.Run(name, func(t *testing.T) {
			r := detectFixture(t, tt.fixture, Options{})
			s, err := Select(r, tt.sel)
			if tt.errIs != nil {
				if !errors.Is(err, tt.errIs) {
					t.Fatalf("error: got %v, want %v", err, tt.errIs)
				}
				for _, sub := range tt.errSub {
					if !strings.Contains(err.Error(), sub) {
						t.Errorf("error %q lacks %q", err, sub)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("select: %v", err)
			}
			if s.Prefill != tt.prefill || s.Decode != tt.decode || s.PrefillSource != tt.psrc || s.DecodeSource != tt.dsrc {
				t.Errorf("got prefill=%s(%s) decode=%s(%s), want prefill=%s(%s) decode=%s(%s)",
					s.Prefill, s.PrefillSource, s.Decode, s.DecodeSource, tt.prefill, tt.psrc, tt.decode, tt.dsrc)
			}
			if s.Hybrid() != (tt.prefill != tt.decode) {
				t.Errorf("hybrid: got %v", s.Hybrid())
			}
			switch {
			case tt.warn == "" && len(s.Warnings) > 0:
				t.Errorf("warnings: got %q, want none", s.Warnings)
			case tt.warn != "" && (len(s.Warnings) == 0 || !strings.Contains(s.Warnings[0], tt.warn)):
				t.Errorf("warnings: got %q, want one containing %q", s.Warnings, tt.warn)
			}
		})
	}
}

// describe names a SelectOptions for a subtest.
func describe(s SelectOptions) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+strings.TrimSpace(v))
		}
	}
	add("att", s.Attention)
	add("backend", s.Backend)
	add("prefill", s.PrefillBackend)
	add("decode", s.DecodeBackend)
	add("env", s.Env)
	if s.Config != nil {
		parts = append(parts, "config")
	}
	if s.TPSize != 0 {
		parts = append(parts, "tp")
	}
	if s.AllowFallback {
		parts = append(parts, "fallback")
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, ",")
}

// gpu is a usable NVIDIA device of a capability, for hand-made reports.
func gpu(addr, cc string) Device {
	return Device{Vendor: VendorNVIDIA, PCIAddress: addr, ComputeCapability: cc, Arch: "sm" + strings.ReplaceAll(cc, ".", ""), Usable: true}
}

func TestSelectMixedGPUs(t *testing.T) {
	tests := []struct {
		name string
		devs []Device
		mla  string
		warn bool
	}{
		{"h100 and a100 use the lowest, sm80", []Device{gpu("0000:01:00.0", "9.0"), gpu("0000:02:00.0", "8.0")}, "triton", false},
		{"h100 and b200: fa3 cannot run on the b200", []Device{gpu("0000:01:00.0", "9.0"), gpu("0000:02:00.0", "10.0")}, "triton", true},
		{"b200 and b300 are both sm10x", []Device{gpu("0000:01:00.0", "10.3"), gpu("0000:02:00.0", "10.0")}, "trtllm_mla", false},
		{"an unusable a100 does not count", []Device{gpu("0000:01:00.0", "9.0"), {Vendor: VendorNVIDIA, PCIAddress: "0000:02:00.0", ComputeCapability: "8.0", Reason: "driver: x"}}, "fa3", false},
		{"rtx 5090 is sm120: triton", []Device{gpu("0000:01:00.0", "12.0")}, "triton", false},
		{"thor is sm110: triton", []Device{gpu("0000:01:00.0", "11.0")}, "triton", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{Devices: tt.devs, Platform: choosePlatform(tt.devs)}
			s, err := Select(r, SelectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Prefill != tt.mla || (len(s.Warnings) > 0) != tt.warn {
				t.Errorf("got %s warnings %q, want %s warning=%v", s.Prefill, s.Warnings, tt.mla, tt.warn)
			}
			r.TPSize = 1
			if got := defaults(r).MLA; got != tt.mla {
				t.Errorf("defaults: got %s, want %s", got, tt.mla)
			}
		})
	}
}

func TestRequirementSatisfied(t *testing.T) {
	h200 := Report{Platform: PlatformCUDA, Devices: []Device{gpu("0000:3b:00.0", "9.0")}}
	mi300 := Report{Platform: PlatformHIP, Devices: []Device{{Vendor: VendorAMD, PCIAddress: "0000:05:00.0", Arch: "gfx942", Usable: true}}}
	navi := Report{Platform: PlatformHIP, Devices: []Device{{Vendor: VendorAMD, PCIAddress: "0000:05:00.0", Arch: "gfx1100", Usable: true}}}
	amx := Report{Platform: PlatformCPU, CPU: CPU{Arch: "amd64", AMX: true}}
	tests := []struct {
		name   string
		req    Requirement
		r      Report
		ok     bool
		reason string
	}{
		{"zero requirement runs anywhere", Requirement{}, amx, true, ""},
		{"fa3 on h200", mustReq(t, "fa3"), h200, true, ""},
		{"fa3 on mi300", mustReq(t, "fa3"), mi300, false, "needs platform cuda, this host serves on hip"},
		{"aiter on mi300", mustReq(t, "aiter"), mi300, true, ""},
		{"aiter on gfx1100", mustReq(t, "aiter"), navi, false, "needs gfx90a, gfx942, gfx950, 0000:05:00.0 is gfx1100"},
		{"intel_amx with amx", mustReq(t, "intel_amx"), amx, true, ""},
		{"intel_amx without amx", mustReq(t, "intel_amx"), Report{Platform: PlatformCPU, CPU: CPU{Arch: "amd64", Reason: "no"}}, false, "needs usable Intel AMX: no"},
		{"trtllm_mla on h200", mustReq(t, "trtllm_mla"), h200, false, "needs compute capability 10.0 or newer, lowest usable GPU has 9.0"},
		{"cuda without usable gpu", Requirement{Platforms: []string{PlatformCUDA}, MinCapability: 80}, Report{Platform: PlatformCUDA}, false, "needs a usable NVIDIA GPU, none found"},
		{"empty platform is derived", mustReq(t, "torch_native"), Report{}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := tt.req.Satisfied(tt.r)
			if ok != tt.ok || why != tt.reason {
				t.Errorf("got %v %q, want %v %q", ok, why, tt.ok, tt.reason)
			}
		})
	}
}

func mustReq(t *testing.T, name string) Requirement {
	t.Helper()
	q, ok := RequirementFor(name)
	if !ok {
		t.Fatalf("no requirement for %s", name)
	}
	return q
}

func TestBackendsTable(t *testing.T) {
	names := Backends()
	for _, want := range []string{"aiter", "ascend", "dsa", "fa3", "intel_amx", "intel_xpu", "torch_native", "triton", "trtllm_mla"} {
		if !contains(names, want) {
			t.Errorf("Backends() lacks %s: %v", want, names)
		}
	}
	if _, ok := RequirementFor("NSA"); !ok {
		t.Errorf("the nsa alias is not accepted")
	}
	// The table is rebuilt per call: changing a copy changes nothing.
	q, _ := RequirementFor("fa3")
	q.Platforms[0] = "hip"
	if q2, _ := RequirementFor("fa3"); q2.Platforms[0] != PlatformCUDA {
		t.Errorf("requirement table was mutated through a copy")
	}
}

func TestSelectInvalid(t *testing.T) {
	if _, err := Select(nil, SelectOptions{}); err == nil {
		t.Errorf("nil report: no error")
	}
	r := &Report{Platform: PlatformCPU}
	if _, err := Select(r, SelectOptions{Attention: "mha"}); err == nil {
		t.Errorf("attention mha: no error")
	}
	if _, err := Select(r, SelectOptions{TPSize: -2}); err == nil {
		t.Errorf("negative tp: no error")
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write("ok.json", `{"backend": "triton", "prefill_backend": "fa3", "decode_backend": "flashmla", "tp_size": 8}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Config{Backend: "triton", PrefillBackend: "fa3", DecodeBackend: "flashmla", TPSize: 8}); *c != want {
		t.Errorf("got %+v, want %+v", *c, want)
	}
	if _, err := LoadConfig(write("typo.json", `{"bakend": "fa3"}`)); err == nil || !strings.Contains(err.Error(), "bakend") {
		t.Errorf("unknown key: got %v, want an error naming it", err)
	}
	if _, err := LoadConfig(write("bad.json", `{"backend": `)); err == nil {
		t.Errorf("bad json: no error")
	}
	if _, err := LoadConfig(write("neg.json", `{"tp_size": -1}`)); err == nil {
		t.Errorf("negative tp_size: no error")
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}

// TestSelectServedNames: a name the host's plugins serve beyond sglang's
// (a vendor's) is selected, exactly as spelled, and held to the hardware
// its description declares; sglang's names keep the table's requirement.
func TestSelectServedNames(t *testing.T) {
	h200 := detectFixture(t, "h200", Options{})
	served := map[string][]core.Hardware{
		"Acme_MLA": {{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90}},
		"acme_npu": {{Platforms: []core.Platform{core.PlatformNPU}}},
		// A plugin may not loosen an sglang name: the table decides.
		"fa4": nil,
	}
	sel, err := Select(h200, SelectOptions{Backend: " Acme_MLA ", Served: served})
	if err != nil || sel.Prefill != "Acme_MLA" || sel.Decode != "Acme_MLA" || sel.PrefillSource != SourceFlag {
		t.Fatalf("Acme_MLA on an H200: got %+v, %v", sel, err)
	}
	_, err = Select(h200, SelectOptions{DecodeBackend: "acme_npu", Served: served})
	if !errors.Is(err, ErrUnsupportedBackend) || !strings.Contains(err.Error(), "acme_npu") || !strings.Contains(err.Error(), "npu") {
		t.Errorf("acme_npu on an H200: got %v, want unsupported, saying why", err)
	}
	sel, err = Select(h200, SelectOptions{DecodeBackend: "acme_npu", Served: served, AllowFallback: true})
	if err != nil || sel.Decode != fallbackBackend || len(sel.Warnings) != 1 {
		t.Errorf("acme_npu with fallback: got %+v, %v", sel, err)
	}
	if _, err := Select(h200, SelectOptions{Backend: "fa4", Served: served}); !errors.Is(err, ErrUnsupportedBackend) {
		t.Errorf("fa4 served with no hardware on an H200: got %v, want the table's refusal", err)
	}
	_, err = Select(h200, SelectOptions{Backend: "acme_gpu", Served: served})
	if !errors.Is(err, ErrUnknownBackend) || !strings.Contains(err.Error(), "Acme_MLA") {
		t.Errorf("unknown name: got %v, want ErrUnknownBackend listing the served names", err)
	}
}
