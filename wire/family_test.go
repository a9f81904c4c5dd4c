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
