package wire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// planner is a rule backend with device code whose answers a test sets;
// it keeps the last request it was asked.
type planner struct {
	*core.RuleBackend
	modules []core.KernelModule
	plan    *core.Plan
	err     error

	mu      sync.Mutex
	lastDev core.DeviceInfo
	lastReq core.PlanRequest
}

func (p *planner) Describe(ctx context.Context) (*core.Description, error) {
	d, err := p.RuleBackend.Describe(ctx)
	if err == nil {
		d.DeviceCode = true
	}
	return d, err
}

func (p *planner) KernelModules(_ context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	p.mu.Lock()
	p.lastDev = dev
	p.mu.Unlock()
	return p.modules, p.err
}

func (p *planner) PlanKernel(_ context.Context, req *core.PlanRequest) (*core.Plan, error) {
	p.mu.Lock()
	p.lastReq = *req
	p.mu.Unlock()
	return p.plan, p.err
}

func h200() core.DeviceInfo {
	return core.DeviceInfo{Platform: core.PlatformCUDA, Name: "NVIDIA H200", ComputeCapability: 90, SMs: 132,
		MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 232448, MaxGrid: [3]int{1<<31 - 1, 65535, 65535}}
}

func planRequest() core.PlanRequest {
	return core.PlanRequest{
		Backend: "oneshot", Method: core.MLA, DType: "bf16", KVDType: "fp8_e4m3",
		Dims:   core.PlanDims{Heads: 128, HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352, TopK: 2048},
		Shape:  core.PlanShape{SeqLens: []int64{4096, 17}, QLens: []int64{1, 4}, PageSize: 64, NumPages: 1000, ChunkCapacity: 131072, MaxSeqLen: 8192},
		Device: h200(), Graph: true,
	}
}

// module returns a module whose image is n random bytes: an image is
// binary (a cubin), so every byte value must arrive as it left.
func module(n int) core.KernelModule {
	rng := rand.New(rand.NewPCG(1, 2))
	var img []byte // an empty image arrives as nil
	if n > 0 {
		img = make([]byte, n)
	}
	for i := range img {
		img[i] = byte(rng.Uint32())
	}
	return core.KernelModule{
		Name: "mla_decode", Platform: core.PlatformCUDA, Arch: "sm_90a", Format: core.FormatCUBIN,
		Image: img, SHA256: core.ImageSHA256(img), Kernels: []string{"flash_attn_with_kvcache"},
		Entries: []core.Entry{
			{Name: "mla_decode_bf16", Params: []core.Param{{Name: "q", Kind: core.ParamPtr}, {Name: "n", Kind: core.ParamI32}, {Name: "scale", Kind: core.ParamF32}}},
			{Name: "mla_combine", Params: []core.Param{{Name: "big", Kind: core.ParamI64}}},
			{Name: "tma", Params: []core.Param{{Name: "map", Kind: core.ParamTensorMap}, {Name: "params", Kind: core.ParamStruct, Size: 24}}},
		},
	}
}

// fullPlan sets every field of a plan.
func fullPlan() *core.Plan {
	return &core.Plan{
		Kernel:         "flash_attn_with_kvcache",
		Tensors:        []core.TensorSpec{{Name: "q", DType: "bf16", Shape: []int64{5, 128, 576}}, {Name: "out", DType: "bf16", Shape: []int64{5, 128, 512}, Output: true}},
		Metadata:       []core.MetaBuffer{{Name: "schedule", Int32s: []int32{0, 0, 4096, 0, 1, -1, 1 << 30, 7}}},
		Schedule:       []core.WorkItem{{Request: 0, KVBegin: 0, KVEnd: 4096, Split: 0}, {Request: 1, KVBegin: -1, KVEnd: 1 << 30, Split: 7}},
		WorkspaceBytes: 1 << 33,
		Launches: []core.Launch{{
			Module: "mla_decode", Entry: "mla_decode_bf16", Grid: [3]uint32{132, 2, 1<<32 - 1}, Block: [3]uint32{128, 1, 1}, SharedBytes: 200000, PerBatch: true,
			Args: []core.Arg{
				{Param: "q", Kind: core.ArgTensor, Name: "q"},
				{Param: "m", Kind: core.ArgMeta, Name: "schedule", Offset: 16},
				{Param: "w", Kind: core.ArgWorkspace, Offset: 1 << 32},
				{Param: "n", Kind: core.ArgInt, Int: -1 << 40},
				{Param: "scale", Kind: core.ArgFloat, Float: 0.1352},
			},
		}, {
			Module: "mla_decode", Entry: "tma", Grid: [3]uint32{8, 2, 1}, Block: [3]uint32{384, 1, 1}, Cluster: [3]uint32{2, 1, 1}, Programmatic: true,
			Args: []core.Arg{
				{Param: "map", Kind: core.ArgTensorMap, Name: "q", Map: &core.TensorMap{View: []int64{640, 576}, Box: []uint32{64, 64}, Swizzle: "128B", L2Promotion: "256B", OOBNaN: true}},
				{Param: "params", Kind: core.ArgStruct, Fields: []core.Field{
					{Offset: 0, Size: 8, Arg: core.Arg{Kind: core.ArgTensor, Name: "out"}},
					{Offset: 8, Size: 4, Arg: core.Arg{Kind: core.ArgInt, Int: -7}},
					{Offset: 16, Size: 8, Arg: core.Arg{Kind: core.ArgFloat, Float: 0.25}},
				}},
			},
		}},
		Note: "2 splits", Reads: core.PlanReadsDeclared | core.PlanReadsQLens,
	}
}

