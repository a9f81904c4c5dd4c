package backend_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// described is a description serving names, each a name of MLA.
func described(names ...string) *core.Description {
	d := &core.Description{Name: "acme", Version: "1.0.0"}
	for _, n := range names {
		d.Handlers = append(d.Handlers, core.HandlerInfo{Name: n, Reads: core.Reads{Facts: core.FactMode}, Methods: []core.Method{core.MLA}})
	}
	return d
}

// TestNamesThatSpoofAreRefused: the names sglang's backends have pass;
// a name with a path, a bidi override, other scripts' look-alike letters,
// upper case, spaces or a leading dot is refused, the problem naming it
// with non-ASCII escaped, so that it never shows as the name it mimics.
func TestNamesThatSpoofAreRefused(t *testing.T) {
	for _, name := range []string{"fa3", "fa4", "flashinfer", "cutlass_mla", "intel_xpu", "intel_amx", "trtllm_mla", "tokenspeed_mla", "acme_mla", "nsa", "fa3-v2", "fa3.v2", "x"} {
		if p := backend.Problems(described(name)); len(p) != 0 {
			t.Errorf("%q: %v, want no problem", name, p)
		}
	}
	for _, tc := range []struct{ name, shown string }{
		{"../fa3", `"../fa3"`},
		{"fa3/x", `"fa3/x"`},
		{"..", `".."`},
		{".fa3", `".fa3"`},
		{"-fa3", `"-fa3"`},
		{"_fa3", `"_fa3"`},
		{"FA3", `"FA3"`},
		{"fa 3", `"fa 3"`},
		{"fa3\n", `"fa3\n"`},
		{"fa\u202e3", `"fa\u202e3"`},                   // a right-to-left override
		{"f\u200ba3", `"f\u200ba3"`},                   // a zero-width space
		{"\uff46\uff41\uff13", `"\uff46\uff41\uff13"`}, // full-width fa3
		{"f\u0430" + "3", `"f\u04303"`},                // a Cyrillic a
	} {
		p := backend.Problems(described("fa3", tc.name))
		if len(p) != 1 || !strings.Contains(p[0], "name "+tc.shown+": want lower-case ASCII letters") {
			t.Errorf("%+q: %v, want one problem naming it as %s", tc.name, p, tc.shown)
		}
		if err := backend.Validate(described(tc.name)); err == nil {
			t.Errorf("%+q: Validate passes it", tc.name)
		}
	}
	if p := backend.Problems(described("fa3", strings.Repeat("a", core.MaxBackendNameLen+1))); len(p) != 1 || !strings.Contains(p[0], "longer than 256 bytes") {
		t.Errorf("a name of 257 bytes: %v", p)
	}
	d := described("fa3")
	d.Vendor = "Acme \u202eCorp"
	if p := backend.Problems(d); len(p) != 1 || !strings.Contains(p[0], `vendor "Acme \u202eCorp" holds a control or formatting character`) {
		t.Errorf("a vendor with a bidi override: %v", p)
	}
}

// TestManyNames: a plugin may declare backend.MaxNames names; one that
// declares 100 000 (whose start took 47 s: the check of names declared
// twice was quadratic) is refused with one problem, and a description of
// MaxNames names with one declared twice says so once.
func TestManyNames(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("fault_%d", i)
		}
		return out
	}
	if p := backend.Problems(described(names(backend.MaxNames)...)); len(p) != 0 {
		t.Errorf("%d names: %v", backend.MaxNames, p)
	}
	for _, n := range []int{backend.MaxNames + 1, 100000} {
		if p := backend.Problems(described(names(n)...)); len(p) != 1 || !strings.Contains(p[0], fmt.Sprintf("declares %d names, more than %d", n, backend.MaxNames)) {
			t.Errorf("%d names: %d problems (%.200v), want one", n, len(p), p)
		}
	}
	twice := names(backend.MaxNames)
	twice[len(twice)-1] = twice[0]
	if p := backend.Problems(described(twice...)); len(p) != 1 || p[0] != `name "fault_0" is declared twice` {
		t.Errorf("a name declared twice: %v", p)
	}
}
