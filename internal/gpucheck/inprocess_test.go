package gpucheck

import (
	"testing"

	"github.com/attnplug/attnplug/devicecheck"
)

// TestInProcessBackendOnDevice: a backend linked into the host (fa3's, no
// plugin process) hands its modules and plans through the registry, and
// the host object (devicehost.Host, as `attnplug run --device cuda` holds
// it) loads them once, plans through the registry, launches and is checked
// against the fp64 reference with its outputs poisoned first: 16 and 128
// heads (on an H200 the 128-head plan runs the wgmma module), pages of 1
// and 64, plans for one batch and plans that hold for a batch size.
func TestInProcessBackendOnDevice(t *testing.T) {
	e := openEnv(t)
	cases := []devicecheck.MLA{
		{Heads: 16, PageSize: 64, SeqLens: []int64{3000, 17, 700}, QLens: []int64{1, 2, 1}, Seed: 1},
		{Heads: 128, PageSize: 64, SeqLens: []int64{5000, 64, 1}, QLens: []int64{1, 1, 1}, Seed: 2},
		{Heads: 128, PageSize: 1, SeqLens: []int64{900, 4097}, QLens: []int64{4, 2}, Seed: 3, Graph: true, MaxSeqLen: 8192},
		{Heads: 16, PageSize: 1, SeqLens: []int64{3, 2048}, QLens: []int64{3, 1}, Seed: 4, Graph: true, MaxSeqLen: 4096},
	}
	for _, c := range cases {
		ch := runCase(t, e, dense, c, 32)
		t.Logf("%s: %v", c.Describe(), ch)
	}
	if n := e.be.FA3.Modules.Load(); n != 1 {
		t.Errorf("the backend was asked for its modules %d times, want once", n)
	}
	if n := e.be.FA3.Plans.Load(); n != int64(len(cases)) {
		t.Errorf("the backend was asked for %d plans, want %d", n, len(cases))
	}
}
