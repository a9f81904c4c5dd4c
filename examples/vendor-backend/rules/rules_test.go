package rules

import (
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestDecide(t *testing.T) {
	extend := func(prefix int64) *core.Request {
		r := core.NewRequest(Name, core.ModeExtend)
		r.Batch.ExtendPrefixLens = []int64{prefix}
		r.Batch.SeqLens = []int64{prefix + 1024}
		return &r
	}
	graph := extend(ChunkThreshold)
	graph.Runtime.PiecewiseCUDAGraph = true
	decode := core.NewRequest(Name, core.ModeDecode)
	decode.Batch.ExtendPrefixLens = []int64{ChunkThreshold}
	decode.Batch.SeqLens = []int64{ChunkThreshold + 1}
	for _, tc := range []struct {
		name string
		req  *core.Request
		want core.Method
	}{
		{"no prefix", extend(0), core.MLA},
		{"below acme's threshold", extend(ChunkThreshold - 1), core.MLA},
		{"above sglang's default, below acme's", extend(core.DefaultChunkedPrefixCacheThreshold), core.MLA},
		{"at acme's threshold", extend(ChunkThreshold), core.MHAChunkedKV},
		{"above acme's threshold", extend(ChunkThreshold + 1), core.MHAChunkedKV},
		{"piecewise CUDA graph", graph, core.MLA},
		{"decode", &decode, core.MLA},
	} {
		if got := Decide(tc.req); got != tc.want {
			t.Errorf("%s: Decide = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	b, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != Name || len(d.Handlers) != 1 || d.Handlers[0].Name != Name {
		t.Fatalf("description = %+v", d)
	}
}
