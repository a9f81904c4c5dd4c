package core_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// chunked is an MHA_CHUNKED_KV request of b requests whose first has
// longest keys (one query each), at chunk capacity capacity.
func chunked(b int, longest int64, capacity int) *core.PlanRequest {
	r := &core.PlanRequest{Method: core.MHAChunkedKV, Shape: core.PlanShape{SeqLens: make([]int64, b), QLens: make([]int64, b), ChunkCapacity: capacity}}
	for i := range b {
		r.Shape.SeqLens[i], r.Shape.QLens[i] = 2, 1
	}
	r.Shape.SeqLens[0] = longest
	return r
}

// TestPrefixChunksIsSglangsCut: prefix_chunk_len = capacity // batch size
// (at least 1), num_prefix_chunks = ceil(longest prefix / chunk len), the
// default capacity when none is given.
func TestPrefixChunksIsSglangsCut(t *testing.T) {
	for _, tc := range []struct {
		name             string
		seq, q           []int64
		capacity         int
		wantSize, wantCh int64
	}{
		{"one request, default capacity", []int64{163840}, []int64{1}, 0, 131072, 2},
		{"prefix within one chunk", []int64{1000}, []int64{10}, 4096, 4096, 1},
		{"no prefix", []int64{100, 200}, []int64{100, 200}, 4096, 2048, 0},
		{"capacity shared by the batch", []int64{10000, 5000, 20}, []int64{1, 1, 1}, 3000, 1000, 10},
		{"capacity below the batch size", []int64{7, 7, 7}, []int64{1, 1, 1}, 2, 1, 6},
		{"the exact request of issue 40", []int64{1048576}, []int64{1}, 1, 1, 1048575},
		{"no requests", nil, nil, 4096, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := core.PlanShape{SeqLens: tc.seq, QLens: tc.q, ChunkCapacity: tc.capacity}
			size, chunks := s.PrefixChunks()
			if size != tc.wantSize || chunks != tc.wantCh {
				t.Errorf("got %d chunks of %d keys, want %d of %d", chunks, size, tc.wantCh, tc.wantSize)
			}
		})
	}
}

// TestPlanRequestCheckSize: a request whose plan would be past core's
// bounds is refused with ErrInvalidRequest naming the field, its value
// and the bound; sglang's shapes pass.
func TestPlanRequestCheckSize(t *testing.T) {
	tokens := func(n int64) *core.PlanRequest {
		return &core.PlanRequest{Method: core.MHA, Shape: core.PlanShape{SeqLens: []int64{n, n}, QLens: []int64{n, n}}}
	}
	for _, tc := range []struct {
		name string
		req  *core.PlanRequest
		want []string // in the error; none: accepted
	}{
		{"DeepSeek-V3's context, one request", chunked(1, 163840, 0), nil},
		{"DeepSeek-V3's context, 100 requests", chunked(100, 163840, 0), nil},
		{"DeepSeek-V3's context, 914 requests", chunked(914, 163840, 0), nil},
		{"DeepSeek-V3's context, 915 requests", chunked(915, 163840, 0),
			[]string{"shape.chunk_capacity", "0 (the default, 131072)", "915 requests", "1146 chunks of 143 keys", "1048590 chunk ranges", "1048576"}},
		{"a chunk capacity of 40 keys at full context", chunked(1, 163840, 40), nil},
		{"the exact request of issue 40", chunked(1, 1048576, 1),
			[]string{"shape.chunk_capacity: 1 cuts", "1048575 keys", "1048575 prefix chunks of 1 key", "bound of 4096"}},
		{"the same, another method", func() *core.PlanRequest { r := chunked(1, 1048576, 1); r.Method = core.MHAOneShot; return r }(), nil},
		{"tokens at the bound", tokens(core.MaxPlanTokens / 2), nil},
		{"tokens past the bound", tokens(core.MaxPlanTokens/2 + 1), []string{"shape.q_lens", "262144"}},
		{"tokens that overflow int64", &core.PlanRequest{Method: core.MHA, Shape: core.PlanShape{SeqLens: []int64{1, 1}, QLens: []int64{math.MaxInt64, math.MaxInt64}}}, []string{"shape.q_lens"}},
		{"lengths that overflow int64", &core.PlanRequest{Method: core.MHAChunkedKV, Shape: core.PlanShape{SeqLens: []int64{math.MaxInt64}, QLens: []int64{1}, ChunkCapacity: 1}}, []string{"shape.chunk_capacity"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.CheckSize()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want it accepted", err)
				}
				return
			}
			var fe *core.FieldError
			if !errors.Is(err, core.ErrInvalidRequest) || !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *core.FieldError wrapping ErrInvalidRequest", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestPlanCheckSize: a plan past the bounds of a plan is refused, saying
// which bound; one at the bounds passes.
func TestPlanCheckSize(t *testing.T) {
	out := core.TensorSpec{Name: "out", DType: "bf16", Shape: []int64{1 << 20, 128, 1024}, Output: true} // 256 GiB
	for _, tc := range []struct {
		name string
		plan core.Plan
		want string
	}{
		{"at the bounds", core.Plan{Launches: make([]core.Launch, core.MaxPlanLaunches), Metadata: []core.MetaBuffer{{Int32s: make([]int32, core.MaxPlanMetadataBytes/4)}}, WorkspaceBytes: core.MaxPlanWorkspaceBytes}, ""},
		{"launches", core.Plan{Launches: make([]core.Launch, core.MaxPlanLaunches+1)}, "launches"},
		{"metadata", core.Plan{Metadata: []core.MetaBuffer{{Int32s: make([]int32, core.MaxPlanMetadataBytes/8)}, {Int32s: make([]int32, core.MaxPlanMetadataBytes/8+1)}}}, "metadata"},
		{"workspace", core.Plan{WorkspaceBytes: core.MaxPlanWorkspaceBytes + 1}, "workspace"},
		{"negative workspace", core.Plan{WorkspaceBytes: -1}, "workspace"},
		{"four times large outputs", core.Plan{Tensors: []core.TensorSpec{out}, WorkspaceBytes: 4 * out.Bytes()}, ""},
		{"past four times the outputs", core.Plan{Tensors: []core.TensorSpec{out}, WorkspaceBytes: 4*out.Bytes() + 1}, "workspace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.plan.CheckSize()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want it accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error about the %s", err, tc.want)
			}
		})
	}
}