func newPlanner(t *testing.T) *planner {
	return &planner{RuleBackend: ruleBackend(t), modules: []core.KernelModule{module(6 << 20), module(0)}, plan: fullPlan()}
}

func TestDeviceRoundTrip(t *testing.T) {
	ctx := testContext(t)
	p := newPlanner(t)
	p.modules[1].Name, p.modules[1].Format, p.modules[1].Platform = "empty", "hsaco", core.PlatformHIP
	p.modules[1].Entries, p.modules[1].Kernels = nil, nil
	c := connect(t, p)

	t.Run("describe_device_code", func(t *testing.T) {
		d, err := c.Describe(ctx)
		if err != nil || !d.DeviceCode {
			t.Errorf("Describe: got %+v, %v, want DeviceCode", d, err)
		}
	})
	t.Run("modules", func(t *testing.T) {
		got, err := c.KernelModules(ctx, h200())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, p.modules) {
			t.Errorf("KernelModules: the modules changed on the way")
		}
		if core.ImageSHA256(got[0].Image) != p.modules[0].SHA256 || len(got[0].Image) != 6<<20 {
			t.Errorf("the 6 MiB image arrived with %d bytes and another hash", len(got[0].Image))
		}
		if p.lastDev != h200() {
			t.Errorf("the plugin was told device %+v, want %+v", p.lastDev, h200())
		}
	})
	t.Run("plan", func(t *testing.T) {
		req := planRequest()
		got, err := c.PlanKernel(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, p.plan) {
			t.Errorf("PlanKernel:\n got %+v\nwant %+v", got, p.plan)
		}
		if !reflect.DeepEqual(p.lastReq, req) {
			t.Errorf("the plugin was asked\n %+v\nwant %+v", p.lastReq, req)
		}
	})
	t.Run("zero_device", func(t *testing.T) {
		if _, err := c.KernelModules(ctx, core.DeviceInfo{}); err != nil || p.lastDev != (core.DeviceInfo{}) {
			t.Errorf("KernelModules(zero device): got %v, device %+v", err, p.lastDev)
		}
	})
}

func TestDeviceErrors(t *testing.T) {
	ctx := testContext(t)
	req := planRequest()
	t.Run("no_planner_is_no_plan", func(t *testing.T) {
		// A backend without device code answers as a plugin older than
		// the RPCs does: Unimplemented.
		c := connect(t, ruleBackend(t))
		_, err := c.KernelModules(ctx, h200())
		if !errors.Is(err, core.ErrNoPlan) || errors.Is(err, core.ErrProtocol) || !strings.Contains(err.Error(), "KernelModules") {
			t.Errorf("KernelModules: got %v, want ErrNoPlan naming the RPC", err)
		}
		_, err = c.PlanKernel(ctx, &req)
		if !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "PlanKernel") {
			t.Errorf("PlanKernel: got %v, want ErrNoPlan naming the RPC", err)
		}
	})
	for _, tc := range []struct {
		name string
		err  error
		is   error
		msg  string
	}{
		// The plugin's message, not prefixed twice.
		{"no_plan", fmt.Errorf("%w: no NVRTC", core.ErrNoPlan), core.ErrNoPlan, "plan kernel: no device plan: no NVRTC"},
		{"invalid", core.NewFieldError("dims.heads", "0 is outside [1, 1024]"), core.ErrInvalidRequest, "plan kernel: dims.heads: 0 is outside [1, 1024]"},
		{"unknown_backend", core.ErrUnknownBackend, core.ErrUnknownBackend, "plan kernel: unknown backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlanner(t)
			p.err = tc.err
			c := connect(t, p)
			_, err := c.PlanKernel(ctx, &req)
			if !errors.Is(err, tc.is) || err.Error() != tc.msg {
				t.Errorf("PlanKernel: got %q, want %v %q", err, tc.is, tc.msg)
			}
			_, err = c.KernelModules(ctx, h200())
			if !errors.Is(err, tc.is) {
				t.Errorf("KernelModules: got %v, want %v", err, tc.is)
			}
		})
	}
	t.Run("nil_plan", func(t *testing.T) {
		p := newPlanner(t)
		p.plan = nil
		c := connect(t, p)
		if _, err := c.PlanKernel(ctx, &req); !errors.Is(err, core.ErrProtocol) {
			t.Errorf("PlanKernel with no plan: got %v, want ErrProtocol", err)
		}
	})
	t.Run("modules_too_large", func(t *testing.T) {
		p := newPlanner(t)
		big := module(0)
		big.Image = make([]byte, MaxModulesBytes/2+1)
		p.modules = []core.KernelModule{big, big}
		c := connect(t, p)
		_, err := c.KernelModules(ctx, h200())
		if !errors.Is(err, core.ErrNoPlan) || !strings.Contains(err.Error(), "more than one answer carries") {
			t.Errorf("KernelModules of %d bytes: got %v, want ErrNoPlan saying why", 2*len(big.Image), err)
		}
	})
	t.Run("invalid_request_refused_by_the_server", func(t *testing.T) {
		p := newPlanner(t)
		c := connect(t, p)
		for _, tc := range []struct {
			edit func(*core.PlanRequest)
			want string
		}{
			{func(r *core.PlanRequest) { r.Method = 0 }, "method: unknown method 0"},
			{func(r *core.PlanRequest) { r.Backend = "" }, "backend"},
			{func(r *core.PlanRequest) { r.Shape.QLens = r.Shape.QLens[:1] }, "shape.seq_lens: has 2 entries and q_lens 1"},
			{func(r *core.PlanRequest) { r.Device.Platform = 99 }, "device.platform: unknown platform 99"},
			{func(r *core.PlanRequest) { r.Device.SMs = -1 }, "device: has a negative limit"},
		} {
			r := planRequest()
			tc.edit(&r)
			_, err := c.PlanKernel(ctx, &r)
			if !errors.Is(err, core.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidRequest naming %q", err, tc.want)
			}
		}
	})
}

