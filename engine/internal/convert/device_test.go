package convert

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
)

// TestPlansAndModulesRoundTrip: a plan and modules with every field set,
// Hopper's launches included (a TMA descriptor, a struct, a cluster, a
// programmatic launch), and a sparse FP8 plan request arrive over the
// engine API as they left.
func TestPlansAndModulesRoundTrip(t *testing.T) {
	p := &core.Plan{
		Kernel: "flash_mla_sparse_fwd", WorkspaceBytes: 1 << 20, Note: "n", Reads: core.PlanReadsDeclared | core.PlanReadsQLens,
		Tensors:  []core.TensorSpec{{Name: "kv_cache", DType: "fp8_e4m3", Shape: []int64{8, 64, 656}}, {Name: "out", DType: "bf16", Shape: []int64{2, 16, 512}, Output: true}},
		Metadata: []core.MetaBuffer{{Name: "schedule", Int32s: []int32{0, 0, 2048, 0}}},
		Schedule: []core.WorkItem{{Request: 0, KVBegin: 0, KVEnd: 2048}},
		Launches: []core.Launch{{
			Module: "m", Entry: "e", Grid: [3]uint32{8, 1, 1}, Block: [3]uint32{384, 1, 1}, SharedBytes: 1000,
			Cluster: [3]uint32{2, 1, 1}, Programmatic: true, PerBatch: true,
			Args: []core.Arg{
				{Param: "map", Kind: core.ArgTensorMap, Name: "kv_cache", Map: &core.TensorMap{View: []int64{512, 656}, Box: []uint32{64, 656 / 8}, Swizzle: "", L2Promotion: "128B"}},
				{Param: "params", Kind: core.ArgStruct, Fields: []core.Field{
					{Offset: 0, Size: 8, Arg: core.Arg{Kind: core.ArgWorkspace, Offset: 64}},
					{Offset: 8, Size: 4, Arg: core.Arg{Kind: core.ArgFloat, Float: 0.5}},
				}},
				{Param: "n", Kind: core.ArgInt, Int: 3},
			},
		}},
	}
	got, err := PlanFromProto(overTheWire(t, PlanToProto(p), &dispatchv1.Plan{}))
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("plan: %v\n got %+v\nwant %+v", err, got, p)
	}
	mods := []core.KernelModule{{Name: "m", Platform: core.PlatformCUDA, Arch: "sm_90a", Format: core.FormatCUBIN, Image: []byte{1, 2}, SHA256: "x",
		Entries: []core.Entry{{Name: "e", Params: []core.Param{{Name: "map", Kind: core.ParamTensorMap}, {Name: "params", Kind: core.ParamStruct, Size: 16}, {Name: "n", Kind: core.ParamI32}}}}}}
	var msg dispatchv1.KernelModulesResponse
	msg.Modules = ModulesToProto(mods)
	if got := ModulesFromProto(overTheWire(t, &msg, &dispatchv1.KernelModulesResponse{}).GetModules()); !reflect.DeepEqual(got, mods) {
		t.Fatalf("modules:\n got %+v\nwant %+v", got, mods)
	}
	req := core.PlanRequest{Backend: "dsa", Method: core.MLA, DType: "bf16", KVDType: "fp8_e4m3",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1, TopK: 2048},
		Shape:  core.PlanShape{SeqLens: []int64{10}, QLens: []int64{1}, PageSize: 64, NumPages: 1},
		Device: core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90}}
	back, err := PlanRequestFromProto(overTheWire(t, PlanRequestToProto(&req), &dispatchv1.PlanKernelRequest{}))
	if err != nil || !reflect.DeepEqual(back, req) {
		t.Fatalf("plan request: %v\n got %+v\nwant %+v", err, back, req)
	}
}

// TestStepFromProtoBoundsItsText: a step's kv_dtype longer than any dtype
// is refused naming the field, quoted short.
func TestStepFromProtoBoundsItsText(t *testing.T) {
	s := &dispatchv1.PlanStepRequest{Backend: "fa3", Mode: dispatchv1.ForwardMode(core.ModeDecode), Method: dispatchv1.Method(core.MLA),
		Pool: &dispatchv1.StepPool{KvDtype: strings.Repeat("k", 1<<20)}}
	_, err := StepRequestFromProto(s)
	if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), "pool.kv_dtype") || len(err.Error()) > 200 {
		t.Fatalf("got %d bytes of error: %.200v", len(fmt.Sprint(err)), err)
	}
}
