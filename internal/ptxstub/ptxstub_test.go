package ptxstub_test

import (
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/ptxstub"
	"github.com/attnplug/attnplug/launch"
)

// TestImageHasTheEntries: the stub's entries are the declared ones, as
// the host's check reads them.
func TestImageHasTheEntries(t *testing.T) {
	entries := []core.Entry{
		{Name: "k", Params: []core.Param{{Name: "p", Kind: core.ParamPtr}, {Name: "n", Kind: core.ParamI32}, {Name: "big", Kind: core.ParamI64}, {Name: "s", Kind: core.ParamF32},
			{Name: "map", Kind: core.ParamTensorMap}, {Name: "params", Kind: core.ParamStruct, Size: 24}}},
		{Name: "none"},
	}
	img := ptxstub.Image("compute_90", "a variant", entries)
	m := core.KernelModule{Name: "m", Format: core.FormatPTX, Image: img, Entries: entries}
	if err := launch.CheckEntries(m); err != nil {
		t.Fatalf("%v\n%s", err, img)
	}
	got, err := launch.ParsePTXEntries(img)
	if err != nil || len(got) != 2 || len(got[0].Params) != 6 || got[0].Params[4].Size != 128 || got[0].Params[5].Size != 24 || len(got[1].Params) != 0 {
		t.Fatalf("parsed %+v, %v", got, err)
	}
}