// planRPC is a pluginv1 client whose plan and modules a test sets.
type planRPC struct {
	pb.BackendClient
	plan    *pb.PlanKernelResponse
	modules *pb.KernelModulesResponse
}

func (f *planRPC) PlanKernel(context.Context, *pb.PlanKernelRequest, ...grpc.CallOption) (*pb.PlanKernelResponse, error) {
	return f.plan, nil
}

func (f *planRPC) KernelModules(context.Context, *pb.KernelModulesRequest, ...grpc.CallOption) (*pb.KernelModulesResponse, error) {
	return f.modules, nil
}

func TestClientChecksPlans(t *testing.T) {
	ctx := testContext(t)
	req := planRequest()
	for _, tc := range []struct {
		name string
		plan *pb.Plan
		want string
	}{
		{"no_plan", nil, "no plan in the answer"},
		{"two_grid_dims", &pb.Plan{Launches: []*pb.Launch{{Grid: []uint32{1, 1}, Block: []uint32{1, 1, 1}}}}, "launch 0 has a grid of 2 and a block of 3 dimensions"},
		{"no_block", &pb.Plan{Launches: []*pb.Launch{{}, {Grid: []uint32{1, 1, 1}}}}, "launch 0 has a grid of 0 and a block of 0 dimensions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{rpc: &planRPC{plan: &pb.PlanKernelResponse{Plan: tc.plan}}}
			_, err := c.PlanKernel(ctx, &req)
			if !errors.Is(err, core.ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrProtocol saying %q", err, tc.want)
			}
		})
	}
	t.Run("unknown_platform_kept_unknown", func(t *testing.T) {
		c := &Client{rpc: &planRPC{modules: &pb.KernelModulesResponse{Modules: []*pb.KernelModule{{Name: "m", Platform: 77}}}}}
		ms, err := c.KernelModules(ctx, h200())
		if err != nil || len(ms) != 1 || ms[0].Platform.Valid() {
			t.Errorf("got %+v, %v, want one module of an invalid platform", ms, err)
		}
	})
}

// FuzzPlanFromProto feeds the host's plan decoder arbitrary bytes, as a
// hostile plugin could answer them: it must not panic, and what it
// accepts has three dimensions per launch.
func FuzzPlanFromProto(f *testing.F) {
	seed, err := proto.Marshal(planToProto(fullPlan()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p pb.Plan
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		out, err := planFromProto(&p)
		if err != nil {
			return
		}
		if len(out.Launches) != len(p.GetLaunches()) {
			t.Fatalf("%d launches decoded from %d", len(out.Launches), len(p.GetLaunches()))
		}
	})
}

// FuzzServerPlanKernel feeds the plugin's server side arbitrary bytes read
// as a PlanKernelRequest: it must not panic, and the backend sees only
// requests of a known method with as many query as sequence lengths.
func FuzzServerPlanKernel(f *testing.F) {
	p := &planner{RuleBackend: nil, plan: fullPlan()}
	srv := NewServer(p)
	req := planRequest()
	seed, err := proto.Marshal(planRequestToProto(&req))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		var in pb.PlanKernelRequest
		if proto.Unmarshal(data, &in) != nil {
			return
		}
		p.lastReq = core.PlanRequest{}
		_, err := srv.PlanKernel(ctx, &in)
		if err != nil {
			return
		}
		got := p.lastReq
		if !got.Method.Valid() || got.Method == 0 || len(got.Shape.QLens) != len(got.Shape.SeqLens) || got.Backend == "" {
			t.Fatalf("the backend was asked an invalid request: %+v", got)
		}
	})
}
