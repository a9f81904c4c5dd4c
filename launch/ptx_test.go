package launch_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// acmePTX is PTX in the form nvcc and NVRTC emit: a device function, an
// entry of plain pointers, integers and a float, one of pointers with
// .ptr attributes, a struct by value and an i64, and one without
// parameters.
func acmePTX(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/acme_decode.ptx")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func acmeEntries() []core.Entry {
	ptr := func(n string) core.Param { return core.Param{Name: n, Kind: core.ParamPtr} }
	return []core.Entry{
		{Name: "acme_decode", Params: []core.Param{
			ptr("q"), ptr("kv_cache"), ptr("kv_indptr"), ptr("kv_indices"), ptr("seq_lens"), ptr("qo_indptr"), ptr("out"), ptr("lse"),
			{Name: "heads", Kind: core.ParamI32}, {Name: "page_size", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32},
		}},
		{Name: "acme_combine", Params: []core.Param{ptr("out"), ptr("lse"), ptr("requests"), {Name: "rows", Kind: core.ParamI64}, {Name: "batch", Kind: core.ParamI32}}},
		{Name: "acme_clear"},
	}
}

func acmeModule(t testing.TB, image []byte, entries []core.Entry) core.KernelModule {
	return core.KernelModule{Name: "acme", Platform: core.PlatformCUDA, Arch: "compute_90", Format: core.FormatPTX,
		Image: image, SHA256: core.ImageSHA256(image), Entries: entries}
}

