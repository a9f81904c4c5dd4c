package wire

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
)

// The converters of device execution: devices, kernel modules, plan
// requests and plans. What arrives is checked for what the protocol
// itself promises (a known method, three launch dimensions, counts within
// the limits); what a plan means is checked by the host (launch.Check),
// and what a request means by the planner.

// MaxPlanBatch is the most requests (seq_lens entries) of a plan request.
const MaxPlanBatch = 1 << 16

// MaxModulesBytes is the most image bytes one KernelModules answer
// carries: a message of the protocol (MaxMessageBytes) less a MiB for the
// rest. A plugin whose modules are larger answers "no device code".
const MaxModulesBytes = MaxMessageBytes - 1<<20

func deviceToProto(d core.DeviceInfo) *pb.DeviceInfo {
	return &pb.DeviceInfo{
		Platform:           pb.Platform(d.Platform),
		Name:               d.Name,
		ComputeCapability:  int32(d.ComputeCapability),
		Sms:                int32(d.SMs),
		MaxThreadsPerBlock: int32(d.MaxThreadsPerBlock),
		MaxSharedPerBlock:  int64(d.MaxSharedPerBlock),
		MaxGrid:            []int64{int64(d.MaxGrid[0]), int64(d.MaxGrid[1]), int64(d.MaxGrid[2])},
	}
}

// deviceFromProto returns the core form of d; field names the message in
// errors.
func deviceFromProto(d *pb.DeviceInfo, field string) (core.DeviceInfo, error) {
	if d == nil {
		return core.DeviceInfo{}, core.NewFieldError(field, "missing")
	}
	p := core.Platform(d.GetPlatform())
	if d.GetPlatform() < 0 || d.GetPlatform() > 255 || !p.Valid() {
		return core.DeviceInfo{}, core.NewFieldError(field+".platform", fmt.Sprintf("unknown platform %d", int32(d.GetPlatform())))
	}
	out := core.DeviceInfo{
		Platform:           p,
		Name:               d.GetName(),
		ComputeCapability:  int(d.GetComputeCapability()),
		SMs:                int(d.GetSms()),
		MaxThreadsPerBlock: int(d.GetMaxThreadsPerBlock()),
		MaxSharedPerBlock:  int(d.GetMaxSharedPerBlock()),
	}
	g := d.GetMaxGrid()
	if len(g) != 0 && len(g) != 3 {
		return core.DeviceInfo{}, core.NewFieldError(field+".max_grid", fmt.Sprintf("has %d entries, want 3", len(g)))
	}
	for i, x := range g {
		if x < 0 || x > 1<<32 {
			return core.DeviceInfo{}, core.NewFieldError(fmt.Sprintf("%s.max_grid[%d]", field, i), fmt.Sprintf("%d is out of [0, 2^32]", x))
		}
		out.MaxGrid[i] = int(x)
	}
	if out.ComputeCapability < 0 || out.SMs < 0 || out.MaxThreadsPerBlock < 0 || out.MaxSharedPerBlock < 0 {
		return core.DeviceInfo{}, core.NewFieldError(field, "has a negative limit")
	}
	return out, nil
}

func modulesToProto(ms []core.KernelModule) []*pb.KernelModule {
	out := make([]*pb.KernelModule, len(ms))
	for i, m := range ms {
		pm := &pb.KernelModule{
			Name: m.Name, Platform: pb.Platform(m.Platform), Arch: m.Arch, Format: string(m.Format),
			Image: m.Image, Sha256: m.SHA256, Kernels: m.Kernels,
		}
		for _, e := range m.Entries {
			pe := &pb.KernelEntry{Name: e.Name}
			for _, p := range e.Params {
				pe.Params = append(pe.Params, &pb.KernelParam{Name: p.Name, Kind: string(p.Kind), Size: int32(p.Size)})
			}
			pm.Entries = append(pm.Entries, pe)
		}
		out[i] = pm
	}
	return out
}

// modulesFromProto returns the core form of ms. The images are the
// message's bytes, not copies. A platform unknown to this host becomes a
// value no host loads, so that the module is refused rather than
// mistaken for another platform's.
func modulesFromProto(ms []*pb.KernelModule) []core.KernelModule {
	out := make([]core.KernelModule, len(ms))
	for i, pm := range ms {
		p := core.Platform(pm.GetPlatform())
		if pm.GetPlatform() < 0 || pm.GetPlatform() > 255 || !p.Valid() {
			p = core.Platform(255)
		}
		m := core.KernelModule{
			Name: pm.GetName(), Platform: p, Arch: pm.GetArch(), Format: core.ModuleFormat(pm.GetFormat()),
			Image: pm.GetImage(), SHA256: pm.GetSha256(), Kernels: pm.GetKernels(),
		}
		for _, pe := range pm.GetEntries() {
			e := core.Entry{Name: pe.GetName()}
			for _, pp := range pe.GetParams() {
				e.Params = append(e.Params, core.Param{Name: pp.GetName(), Kind: core.ParamKind(pp.GetKind()), Size: int(pp.GetSize())})
			}
			m.Entries = append(m.Entries, e)
		}
		out[i] = m
	}
	return out
}

