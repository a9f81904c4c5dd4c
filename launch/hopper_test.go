package launch_test

import (
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// hopperModule is a module whose entry takes what Hopper's kernels take: a
// TMA descriptor, a struct by value, pointers.
func hopperModule() core.KernelModule {
	return core.KernelModule{Name: "hopper", Platform: core.PlatformCUDA, Entries: []core.Entry{{Name: "tma_copy", Params: []core.Param{
		{Name: "src_map", Kind: core.ParamTensorMap},
		{Name: "params", Kind: core.ParamStruct, Size: 24},
		{Name: "out", Kind: core.ParamPtr},
		{Name: "q", Kind: core.ParamPtr},
		{Name: "lse", Kind: core.ParamPtr},
		{Name: "kv_indices", Kind: core.ParamPtr},
	}}}}
}

// hopperPlan is a plan of that entry over a decode batch's tensors: a TMA
// descriptor over the paged cache viewed as rows, a struct of the output's
// address, a row count and a scale, and the other tensors the kernels
// read and write, in clusters of two, programmatic.
func hopperPlan(t *testing.T) (*core.Plan, *core.PlanRequest) {
	t.Helper()
	req := &core.PlanRequest{
		Backend: "acme", Method: core.MLA, DType: "bf16",
		Dims:   core.PlanDims{Heads: 16, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352},
		Shape:  core.PlanShape{SeqLens: []int64{100, 200}, QLens: []int64{1, 1}, PageSize: 64, NumPages: 8},
		Device: h200,
	}
	ts, err := launch.Tensors(req)
	if err != nil {
		t.Fatal(err)
	}
	p := &core.Plan{Kernel: "acme_decode", Tensors: ts, Reads: core.PlanReadsDeclared | core.PlanReadsQLens | core.PlanReadsSeqLens,
		Launches: []core.Launch{{
			Module: "hopper", Entry: "tma_copy", Grid: [3]uint32{8, 1, 1}, Block: [3]uint32{128, 1, 1},
			Cluster: [3]uint32{2, 1, 1}, Programmatic: true,
			Args: []core.Arg{
				{Param: "src_map", Kind: core.ArgTensorMap, Name: "kv_cache", Map: &core.TensorMap{View: []int64{8 * 64, 576}, Box: []uint32{64, 64}, Swizzle: "128B"}},
				{Param: "params", Kind: core.ArgStruct, Fields: []core.Field{
					{Offset: 0, Size: 8, Arg: core.Arg{Kind: core.ArgTensor, Name: "out"}},
					{Offset: 8, Size: 4, Arg: core.Arg{Kind: core.ArgInt, Int: 512}},
					{Offset: 12, Size: 4, Arg: core.Arg{Kind: core.ArgFloat, Float: 0.5}},
					{Offset: 16, Size: 8, Arg: core.Arg{Kind: core.ArgInt, Int: 1 << 40}},
				}},
				{Param: "out", Kind: core.ArgTensor, Name: "out"},
				{Param: "q", Kind: core.ArgTensor, Name: "q"},
				{Param: "lse", Kind: core.ArgTensor, Name: "lse"},
				{Param: "kv_indices", Kind: core.ArgTensor, Name: "kv_indices"},
			},
		}},
	}
	if err := launch.Check(p, req, []core.KernelModule{hopperModule()}, h200); err != nil {
		t.Fatalf("a good plan: %v", err)
	}
	return p, req
}

// TestCheckHopperLaunches: a plan with a TMA descriptor, a struct parameter
// and a cluster launch passes the host's check, and every way it can be
// wrong is refused, naming the problem.
func TestCheckHopperLaunches(t *testing.T) {
	arg := func(p *core.Plan, param string) *core.Arg {
		for i := range p.Launches[0].Args {
			if p.Launches[0].Args[i].Param == param {
				return &p.Launches[0].Args[i]
			}
		}
		t.Fatalf("no argument %q", param)
		return nil
	}
	cases := []struct {
		name, want string
		lie        func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule)
	}{
		{"descriptor over an unbound tensor", "does not declare", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Name = "weights"
		}},
		{"box beyond its tensor", "outside [1, min(256", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map.View = []int64{8 * 64 * 576 / 32, 32}
			arg(p, "src_map").Map.Box = []uint32{64, 64}
		}},
		{"box over 256", "outside [1, min(256", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map.Box = []uint32{512, 64}
		}},
		{"view of other elements", "other elements", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map.View = []int64{8 * 64, 512}
		}},
		{"rows beyond the swizzle", "swizzle", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map.Swizzle = "64B"
		}},
		{"unknown swizzle", "swizzle", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map.Swizzle = "256B"
		}},
		{"no map", "without its map", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "src_map").Map = nil
		}},
		{"descriptor for a pointer", "bound to a TMA descriptor", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			src := *arg(p, "src_map")
			src.Param = "out"
			*arg(p, "out") = src
		}},
		{"field outside the struct", "outside the struct", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "params").Fields[3].Offset = 24
		}},
		{"struct of the wrong size", "outside the struct", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			m.Entries[0].Params[1].Size = 16
		}},
		{"overlapping fields", "overlaps", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "params").Fields[2].Offset = 8
		}},
		{"misaligned field", "not aligned", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "params").Fields[3].Offset = 12
		}},
		{"field of an undeclared tensor", "does not declare", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "params").Fields[0].Arg.Name = "weights"
		}},
		{"address field of 4 bytes", "addresses and strides take 8", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			arg(p, "params").Fields[0].Size = 4
		}},
		{"parameters beyond 4 KiB", "more than 4096", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			m.Entries[0].Params[1].Size = 5000
		}},
		{"cluster not dividing the grid", "does not divide", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			p.Launches[0].Cluster = [3]uint32{3, 1, 1}
		}},
		{"cluster of 16", "more than 8", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			p.Launches[0].Grid = [3]uint32{16, 1, 1}
			p.Launches[0].Cluster = [3]uint32{16, 1, 1}
		}},
		{"cluster on an A100", "compute capability 9.0", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			dev.ComputeCapability = 80
		}},
		{"programmatic on an A100", "programmatic launch", func(p *core.Plan, dev *core.DeviceInfo, m *core.KernelModule) {
			dev.ComputeCapability = 80
			p.Launches[0].Cluster = [3]uint32{}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, req := hopperPlan(t)
			dev, mod := h200, hopperModule()
			c.lie(p, &dev, &mod)
			err := launch.Check(p, req, []core.KernelModule{mod}, dev)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestCheckEntriesSizesStructsAndDescriptors: the PTX signature check reads
// a struct's and a descriptor's bytes (.b8 arrays) and refuses a struct of
// another size than declared.
func TestCheckEntriesSizesStructsAndDescriptors(t *testing.T) {
	ptx := `.version 8.0
.target sm_90a
.address_size 64
.visible .entry tma_copy(
	.param .align 64 .b8 tma_copy_param_0[128],
	.param .align 8 .b8 tma_copy_param_1[24],
	.param .u64 .ptr .align 1 tma_copy_param_2,
	.param .u64 .ptr .align 1 tma_copy_param_3,
	.param .u64 .ptr .align 1 tma_copy_param_4,
	.param .u64 .ptr .align 1 tma_copy_param_5
)
{
	ret;
}
`
	m := hopperModule()
	m.Format, m.Image = core.FormatPTX, []byte(ptx)
	if err := launch.CheckEntries(m); err != nil {
		t.Fatalf("the matching signature: %v", err)
	}
	m.Entries[0].Params[1].Size = 32
	if err := launch.CheckEntries(m); err == nil || !strings.Contains(err.Error(), "32 bytes as declared, 24 bytes in the image") {
		t.Fatalf("a struct of the wrong size: %v", err)
	}
}
