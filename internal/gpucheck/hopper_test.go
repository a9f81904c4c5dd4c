package gpucheck

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// hopperSource is testdata/tma_copy.cu: a kernel with what Hopper's
// kernels take (a TMA descriptor, a struct by value, a cluster, a
// programmatic launch), which the Python launcher's GPU test runs too.
//
//go:embed testdata/tma_copy.cu
var hopperSource string

// TestHopperLaunchFeatures: a plan with a TMA descriptor over the cache
// (viewed as rows), a struct parameter, a cluster launch and a programmatic
// launch is checked by the host and runs inside a captured CUDA graph
// across two layers with different tensors: each layer's output is its own
// cache's boxes, so each launch of the graph kept its own descriptor.
func TestHopperLaunchFeatures(t *testing.T) {
	e := openEnv(t)
	dev := e.Host.Executor().Device()
	if dev.ComputeCapability < 90 {
		t.Skipf("%s has compute capability %d: clusters, TMA and programmatic launches need 9.0", dev.Name, dev.ComputeCapability)
	}
	ptx, err := cuda.CompilePTX(hopperSource, "hopper.cu", fmt.Sprintf("--gpu-architecture=compute_%d", dev.ComputeCapability))
	if err != nil {
		t.Fatal(err)
	}
	mod := core.KernelModule{Name: "hopper_test", Platform: core.PlatformCUDA, Arch: "compute_90", Format: core.FormatPTX,
		Image: []byte(ptx), SHA256: core.ImageSHA256([]byte(ptx)), Kernels: []string{"acme_decode"},
		Entries: []core.Entry{{Name: "tma_copy", Params: []core.Param{
			{Name: "src_map", Kind: core.ParamTensorMap}, {Name: "params", Kind: core.ParamStruct, Size: 24}, {Name: "lse", Kind: core.ParamPtr},
		}}, {Name: "reads", Params: []core.Param{{Name: "q", Kind: core.ParamPtr}, {Name: "kv_indices", Kind: core.ParamPtr}}}}}
	if err := e.Host.Executor().Load([]core.KernelModule{mod}); err != nil {
		t.Fatal(err)
	}
	req, p := hopperPlanFor(t, dev)
	ts := p.Tensors
	prep, err := e.Host.Executor().Prepare(req, p)
	if err != nil {
		t.Fatalf("the host refuses the plan: %v", err)
	}
	defer prep.Close()
	// Two layers: their own caches (random bf16), outputs and LSE.
	rng := rand.New(rand.NewPCG(5, 6))
	caches := make([][]uint16, 2)
	layers := make([][]cudaexec.Buffer, 2)
	var all []uint64
	err = e.Do(func(x *cuda.Ctx) error {
		for l := range layers {
			for _, s := range ts {
				n := s.Bytes()
				ptr, err := x.Alloc(n)
				if err != nil {
					return err
				}
				all = append(all, ptr)
				layers[l] = append(layers[l], cudaexec.Buffer{Ptr: ptr, Bytes: n})
				if s.Name == "kv_cache" {
					caches[l] = make([]uint16, n/2)
					for i := range caches[l] {
						caches[l][i] = uint16(0x3c00 + rng.IntN(0x800)) // bf16 in [2^-7, 2^9)
					}
					if err := x.CopyIn(ptr, unsafe.Slice((*byte)(unsafe.Pointer(&caches[l][0])), n)); err != nil {
						return err
					}
				}
				if s.Output {
					if err := x.Fill32(ptr, 0x7fc00000, n/4); err != nil {
						return err
					}
				}
			}
		}
		if err := x.Synchronize(); err != nil {
			return err
		}
		g, err := x.Capture(e.Stream(), func() error {
			for l := range layers {
				if err := prep.LaunchLayer(x, e.Stream(), layers[l]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer x.DestroyGraph(g)
		if err := x.LaunchGraph(g, e.Stream()); err != nil {
			return err
		}
		return x.SyncStream(e.Stream())
	})
	defer e.Do(func(x *cuda.Ctx) error {
		for _, p := range all {
			x.Free(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for l := range layers {
		checkHopperLayer(t, e, ts, l, layers[l], caches[l])
	}
}

// hopperPlanFor is the plan of TestHopperLaunchFeatures on dev: tma_copy
// over a decode batch's cache viewed as 512 rows of 576, in clusters of
// two, programmatic, with a struct of the output's address, the rows, a
// scale and a check value.
func hopperPlanFor(t *testing.T, dev core.DeviceInfo) (*core.PlanRequest, *core.Plan) {
	t.Helper()
	req := &core.PlanRequest{Backend: "acme", Method: core.MLA, DType: "bf16", Device: dev,
		Dims:  core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1},
		Shape: core.PlanShape{SeqLens: []int64{512}, QLens: []int64{4}, PageSize: 64, NumPages: 8}}
	ts, err := launch.Tensors(req)
	if err != nil {
		t.Fatal(err)
	}
	p := &core.Plan{Kernel: "acme_decode", Tensors: ts, Launches: []core.Launch{{
		Module: "hopper_test", Entry: "tma_copy", Grid: [3]uint32{8, 1, 1}, Block: [3]uint32{128, 1, 1},
		Cluster: [3]uint32{2, 1, 1}, Programmatic: true,
		Args: []core.Arg{
			{Param: "src_map", Kind: core.ArgTensorMap, Name: "kv_cache", Map: &core.TensorMap{View: []int64{512, 576}, Box: []uint32{64, 64}}},
			{Param: "params", Kind: core.ArgStruct, Fields: []core.Field{
				{Offset: 0, Size: 8, Arg: core.Arg{Kind: core.ArgTensor, Name: "out"}},
				{Offset: 8, Size: 4, Arg: core.Arg{Kind: core.ArgInt, Int: 512}},
				{Offset: 12, Size: 4, Arg: core.Arg{Kind: core.ArgFloat, Float: 0.5}},
				{Offset: 16, Size: 8, Arg: core.Arg{Kind: core.ArgInt, Int: 1<<40 + 7}},
			}},
			{Param: "lse", Kind: core.ArgTensor, Name: "lse"},
		},
	}, {
		// The tensors tma_copy does not take: a plan binds every one that
		// holds data (launch.Check).
		Module: "hopper_test", Entry: "reads", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		Args: []core.Arg{{Param: "q", Kind: core.ArgTensor, Name: "q"}, {Param: "kv_indices", Kind: core.ArgTensor, Name: "kv_indices"}},
	}}}
	return req, p
}

// checkHopperLayer checks layer l's outputs: its own cache's boxes times
// the scale, each block's cluster rank, the struct intact.
func checkHopperLayer(t *testing.T, e *rig, ts []core.TensorSpec, l int, bufs []cudaexec.Buffer, cache []uint16) {
	t.Helper()
	index := map[string]int{}
	for i, s := range ts {
		index[s.Name] = i
	}
	out := make([]byte, bufs[index["out"]].Bytes)
	lse := make([]byte, bufs[index["lse"]].Bytes)
	err := e.Do(func(x *cuda.Ctx) error {
		if err := x.CopyOut(out, bufs[index["out"]].Ptr); err != nil {
			return err
		}
		return x.CopyOut(lse, bufs[index["lse"]].Ptr)
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for b := range 8 {
		for r := range 64 {
			for c := range 64 {
				want := devicecheck.BF16(cache[(b*64+r)*576+c]) * 0.5
				if got := devicecheck.BF16(binary.LittleEndian.Uint16(out[2*(b*4096+r*64+c):])); got != want {
					if bad++; bad < 4 {
						t.Errorf("layer %d block %d row %d col %d: %v, want %v", l, b, r, c, got, want)
					}
				}
			}
		}
		rank := math.Float32frombits(binary.LittleEndian.Uint32(lse[4*b:]))
		ok := math.Float32frombits(binary.LittleEndian.Uint32(lse[4*(32+b):]))
		if rank != float32(b%2) || ok != 1 {
			t.Errorf("layer %d block %d: cluster rank %v (want %d), struct intact %v (want 1)", l, b, rank, b%2, ok)
		}
	}
	if bad > 0 {
		t.Errorf("layer %d: %d elements differ from its own cache's boxes", l, bad)
	}
}
