package devicecheck

import (
	"slices"
	"testing"
)

// TestOnlySelectsShapes: --only selects the shapes whose names contain it,
// or any of its comma-separated parts, across the decode, prefill and
// sparse/FP8 tables; "" selects every shape, and a part that no name holds
// selects nothing of its own.
func TestOnlySelectsShapes(t *testing.T) {
	names := func(only string) []string {
		d, p, q := Shapes(only)
		var out []string
		for _, c := range d {
			out = append(out, c.Name)
		}
		for _, c := range p {
			out = append(out, c.Name)
		}
		for _, c := range q {
			out = append(out, c.Name)
		}
		return out
	}
	all := names("")
	d, p, q := DecodeShapes(), PrefillShapes(), QuantShapes("")
	if len(all) != len(d)+len(p)+len(q) || len(all) == 0 {
		t.Fatalf(`"" selected %d shapes of %d`, len(all), len(d)+len(p)+len(q))
	}
	one := names("h128_ragged64")
	if !slices.Equal(one, []string{"h128_ragged64"}) {
		t.Errorf("h128_ragged64 selected %q", one)
	}
	several := names("h128_ragged64,sparse prefill 1k,h16_prefill_1k,no such shape,")
	if want := []string{"h128_ragged64", "h16_prefill_1k", "sparse prefill 1k"}; !slices.Equal(several, want) {
		t.Errorf("a list selected %q, want %q", several, want)
	}
	if got := names("no such shape"); len(got) != 0 {
		t.Errorf("a name no shape holds selected %q", got)
	}
	for _, tc := range []struct {
		name, only string
		want       bool
	}{
		{"h128_b1_s4096", "", true},
		{"h128_b1_s4096", "b1_", true},
		{"h128_b1_s4096", "h16,b1_", true},
		{"h128_b1_s4096", "h16,,b16", false},
		{"h128_b1_s4096", ",", false},
	} {
		if got := Only(tc.name, tc.only); got != tc.want {
			t.Errorf("Only(%q, %q) = %v, want %v", tc.name, tc.only, got, tc.want)
		}
	}
}
