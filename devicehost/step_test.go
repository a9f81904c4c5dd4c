package devicehost

import (
	"maps"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// TestBind: tensors by name come out in the plan's order, whatever the
// order of the map; a tensor the plan binds and the caller lacks is named.
func TestBind(t *testing.T) {
	specs := []core.TensorSpec{{Name: "q"}, {Name: "kv_cache"}, {Name: "out"}}
	ts := Tensors{"out": {Ptr: 3}, "q": {Ptr: 1}, "kv_cache": {Ptr: 2}, "lse": {Ptr: 4}}
	got, err := ts.Bind(specs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{1, 2, 3} {
		if got[i].Ptr != want {
			t.Errorf("tensor %d: %v, want %d", i, got[i], want)
		}
	}
	delete(ts, "kv_cache")
	if _, err := ts.Bind(specs); err == nil || !strings.Contains(err.Error(), `"kv_cache"`) {
		t.Errorf("a missing tensor: %v", err)
	}
}

// TestStepBinds: a Step binds the shared tensors and a layer's, the
// layer's winning on a name both give, into the same slice every time.
func TestStepBinds(t *testing.T) {
	specs := []core.TensorSpec{{Name: "q"}, {Name: "seq_lens"}, {Name: "kv_cache"}}
	s := &Step{specs: specs, shared: Tensors{"seq_lens": {Ptr: 9}, "q": {Ptr: 100}}, merged: Tensors{}, bound: make([]cudaexec.Buffer, len(specs))}
	for layer := range uint64(3) {
		got, err := s.bind(Tensors{"q": {Ptr: 10 + layer}, "kv_cache": {Ptr: 20 + layer}})
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Ptr != 10+layer || got[1].Ptr != 9 || got[2].Ptr != 20+layer || &got[0] != &s.bound[0] {
			t.Errorf("layer %d: %v", layer, got)
		}
	}
	if _, err := s.bind(Tensors{"q": {Ptr: 1}}); err == nil || !strings.Contains(err.Error(), `"kv_cache"`) {
		t.Errorf("a layer without its cache: %v", err)
	}
}

// TestStamped: a plan that names no images is given those its backend
// holds, for its launches' modules alone, on a copy; one that names no
// module the backend holds is left as it is.
func TestStamped(t *testing.T) {
	p := &core.Plan{Launches: []core.Launch{{Module: "mla_decode"}, {Module: "mla_combine"}, {Module: "mla_decode"}}}
	mods := []core.KernelModule{{Name: "mla_decode", SHA256: "aa"}, {Name: "mla_combine", SHA256: "bb"}, {Name: "mha_prefill", SHA256: "cc"}}
	q := stamped(p, mods)
	if want := map[string]string{"mla_decode": "aa", "mla_combine": "bb"}; !maps.Equal(q.ModuleSHA256, want) {
		t.Errorf("stamped with %v, want %v", q.ModuleSHA256, want)
	}
	if p.ModuleSHA256 != nil || q == p {
		t.Errorf("the plan itself was changed")
	}
	if r := stamped(p, nil); r != p {
		t.Errorf("a plan with no module held was copied")
	}
}