// modulesBytes is the size of the images of ms, which dominate their
// message.
func modulesBytes(ms []core.KernelModule) int {
	n := 0
	for _, m := range ms {
		n += len(m.Image)
	}
	return n
}

func planRequestToProto(r *core.PlanRequest) *pb.PlanKernelRequest {
	return &pb.PlanKernelRequest{
		Backend: r.Backend,
		Method:  methodToProto(r.Method),
		Dtype:   r.DType,
		Dims: &pb.PlanDims{
			Heads: int32(r.Dims.Heads), HeadDimQk: int32(r.Dims.HeadDimQK), HeadDimV: int32(r.Dims.HeadDimV),
			SoftmaxScale: r.Dims.SoftmaxScale, TopK: int32(r.Dims.TopK),
		},
		Shape: &pb.PlanShape{
			SeqLens: r.Shape.SeqLens, QLens: r.Shape.QLens,
			PageSize: int32(r.Shape.PageSize), NumPages: int64(r.Shape.NumPages), ChunkCapacity: int64(r.Shape.ChunkCapacity),
			MaxSeqLen: r.Shape.MaxSeqLen, PrefixChunk: r.Shape.PrefixChunk,
		},
		Device:     deviceToProto(r.Device),
		Graph:      r.Graph,
		KvDtype:    r.KVDType,
		QuerySplit: r.QuerySplit,
	}
}

// planRequestFromProto returns the core form of r: a named backend, a
// method the protocol knows, as many query lengths as sequence lengths
// and at most MaxPlanBatch of them, and a device. The planner checks the
// rest. The error wraps core.ErrInvalidRequest.
func planRequestFromProto(r *pb.PlanKernelRequest) (core.PlanRequest, error) {
	var out core.PlanRequest
	if r == nil {
		return out, core.NewFieldError("request", "missing")
	}
	m := core.Method(r.GetMethod())
	if r.GetMethod() < 0 || r.GetMethod() > 255 || !m.Valid() {
		return out, core.NewFieldError("method", fmt.Sprintf("unknown method %d", int32(r.GetMethod())))
	}
	if r.GetBackend() == "" || len(r.GetBackend()) > core.MaxBackendNameLen {
		return out, core.NewFieldError("backend", "must be a name of 1 to 256 bytes")
	}
	s := r.GetShape()
	if n := len(s.GetSeqLens()); n > MaxPlanBatch || len(s.GetQLens()) != n {
		return out, core.NewFieldError("shape.seq_lens", fmt.Sprintf("has %d entries and q_lens %d: want the same number, at most %d", n, len(s.GetQLens()), MaxPlanBatch))
	}
	dev, err := deviceFromProto(r.GetDevice(), "device")
	if err != nil {
		return out, err
	}
	d := r.GetDims()
	return core.PlanRequest{
		Backend: r.GetBackend(),
		Method:  m,
		DType:   r.GetDtype(),
		Dims: core.PlanDims{
			Heads: int(d.GetHeads()), HeadDimQK: int(d.GetHeadDimQk()), HeadDimV: int(d.GetHeadDimV()),
			SoftmaxScale: d.GetSoftmaxScale(), TopK: int(d.GetTopK()),
		},
		Shape: core.PlanShape{
			SeqLens: s.GetSeqLens(), QLens: s.GetQLens(),
			PageSize: int(s.GetPageSize()), NumPages: int(s.GetNumPages()), ChunkCapacity: int(s.GetChunkCapacity()),
			MaxSeqLen: s.GetMaxSeqLen(), PrefixChunk: s.GetPrefixChunk(),
		},
		Device:     dev,
		Graph:      r.GetGraph(),
		KVDType:    r.GetKvDtype(),
		QuerySplit: r.GetQuerySplit(),
	}, nil
}

func planToProto(p *core.Plan) *pb.Plan {
	out := &pb.Plan{Kernel: p.Kernel, WorkspaceBytes: p.WorkspaceBytes, Note: p.Note, Reads: uint32(p.Reads)}
	for _, t := range p.Tensors {
		out.Tensors = append(out.Tensors, &pb.TensorSpec{Name: t.Name, Dtype: t.DType, Shape: t.Shape, Output: t.Output, Strided: t.Strided})
	}
	for _, m := range p.Metadata {
		out.Metadata = append(out.Metadata, &pb.MetaBuffer{Name: m.Name, Int32S: m.Int32s})
	}
	for _, w := range p.Schedule {
		out.Schedule = append(out.Schedule, &pb.WorkItem{Request: w.Request, KvBegin: w.KVBegin, KvEnd: w.KVEnd, Split: w.Split})
	}
	for _, l := range p.Launches {
		pl := &pb.Launch{
			Module: l.Module, Entry: l.Entry, SharedBytes: l.SharedBytes, PerBatch: l.PerBatch,
			Grid: l.Grid[:], Block: l.Block[:], Programmatic: l.Programmatic,
		}
		if l.Cluster != ([3]uint32{}) {
			pl.Cluster = l.Cluster[:]
		}
		for _, a := range l.Args {
			pl.Args = append(pl.Args, argToProto(a))
		}
		out.Launches = append(out.Launches, pl)
	}
	return out
}