// TestParsePTXEntries: the entries of nvcc's PTX, with every parameter's
// type and size in order; device functions are not entries.
func TestParsePTXEntries(t *testing.T) {
	got, err := launch.ParsePTXEntries(acmePTX(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	if want := []string{"acme_decode", "acme_combine", "acme_stats", "acme_clear"}; !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	sizes := func(e launch.PTXEntry) []int {
		var out []int
		for _, p := range e.Params {
			out = append(out, p.Size)
		}
		return out
	}
	if s, want := sizes(got[0]), []int{8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4}; !slices.Equal(s, want) {
		t.Errorf("acme_decode sizes %v, want %v", s, want)
	}
	if p := got[0].Params[10]; p.Type != ".f32" || p.Name != "acme_decode_param_10" {
		t.Errorf("acme_decode's last parameter %+v, want .f32 acme_decode_param_10", p)
	}
	if s, want := sizes(got[1]), []int{8, 8, 8, 8, 4}; !slices.Equal(s, want) {
		t.Errorf("acme_combine sizes %v, want %v", s, want)
	}
	if !got[1].Params[0].Pointer || got[1].Params[2].Pointer {
		t.Errorf("acme_combine: .ptr attributes read as %+v", got[1].Params)
	}
	if s, want := sizes(got[2]), []int{16, 8}; !slices.Equal(s, want) {
		t.Errorf("acme_stats sizes %v, want %v (a struct of 16 bytes by value)", s, want)
	}
	if len(got[3].Params) != 0 {
		t.Errorf("acme_clear has parameters %+v, want none", got[3].Params)
	}
}

// TestParseNVCCParams: the parameters nvcc 13 gives a kernel's C types
// (testdata/nvcc_params.ptx, its output for k1(const float* __restrict__,
// float* __restrict__, int, float, long long) and k2(struct P {int; float;
// void*}, const __grid_constant__ P, unsigned char, short, double)).
func TestParseNVCCParams(t *testing.T) {
	img, err := os.ReadFile("testdata/nvcc_params.ptx")
	if err != nil {
		t.Fatal(err)
	}
	got, err := launch.ParsePTXEntries(img)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"k1": {".u64 8", ".u64 8", ".u32 4", ".f32 4", ".u64 8"},
		"k2": {".b8 16", ".b8 16", ".u8 1", ".u16 2", ".f64 8"},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v", got)
	}
	for _, e := range got {
		var ps []string
		for _, p := range e.Params {
			ps = append(ps, fmt.Sprintf("%s %d", p.Type, p.Size))
		}
		if !slices.Equal(ps, want[e.Name]) {
			t.Errorf("%s: %v, want %v", e.Name, ps, want[e.Name])
		}
	}
	k1 := []core.Param{{Name: "a", Kind: core.ParamPtr}, {Name: "b", Kind: core.ParamPtr}, {Name: "n", Kind: core.ParamI32},
		{Name: "s", Kind: core.ParamF32}, {Name: "m", Kind: core.ParamI64}}
	if err := launch.CheckEntries(acmeModule(t, img, []core.Entry{{Name: "k1", Params: k1}})); err != nil {
		t.Error(err)
	}
}

// TestCheckEntries: the declared entries of the image pass, with or
// without a terminating NUL; each way Entries can disagree with the image
// fails, naming the entry, the parameter's index and both sizes.
func TestCheckEntries(t *testing.T) {
	img := acmePTX(t)
	if err := launch.CheckEntries(acmeModule(t, img, acmeEntries())); err != nil {
		t.Fatalf("the right entries: %v", err)
	}
	if err := launch.CheckEntries(acmeModule(t, append(slices.Clone(img), 0), acmeEntries())); err != nil {
		t.Fatalf("the right entries, NUL-terminated image: %v", err)
	}
	cases := []struct {
		name string
		edit func(es []core.Entry) []core.Entry
		want []string
	}{
		{"pointer and i32 swapped", func(es []core.Entry) []core.Entry {
			p := es[0].Params
			p[7], p[8] = p[8], p[7] // lse and heads
			return es
		}, []string{"entry acme_decode", "parameter 7", `"heads", i32) is 4 bytes as declared, 8 bytes in the image (.u64 acme_decode_param_7)`}},
		{"missing parameter", func(es []core.Entry) []core.Entry {
			es[0].Params = slices.Delete(es[0].Params, 4, 6) // no seq_lens, qo_indptr
			return es
		}, []string{"entry acme_decode", "parameter 6", "is 4 bytes as declared, 8 bytes in the image", "Entries declares 9 parameters, the image's signature has 11"}},
		{"missing last parameter", func(es []core.Entry) []core.Entry {
			es[0].Params = es[0].Params[:10]
			return es
		}, []string{"entry acme_decode", "parameter 10 (4 bytes in the image, .f32 acme_decode_param_10) is not declared"}},
		{"extra parameter", func(es []core.Entry) []core.Entry {
			es[1].Params = append(es[1].Params, core.Param{Name: "heads", Kind: core.ParamI32})
			return es
		}, []string{"entry acme_combine", `parameter 5 ("heads", i32, 4 bytes as declared) is not in the image`, "Entries declares 6 parameters, the image's signature has 5"}},
		{"struct by value", func(es []core.Entry) []core.Entry {
			return append(es, core.Entry{Name: "acme_stats", Params: []core.Param{{Name: "stats", Kind: core.ParamPtr}, {Name: "out", Kind: core.ParamPtr}}})
		}, []string{"entry acme_stats", `parameter 0 ("stats", ptr) is 8 bytes as declared, 16 bytes in the image (.b8 acme_stats_param_0)`}},
		{"float declared as i32", func(es []core.Entry) []core.Entry {
			es[0].Params[10].Kind = core.ParamI32
			return es
		}, []string{"entry acme_decode", `parameter 10 ("scale", i32) is a float in the image (.f32 acme_decode_param_10)`}},
		{"i32 declared as f32", func(es []core.Entry) []core.Entry {
			es[0].Params[8].Kind = core.ParamF32
			return es
		}, []string{"entry acme_decode", `parameter 8 ("heads", f32) is an integer in the image (.u32`}},
		{"unknown entry", func(es []core.Entry) []core.Entry {
			es[2].Name = "acme_clear_v2"
			return es
		}, []string{"entry acme_clear_v2 is not in the PTX image (its entries: acme_decode, acme_combine, acme_stats, acme_clear)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := launch.CheckEntries(acmeModule(t, img, c.edit(acmeEntries())))
			if err == nil {
				t.Fatal("passed, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestCheckEntriesOtherImages: a cubin is not parsed; PTX text with no
// entries lacks every declared one; binary data labelled PTX is refused.
func TestCheckEntriesOtherImages(t *testing.T) {
	cubin := acmeModule(t, []byte("\x7fELF\x02\x01\x01\x33\x07\x00\x00"), acmeEntries())
	cubin.Format = core.FormatCUBIN
	if err := launch.CheckEntries(cubin); err != nil {
		t.Errorf("cubin: %v, want nil (not parsed)", err)
	}
	for _, tc := range []struct{ image, want string }{
		{".version 8.4\n.target sm_90\n.address_size 64\n", "entry acme_decode is not in the PTX image (its entries: none)"},
		{"stand-in for a module", "entry acme_decode is not in the PTX image (its entries: none)"},
		{"\x7fELF\x02\x01\x01\x33\x07\x00\x00\x01", "NUL byte"},
		{".visible .entry acme_decode(\n.param .u64 p0,\n", "parameter list not closed"},
		{".visible .entry acme_decode(\n.param .u77 p0)\n{ret;}", `unexpected ".u77"`},
	} {
		err := launch.CheckEntries(acmeModule(t, []byte(tc.image), acmeEntries()))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("image %q: got %v, want %q", tc.image, err, tc.want)
		}
	}
}

// FuzzParsePTXEntries: any text parses or fails without a panic, and what
// parses has entries with names and positive parameter sizes.
func FuzzParsePTXEntries(f *testing.F) {
	f.Add(acmePTX(f))
	f.Add([]byte(".visible .entry k(.param .align 8 .b8 k_param_0[16])\n{ret;}"))
	f.Add([]byte("/* open"))
	f.Fuzz(func(t *testing.T, image []byte) {
		es, err := launch.ParsePTXEntries(image)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Name == "" {
				t.Fatalf("an entry without a name: %+v", es)
			}
			for _, p := range e.Params {
				if p.Size <= 0 || p.Name == "" || p.Type == "" {
					t.Fatalf("entry %s: parameter %+v", e.Name, p)
				}
			}
		}
	})
}
