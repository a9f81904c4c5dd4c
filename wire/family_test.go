package wire_test

import (
	"testing"

	"github.com/attnplug/attnplug/wire"
)

func TestValidFamily(t *testing.T) {
	for name, want := range map[string]bool{
		"fa3": true, "intel_xpu": true, "acme-mla": true, "A1": true, "9lives": true, "x": true,
		"": false, "_fa3": false, "-fa3": false, "fa3.exe": false, "fa 3": false, "fa/3": false,
		"fa3\n": false, "é": false, "ﬂash": false,
	} {
		if got := wire.ValidFamily(name); got != want {
			t.Errorf("ValidFamily(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestFamilyOf(t *testing.T) {
	for _, tc := range []struct {
		file, family string
		staged, ok   bool
	}{
		{"attnplug-backend-fa3", "fa3", false, true},
		{"attnplug-backend-acme_mla.new", "acme_mla", true, true},
		{"attnplug-backend-fa3.tmp", "fa3", true, true},
		{"attnplug-backend-fa3.old", "fa3", true, true},
		{"attnplug-backend-fa3.bak", "fa3", true, true},
		{"attnplug-backend-fa3.exe", "fa3.exe", false, true},
		{"attnplug.lock", "", false, false},
	} {
		family, staged, ok := wire.FamilyOf(tc.file)
		if family != tc.family || staged != tc.staged || ok != tc.ok {
			t.Errorf("FamilyOf(%q) = %q, %v, %v; want %q, %v, %v", tc.file, family, staged, ok, tc.family, tc.staged, tc.ok)
		}
	}
}