// planFromProto returns the core form of p; a launch without exactly three
// grid and block dimensions is an error wrapping core.ErrProtocol. The
// host checks the rest of the plan (launch.Check).
func planFromProto(p *pb.Plan) (*core.Plan, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: plan kernel: no plan in the answer", core.ErrProtocol)
	}
	out := &core.Plan{Kernel: p.GetKernel(), WorkspaceBytes: p.GetWorkspaceBytes(), Note: p.GetNote(), Reads: core.PlanReads(p.GetReads())}
	for _, t := range p.GetTensors() {
		out.Tensors = append(out.Tensors, core.TensorSpec{Name: t.GetName(), DType: t.GetDtype(), Shape: t.GetShape(), Output: t.GetOutput(), Strided: t.GetStrided()})
	}
	for _, m := range p.GetMetadata() {
		out.Metadata = append(out.Metadata, core.MetaBuffer{Name: m.GetName(), Int32s: m.GetInt32S()})
	}
	for _, w := range p.GetSchedule() {
		out.Schedule = append(out.Schedule, core.WorkItem{Request: w.GetRequest(), KVBegin: w.GetKvBegin(), KVEnd: w.GetKvEnd(), Split: w.GetSplit()})
	}
	for i, pl := range p.GetLaunches() {
		if len(pl.GetGrid()) != 3 || len(pl.GetBlock()) != 3 {
			return nil, fmt.Errorf("%w: plan kernel: launch %d has a grid of %d and a block of %d dimensions, want 3 each",
				core.ErrProtocol, i, len(pl.GetGrid()), len(pl.GetBlock()))
		}
		if n := len(pl.GetCluster()); n != 0 && n != 3 {
			return nil, fmt.Errorf("%w: plan kernel: launch %d has a cluster of %d dimensions, want none or 3", core.ErrProtocol, i, n)
		}
		l := core.Launch{Module: pl.GetModule(), Entry: pl.GetEntry(), SharedBytes: pl.GetSharedBytes(), PerBatch: pl.GetPerBatch(),
			Programmatic: pl.GetProgrammatic()}
		copy(l.Grid[:], pl.GetGrid())
		copy(l.Block[:], pl.GetBlock())
		copy(l.Cluster[:], pl.GetCluster())
		for _, a := range pl.GetArgs() {
			l.Args = append(l.Args, argFromProto(a, true))
		}
		out.Launches = append(out.Launches, l)
	}
	return out, nil
}

// argToProto returns the wire form of a launch argument, its TMA map and
// struct fields included.
func argToProto(a core.Arg) *pb.LaunchArg {
	out := &pb.LaunchArg{Param: a.Param, Kind: string(a.Kind), Name: a.Name, Offset: a.Offset, IntValue: a.Int, FloatValue: a.Float, Dim: int32(a.Dim)}
	if m := a.Map; m != nil {
		out.Map = &pb.TensorMap{View: m.View, Box: m.Box, Swizzle: m.Swizzle, L2Promotion: m.L2Promotion, OobNan: m.OOBNaN}
	}
	for _, f := range a.Fields {
		out.Fields = append(out.Fields, &pb.StructField{Offset: f.Offset, Size: f.Size, Value: argToProto(f.Arg)})
	}
	return out
}

// argFromProto returns the core form of a launch argument; a struct's
// fields are read one level deep (a field is a scalar or an address: the
// host refuses any other).
func argFromProto(a *pb.LaunchArg, fields bool) core.Arg {
	out := core.Arg{Param: a.GetParam(), Kind: core.ArgKind(a.GetKind()), Name: a.GetName(), Offset: a.GetOffset(),
		Int: a.GetIntValue(), Float: a.GetFloatValue(), Dim: int(a.GetDim())}
	if m := a.GetMap(); m != nil {
		out.Map = &core.TensorMap{View: m.GetView(), Box: m.GetBox(), Swizzle: m.GetSwizzle(), L2Promotion: m.GetL2Promotion(), OOBNaN: m.GetOobNan()}
	}
	if fields {
		for _, f := range a.GetFields() {
			out.Fields = append(out.Fields, core.Field{Offset: f.GetOffset(), Size: f.GetSize(), Arg: argFromProto(f.GetValue(), false)})
		}
	}
	return out
}
