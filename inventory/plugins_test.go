package inventory

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/registry"
)

// TestDeviceCodeTableSaysACauseOnce: plugins --kernels says a device-code
// error once per plugin, not once per name, and once in all when every
// plugin has the same cause (this host has no NVRTC); the modules of a
// plugin that hands them are listed per name, and a plugin whose names
// differ keeps a line per name.
func TestDeviceCodeTableSaysACauseOnce(t *testing.T) {
	const nvrtc = "kernel modules: example sm_90 device (compute 90): no device plan: compiling mla_decode for compute_90: cuda: NVRTC unavailable: libnvrtc.so.13: cannot open shared object file"
	atStart := func(plugin, cause string) *deviceCodeListing {
		c := &deviceCodeListing{what: deviceCodeNone, why: "plugin " + plugin + ": " + cause}
		c.Note = noteOf(c.what, c.why)
		return c
	}
	list := []registry.PluginInfo{
		{Name: "aiter", Names: []string{"aiter"}},
		{Name: "fa3", Names: []string{"fa3", "fa4"}, DeviceCode: true},
		{Name: "flashinfer", Names: []string{"flashinfer", "flashmla", "cutlass_mla", "trtllm_mla", "tokenspeed_mla"}, DeviceCode: true},
	}
	codes := map[string]*deviceCodeListing{}
	for _, p := range list[1:] {
		for _, n := range p.Names {
			codes[n] = atStart(p.Name, nvrtc)
		}
	}
	var out bytes.Buffer
	if err := deviceCodeTable(&out, list, codes); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if n := strings.Count(got, "NVRTC unavailable"); n != 1 {
		t.Errorf("the cause is written %d times, want once:\n%s", n, got)
	}
	for _, row := range [][]string{
		{"fa3", "fa3,fa4", "device", "code:", "none"},
		{"flashinfer", "flashinfer,flashmla,cutlass_mla,trtllm_mla,tokenspeed_mla", "device", "code:", "none"},
	} {
		if !hasRow(got, row...) {
			t.Errorf("no row %v:\n%s", row, got)
		}
	}
	if strings.Contains(got, "aiter") || strings.Contains(got, "plugin fa3:") {
		t.Errorf("aiter has no device code, and the shared cause names no plugin:\n%s", got)
	}

	// Different causes: one line per plugin, each with its own cause.
	for _, n := range list[2].Names {
		codes[n] = atStart("flashinfer", "kernel modules: compile error in mla_decode.cu")
	}
	out.Reset()
	if err := deviceCodeTable(&out, list, codes); err != nil {
		t.Fatal(err)
	}
	got = out.String()
	if strings.Count(got, "NVRTC unavailable") != 1 || strings.Count(got, "compile error") != 1 || strings.Contains(got, "every plugin") {
		t.Errorf("two plugins with their own causes: want each once, in its plugin's line:\n%s", got)
	}

	// A plugin that hands modules for one name and not for another keeps
	// a line per name.
	codes["fa3"] = &deviceCodeListing{Modules: []moduleListing{{Name: "mla_decode", Arch: "compute_90", Format: "ptx", Bytes: 10, SHA256: strings.Repeat("ab", 32), Entries: []string{"split"}}}}
	out.Reset()
	if err := deviceCodeTable(&out, list, codes); err != nil {
		t.Fatal(err)
	}
	got = out.String()
	if !hasRow(got, "fa3", "fa3", "mla_decode", "compute_90") || !hasRow(got, "fa3", "fa4", "device", "code:") {
		t.Errorf("fa3 with modules for fa3 only:\n%s", got)
	}
}

// TestModulesShowTheirDriverFloor: plugins --kernels lists each module
// with its PTX ISA (or a cubin's architecture) and the oldest driver that
// loads it, in the table and in JSON; a module whose floor is not known
// says so, and why, in JSON.
func TestModulesShowTheirDriverFloor(t *testing.T) {
	entries := []core.Entry{{Name: "split", Params: []core.Param{{Name: "q", Kind: core.ParamPtr}}}}
	ptx := func(name, isa string) core.KernelModule {
		img := []byte(strings.Replace(string(ptxstub.Image("compute_90", "", entries)), ".version 8.0", ".version "+isa, 1))
		return core.KernelModule{Name: name, Platform: core.PlatformCUDA, Arch: "compute_90", Format: core.FormatPTX, Image: img, SHA256: core.ImageSHA256(img), Entries: entries}
	}
	stand := []byte("stand-in cubin")
	mods := []core.KernelModule{ptx("decode", "8.0"), ptx("decode_new", "9.9"),
		{Name: "decode_bin", Platform: core.PlatformCUDA, Arch: "sm_90", Format: core.FormatCUBIN, Image: stand, SHA256: core.ImageSHA256(stand), Entries: entries}}
	code := &deviceCodeListing{Device: "example sm_90 device", ComputeCapability: 90}
	for _, m := range mods {
		code.Modules = append(code.Modules, listModule(m))
	}
	list := []registry.PluginInfo{{Name: "acme", Names: []string{"acme"}, DeviceCode: true}}
	var out bytes.Buffer
	if err := deviceCodeTable(&out, list, map[string]*deviceCodeListing{"acme": code}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, row := range [][]string{
		{"PLUGIN", "NAME", "MODULE", "ARCH", "FORMAT", "ISA", "DRIVER", "BYTES"},
		{"acme", "acme", "decode", "compute_90", "ptx", "8.0", "525.60.13", "(CUDA", "12.0)"},
		{"acme", "acme", "decode_new", "compute_90", "ptx", "9.9", "not", "known"},
		{"acme", "acme", "decode_bin", "sm_90", "cubin", "-", "not", "known"},
	} {
		if !hasRow(got, row...) {
			t.Errorf("no row %v:\n%s", row, got)
		}
	}
	data, err := json.Marshal(code)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Modules []struct {
			Name  string `json:"name"`
			Floor *struct {
				PTXISA    string `json:"ptx_isa"`
				ImageArch string `json:"image_arch"`
				MinCUDA   string `json:"min_cuda"`
				MinDriver string `json:"min_driver"`
			} `json:"floor"`
			FloorError string `json:"floor_error"`
		} `json:"modules"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	m := back.Modules
	if len(m) != 3 || m[0].Floor == nil || *m[0].Floor != (struct {
		PTXISA    string `json:"ptx_isa"`
		ImageArch string `json:"image_arch"`
		MinCUDA   string `json:"min_cuda"`
		MinDriver string `json:"min_driver"`
	}{"8.0", "sm_90", "12.0", "525.60.13"}) || m[0].FloorError != "" ||
		m[1].Floor == nil || m[1].Floor.PTXISA != "9.9" || m[1].Floor.MinDriver != "" || !strings.Contains(m[1].FloorError, "PTX ISA 9.9 is not in this host's table") ||
		m[2].Floor != nil || !strings.Contains(m[2].FloorError, "not an ELF image") {
		t.Errorf("JSON: %s", data)
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
