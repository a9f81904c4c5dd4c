package backendkit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/shm"
)

// request lays cfg and b out in a new segment filled with random inputs.
func request(t *testing.T, cfg kernels.Config, b kernels.BatchShape, backend string, m core.Method) (*core.KernelRequest, kernels.Tensors, []float32) {
	t.Helper()
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 2)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := kernels.Layout(cfg, b)
	seg, err := shm.Create(int64(l.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	in, out, _ := l.SplitBytes(seg.Bytes())
	for _, p := range [][2][]float32{{in.QNope, raw.QNope}, {in.QPe, raw.QPe}, {in.CKV, raw.CKV}, {in.KPe, raw.KPe}, {in.WKC, raw.WKC}, {in.WVC, raw.WVC}} {
		copy(p[0], p[1])
	}
	copy(in.Positions, raw.Positions)
	copy(in.TopKIndices, raw.TopKIndices)
	seq, pre := make([]int64, len(b.SeqLens)), make([]int64, len(b.SeqLens))
	for i := range b.SeqLens {
		seq[i], pre[i] = int64(b.SeqLens[i]), int64(b.PrefixLens[i])
	}
	return &core.KernelRequest{
		Backend: backend, Method: m, Dims: cfg, SeqLens: seq, PrefixLens: pre,
		Buffer:  core.SharedBuffer{Path: seg.Path(), Size: seg.Size()},
		Tensors: backendkit.Refs(l),
	}, raw, out
}

func TestRunKernelByCatalog(t *testing.T) {
	cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 2, VHeadDim: 4, SoftmaxScale: 0.4, RopeBase: 10000, ChunkCapacity: 4, TopK: 3}
	b := kernels.BatchShape{SeqLens: []int{6, 3}, PrefixLens: []int{4, 0}}
	rule := core.Rule{Name: "x", Decide: func(*core.Request) core.Method { return core.MLA }, Methods: []core.Method{core.MLA, core.MHA},
		Kernels: []core.Kernel{{Name: "sparse_mla", Library: core.LibDSA, Method: core.MLA, Sparse: true,
			Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}}}}}}
	be, err := backendkit.NewRules("x", "1", nil, rule)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Configure(context.Background(), core.HostInfo{Platform: core.PlatformCPU}); err != nil {
		t.Fatal(err)
	}
	req, raw, out := request(t, cfg, b, "x", core.MLA)
	res, err := be.RunKernel(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := kernels.SparseReference(cfg, b, raw)
	if e := kernels.RelError(out, want); e > 1e-5 || res.Kernel != "sparse_mla" || !res.Emulated || !res.Sparse {
		t.Errorf("got %+v, rel error %g", res, e)
	}
	if !strings.Contains(res.Note, "its hardware is absent") {
		t.Errorf("note %q: want the absent hardware", res.Note)
	}
	req.Method = core.MHA
	if _, err := be.RunKernel(context.Background(), req); !errors.Is(err, core.ErrNoKernel) {
		t.Errorf("method without a kernel: got %v, want ErrNoKernel", err)
	}
	req.Backend = "y"
	if _, err := be.RunKernel(context.Background(), req); !errors.Is(err, core.ErrUnknownBackend) {
		t.Errorf("unknown name: got %v", err)
	}
}

func TestViewsRefuses(t *testing.T) {
	mem := make([]byte, 64)
	for _, tc := range []struct {
		refs []core.TensorRef
		want string
	}{
		{[]core.TensorRef{{Name: "out", Offset: 0, Shape: []int64{17}, DType: "float32"}}, "do not fit"},
		{[]core.TensorRef{{Name: "out", Offset: 2, Shape: []int64{1}, DType: "float32"}}, "not 4-byte aligned"},
		{[]core.TensorRef{{Name: "positions", Shape: []int64{1}, DType: "float32"}}, "dtype"},
		{[]core.TensorRef{{Name: "bogus", Shape: []int64{1}, DType: "float32"}}, "unknown tensor"},
		{[]core.TensorRef{{Name: "c_kv", Shape: []int64{1}, DType: "float32"}}, `no "out" tensor`},
		{[]core.TensorRef{{Name: "out", Shape: []int64{1}, DType: "float32"}, {Name: "out", Shape: []int64{1}, DType: "float32"}}, "given twice"},
		{[]core.TensorRef{{Name: "out", Shape: []int64{-1}, DType: "float32"}}, "does not fit"},
	} {
		if _, _, err := backendkit.Views(mem, tc.refs); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrInvalidRequest) {
			t.Errorf("Views(%+v): got %v, want %q", tc.refs, err, tc.want)
		}
	}
}
