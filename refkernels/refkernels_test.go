package refkernels_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/refkernels"
)

// request lays cfg and b out in memory filled with random inputs.
func request(t *testing.T, cfg kernels.Config, b kernels.BatchShape, backend string, m core.Method) (*core.KernelRequest, kernels.Tensors, []float32) {
	t.Helper()
	raw, err := kernels.RandomTensors(rand.New(rand.NewPCG(1, 2)), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, l.Bytes())
	in, out, err := l.SplitBytes(mem)
	if err != nil {
		t.Fatal(err)
	}
	in.CopyInputs(&raw)
	seq, pre := make([]int64, len(b.SeqLens)), make([]int64, len(b.SeqLens))
	for i := range b.SeqLens {
		seq[i], pre[i] = int64(b.SeqLens[i]), int64(b.PrefixLens[i])
	}
	return &core.KernelRequest{
		Backend: backend, Method: m, Dims: cfg, SeqLens: seq, PrefixLens: pre,
		Buffer:  core.SharedBuffer{Mem: mem, Size: int64(len(mem))},
		Tensors: refkernels.Refs(l),
	}, raw, out
}

// TestRunKernelByCatalog: a rule backend with a catalog of one MLA kernel
// runs it with the reference kernels, within 1e-5 of the float64
// reference, named as the catalog names it and said to be emulated; a
// method its catalog lacks is core.ErrNoKernel, a name it does not serve
// core.ErrUnknownBackend.
func TestRunKernelByCatalog(t *testing.T) {
	cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 4, VHeadDim: 4, SoftmaxScale: 0.35, RopeBase: 10000, ChunkCapacity: 4}
	b := kernels.BatchShape{SeqLens: []int{7, 3}, PrefixLens: []int{5, 0}}
	rb, err := core.NewRuleBackend("acme", "1.0.0", nil, core.Rule{
		Name: "acme", Decide: func(*core.Request) core.Method { return core.MLA }, Methods: []core.Method{core.MLA, core.MHAChunkedKV},
		Kernels: []core.Kernel{{Name: "acme_mla_decode", Library: "acme", Method: core.MLA, DTypes: []string{"bf16"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	be := refkernels.New(rb)
	var _ core.KernelRunner = be
	var _ core.BatchBackend = be
	req, raw, out := request(t, cfg, b, "acme", core.MLA)
	res, err := be.RunKernel(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kernel != "acme_mla_decode" || res.Library != "acme" || !res.Emulated || !strings.Contains(res.Note, "not its device kernel") {
		t.Errorf("result %+v", res)
	}
	want, err := kernels.Reference(cfg, b, raw)
	if err != nil {
		t.Fatal(err)
	}
	if e := kernels.RelError(out, want); e > 1e-5 {
		t.Errorf("relative error %g against the float64 reference", e)
	}
	req.Method = core.MHAChunkedKV
	if _, err := be.RunKernel(t.Context(), req); !errors.Is(err, core.ErrNoKernel) {
		t.Errorf("a method the catalog lacks: %v, want ErrNoKernel", err)
	}
	req.Backend, req.Method = "other", core.MLA
	if _, err := be.RunKernel(t.Context(), req); !errors.Is(err, core.ErrUnknownBackend) {
		t.Errorf("a name it does not serve: %v, want ErrUnknownBackend", err)
	}
}

// TestRunEveryMethod: every method of the catalog runs within 1e-5 of the
// float64 reference, the sparse MLA on its top-k.
func TestRunEveryMethod(t *testing.T) {
	for _, m := range []core.Method{core.MHA, core.MLA, core.MHAChunkedKV, core.MHAOneShot, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHANPU, core.MLANPU, core.DSANPU} {
		sparse := m == core.DSANPU
		cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 4, VHeadDim: 4, SoftmaxScale: 0.35, RopeBase: 10000, ChunkCapacity: 4}
		if sparse {
			cfg.TopK = 3
		}
		b := kernels.BatchShape{SeqLens: []int{7, 3}, PrefixLens: []int{5, 0}}
		req, raw, out := request(t, cfg, b, "x", m)
		k := core.Kernel{Name: "k", Library: "l", Method: m, Sparse: sparse}
		if _, err := refkernels.Run(context.Background(), k, req); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		var want []float64
		var err error
		if sparse {
			want, err = kernels.SparseReference(cfg, b, raw)
		} else {
			want, err = kernels.Reference(cfg, b, raw)
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := kernels.RelError(out, want); e > 1e-5 {
			t.Errorf("%s: relative error %g", m, e)
		}
	}
}

// TestRunRefusesBadTensors: tensors that do not fit the buffer are an
// invalid request naming the field.
func TestRunRefusesBadTensors(t *testing.T) {
	cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 4, VHeadDim: 4, SoftmaxScale: 0.35, RopeBase: 10000, ChunkCapacity: 4}
	req, _, _ := request(t, cfg, kernels.BatchShape{SeqLens: []int{3}, PrefixLens: []int{2}}, "x", core.MLA)
	req.Tensors[0].Offset = 1 << 40
	_, err := refkernels.Run(context.Background(), core.Kernel{Name: "k", Method: core.MLA}, req)
	if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "tensors[0].offset") {
		t.Errorf("got %v, want an invalid request naming tensors[0].offset", err)
	}
}

// TestRunRefusesBadDims: dimensions out of range, or a chunk capacity or
// top-k the method cannot run with, are an invalid request naming the
// field of the plugin protocol's RunKernelRequest (dims.*) and its value;
// lengths by the dispatch format's seq_lens and extend_prefix_lens.
func TestRunRefusesBadDims(t *testing.T) {
	cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 4, VHeadDim: 4, SoftmaxScale: 0.35, RopeBase: 10000, ChunkCapacity: 4, TopK: 3}
	b := kernels.BatchShape{SeqLens: []int{7, 3}, PrefixLens: []int{5, 0}}
	for _, tc := range []struct {
		m    core.Method
		edit func(*core.KernelRequest)
		want string
	}{
		{core.MLA, func(r *core.KernelRequest) { r.Dims.Heads = 0 }, "dims.heads: 0 is outside [1, 65536]"},
		{core.MLA, func(r *core.KernelRequest) { r.Dims.SoftmaxScale = -2 }, "dims.softmax_scale: -2: want a finite number > 0"},
		{core.MHAChunkedKV, func(r *core.KernelRequest) { r.Dims.ChunkCapacity = 1 }, "dims.chunk_capacity: 1 is smaller than the batch size 2 (prefix_chunk_len would be 0)"},
		{core.DSANPU, func(r *core.KernelRequest) { r.Dims.TopK = 0 }, "dims.top_k: 0: a sparse method needs 1 or more"},
		{core.MLA, func(r *core.KernelRequest) { r.PrefixLens[1] = 4 }, "extend_prefix_lens[1]: 4 is longer than seq_lens[1] = 3"},
		{core.MLA, func(r *core.KernelRequest) { r.SeqLens[0] = 5 }, "seq_lens[0]: request 0 has no new token (extend_prefix_lens[0] = seq_lens[0] = 5)"},
	} {
		req, _, _ := request(t, cfg, b, "x", tc.m)
		tc.edit(req)
		_, err := refkernels.Run(context.Background(), core.Kernel{Name: "k", Method: tc.m, Sparse: tc.m == core.DSANPU}, req)
		if !errors.Is(err, core.ErrInvalidRequest) || err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want an invalid request %q", tc.m, err, tc.want)
		}
	}
}

// TestStaticSafe: the package links no cgo, no CUDA binding and none of
// the project's device code, so a plugin built on it with CGO_ENABLED=0 is
// a static binary.
func TestStaticSafe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-deps", "github.com/attnplug/attnplug/refkernels")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/attnplug/attnplug/cuda", "github.com/attnplug/attnplug/devkernels",
			"github.com/attnplug/attnplug/backendkit", "github.com/ebitengine/purego", "runtime/cgo"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("refkernels imports %s", dep)
			}
		}
	}
}
