package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/protobuf/proto"
)

func kernelRequest() core.KernelRequest {
	return core.KernelRequest{
		Backend: "fa3", Method: core.MLA,
		Dims:    core.KernelDims{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 2, VHeadDim: 4, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 4, TopK: 3},
		SeqLens: []int64{5}, PrefixLens: []int64{4},
		Buffer:  core.SharedBuffer{Path: "/proc/1/fd/3", Size: 1024},
		Tensors: []core.TensorRef{{Name: "c_kv", Offset: 64, Shape: []int64{5, 8}, DType: "float32"}, {Name: "positions", Offset: 0, Shape: []int64{1}, DType: "int32"}},
	}
}

func TestKernelRequestRoundTrip(t *testing.T) {
	want := kernelRequest()
	got, err := kernelRequestFromProto(overTheWire(t, kernelRequestToProto(&want), &pb.RunKernelRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	withMem := want
	withMem.Buffer.Mem = make([]byte, 1024)
	if p := kernelRequestToProto(&withMem); p.GetBuffer().GetSize() != 1024 || len(p.String()) > 1024 {
		t.Errorf("the buffer's memory went into the message: %d bytes", len(p.String()))
	}
	ks := []core.Kernel{{Name: "k", Library: core.LibFlashMLA, Method: core.MLA, DTypes: []string{"bf16"}, HeadDims: []int{576, 512},
		PageSizes: []int{64}, CUDAGraph: true, Sparse: true, Hardware: []core.Hardware{{Platforms: []core.Platform{core.PlatformCUDA}, MinCapability: 90}}}}
	back, err := kernelsFromProto(kernelsToProto(ks))
	if err != nil || !reflect.DeepEqual(back, ks) {
		t.Errorf("kernels round trip: got %+v, %v", back, err)
	}
}

// TestKernelRequestCarriesNoTensorData: the RunKernel message names the
// tensors in shared memory; however large the buffer, nothing of it goes
// into the message.
func TestKernelRequestCarriesNoTensorData(t *testing.T) {
	req := kernelRequest()
	req.Buffer.Mem = make([]byte, 64<<20)
	req.Buffer.Size = int64(len(req.Buffer.Mem))
	if n := proto.Size(kernelRequestToProto(&req)); n > 2048 {
		t.Errorf("the RunKernel request is %d bytes: tensor data went into the message", n)
	}
}

func TestKernelRequestFromProtoRejects(t *testing.T) {
	for _, tc := range []struct {
		edit func(*core.KernelRequest)
		want string
	}{
		{func(r *core.KernelRequest) { r.Method = 0 }, "method: unknown method 0"},
		{func(r *core.KernelRequest) { r.Backend = "" }, "backend"},
		{func(r *core.KernelRequest) { r.PrefixLens = nil }, "seq_lens"},
		{func(r *core.KernelRequest) { r.Buffer.Path = "" }, "buffer"},
		{func(r *core.KernelRequest) { r.Tensors = nil }, "tensors: has 0 entries"},
		{func(r *core.KernelRequest) { r.Tensors[0].DType = "bf16" }, "tensors[0].dtype"},
		{func(r *core.KernelRequest) { r.Tensors[0].Offset = 1020 }, "tensors[0].offset"},
		{func(r *core.KernelRequest) { r.Tensors[0].Offset = 66 }, "tensors[0].offset"},
		{func(r *core.KernelRequest) { r.Tensors[0].Shape = []int64{1 << 20, 1 << 20} }, "tensors[0].shape"},
		{func(r *core.KernelRequest) { r.Tensors[0].Shape = []int64{-1} }, "tensors[0].shape"},
	} {
		r := kernelRequest()
		tc.edit(&r)
		_, err := kernelRequestFromProto(kernelRequestToProto(&r))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, core.ErrInvalidRequest) {
			t.Errorf("got %v, want an invalid request naming %q", err, tc.want)
		}
	}
}
