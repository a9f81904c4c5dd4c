package convert

import (
	"encoding/hex"
	"fmt"
	"math"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
)

// MaxPlanBatch is the most requests a plan request carries: the plugin
// protocol's limit (wire.MaxPlanBatch; a test checks they agree), kept
// here so that a client of the engine API links no plugin protocol.
const MaxPlanBatch = 1 << 16

// The longest strings a Kernels request may carry besides its backend
// (core.MaxBackendNameLen): a dtype names a data type ("bf16",
// "fp8_e4m3"), a device name a GPU model ("NVIDIA H200"). A longer one is
// refused before it reaches a plugin, and its error quotes the start of
// it alone: an error's text travels back in the call's status.
const (
	MaxDTypeLen      = 64
	MaxDeviceNameLen = 256
)

// checkText refuses a value of field longer than max bytes, quoting its
// first bytes.
func checkText(field, v string, max int) error {
	if len(v) <= max {
		return nil
	}
	return core.NewFieldError(field, fmt.Sprintf("%q... is %d bytes, more than %d", v[:32], len(v), max))
}

// The converters of the Kernels service: devices, kernel modules, plan
// requests and plans, between core and the engine API's messages. They
// mirror those of the plugin protocol (wire/convert_device.go), as the
// request converters of convert.go mirror wire's: the engine API has
// messages of its own, which do not move with the plugin protocol.

// DeviceToProto returns the engine API's form of d.
func DeviceToProto(d core.DeviceInfo) *dispatchv1.DeviceInfo {
	return &dispatchv1.DeviceInfo{
		Platform:           dispatchv1.Platform(d.Platform),
		Name:               d.Name,
		ComputeCapability:  int32(d.ComputeCapability),
		Sms:                int32(d.SMs),
		MaxThreadsPerBlock: int32(d.MaxThreadsPerBlock),
		MaxSharedPerBlock:  int64(d.MaxSharedPerBlock),
		MaxGrid:            []int64{int64(d.MaxGrid[0]), int64(d.MaxGrid[1]), int64(d.MaxGrid[2])},
	}
}

// DeviceFromProto returns the core form of d, whose name has at most
// MaxDeviceNameLen bytes; field names the message in errors.
func DeviceFromProto(d *dispatchv1.DeviceInfo, field string) (core.DeviceInfo, error) {
	if d == nil {
		return core.DeviceInfo{}, core.NewFieldError(field, "missing")
	}
	p := core.Platform(d.GetPlatform())
	if d.GetPlatform() < 0 || d.GetPlatform() > 255 || !p.Valid() {
		return core.DeviceInfo{}, core.NewFieldError(field+".platform", fmt.Sprintf("unknown platform %d", int32(d.GetPlatform())))
	}
	if err := checkText(field+".name", d.GetName(), MaxDeviceNameLen); err != nil {
		return core.DeviceInfo{}, err
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

// ModulesToProto returns the engine API's form of ms, each image byte for byte.
func ModulesToProto(ms []core.KernelModule) []*dispatchv1.KernelModule {
	out := make([]*dispatchv1.KernelModule, len(ms))
	for i, m := range ms {
		pm := &dispatchv1.KernelModule{
			Name: m.Name, Platform: dispatchv1.Platform(m.Platform), Arch: m.Arch, Format: string(m.Format),
			Image: m.Image, Sha256: m.SHA256, Kernels: m.Kernels,
		}
		for _, e := range m.Entries {
			pe := &dispatchv1.KernelEntry{Name: e.Name}
			for _, p := range e.Params {
				pe.Params = append(pe.Params, &dispatchv1.KernelParam{Name: p.Name, Kind: string(p.Kind), Size: int32(p.Size)})
			}
			pm.Entries = append(pm.Entries, pe)
		}
		out[i] = pm
	}
	return out
}

// ModulesFromProto returns the core form of ms. The images are the
// message's bytes, not copies. A platform unknown to this host becomes a
// value no host loads, so that the module is refused rather than
// mistaken for another platform's.
func ModulesFromProto(ms []*dispatchv1.KernelModule) []core.KernelModule {
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

// PlanRequestToProto returns the engine API's form of r.
func PlanRequestToProto(r *core.PlanRequest) *dispatchv1.PlanKernelRequest {
	return &dispatchv1.PlanKernelRequest{
		Backend: r.Backend,
		Method:  dispatchv1.Method(r.Method),
		Dtype:   r.DType,
		Dims: &dispatchv1.PlanDims{
			Heads: int32(r.Dims.Heads), HeadDimQk: int32(r.Dims.HeadDimQK), HeadDimV: int32(r.Dims.HeadDimV),
			SoftmaxScale: r.Dims.SoftmaxScale, TopK: int32(r.Dims.TopK),
		},
		Shape: &dispatchv1.PlanShape{
			SeqLens: r.Shape.SeqLens, QLens: r.Shape.QLens,
			PageSize: int32(r.Shape.PageSize), NumPages: int64(r.Shape.NumPages), ChunkCapacity: int64(r.Shape.ChunkCapacity),
			MaxSeqLen: r.Shape.MaxSeqLen, PrefixChunk: r.Shape.PrefixChunk,
		},
		Device:     DeviceToProto(r.Device),
		Graph:      r.Graph,
		KvDtype:    r.KVDType,
		QuerySplit: r.QuerySplit,
	}
}

// PlanRequestFromProto returns the core form of r: a named backend, a
// method the protocol knows, dtypes of at most MaxDTypeLen bytes, as many
// query lengths as sequence lengths and at most MaxPlanBatch of them, and
// a device (DeviceFromProto). The planner checks the rest. The error
// wraps core.ErrInvalidRequest.
func PlanRequestFromProto(r *dispatchv1.PlanKernelRequest) (core.PlanRequest, error) {
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
	if err := checkText("dtype", r.GetDtype(), MaxDTypeLen); err != nil {
		return out, err
	}
	if err := checkText("kv_dtype", r.GetKvDtype(), MaxDTypeLen); err != nil {
		return out, err
	}
	s := r.GetShape()
	if n := len(s.GetSeqLens()); n > MaxPlanBatch || len(s.GetQLens()) != n {
		return out, core.NewFieldError("shape.seq_lens", fmt.Sprintf("has %d entries and q_lens %d: want the same number, at most %d", n, len(s.GetQLens()), MaxPlanBatch))
	}
	dev, err := DeviceFromProto(r.GetDevice(), "device")
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

// PlanToProto returns the engine API's form of p.
func PlanToProto(p *core.Plan) *dispatchv1.Plan {
	out := &dispatchv1.Plan{Kernel: p.Kernel, WorkspaceBytes: p.WorkspaceBytes, Note: p.Note, Reads: uint32(p.Reads), ModuleSha256: p.ModuleSHA256}
	for _, t := range p.Tensors {
		out.Tensors = append(out.Tensors, &dispatchv1.TensorSpec{Name: t.Name, Dtype: t.DType, Shape: t.Shape, Output: t.Output, Strided: t.Strided})
	}
	for _, m := range p.Metadata {
		out.Metadata = append(out.Metadata, &dispatchv1.MetaBuffer{Name: m.Name, Int32S: m.Int32s})
	}
	for _, w := range p.Schedule {
		out.Schedule = append(out.Schedule, &dispatchv1.WorkItem{Request: w.Request, KvBegin: w.KVBegin, KvEnd: w.KVEnd, Split: w.Split})
	}
	for _, l := range p.Launches {
		pl := &dispatchv1.Launch{
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

// PlanFromProto returns the core form of p; a launch without exactly three
// grid and block dimensions is an error wrapping core.ErrProtocol. The
// host checks the rest of the plan (launch.Check).
func PlanFromProto(p *dispatchv1.Plan) (*core.Plan, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: plan kernel: no plan in the answer", core.ErrProtocol)
	}
	out := &core.Plan{Kernel: p.GetKernel(), WorkspaceBytes: p.GetWorkspaceBytes(), Note: p.GetNote(), Reads: core.PlanReads(p.GetReads()),
		ModuleSHA256: p.GetModuleSha256()}
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
func argToProto(a core.Arg) *dispatchv1.LaunchArg {
	out := &dispatchv1.LaunchArg{Param: a.Param, Kind: string(a.Kind), Name: a.Name, Offset: a.Offset, IntValue: a.Int, FloatValue: a.Float, Dim: int32(a.Dim)}
	if m := a.Map; m != nil {
		out.Map = &dispatchv1.TensorMap{View: m.View, Box: m.Box, Swizzle: m.Swizzle, L2Promotion: m.L2Promotion, OobNan: m.OOBNaN}
	}
	for _, f := range a.Fields {
		out.Fields = append(out.Fields, &dispatchv1.StructField{Offset: f.Offset, Size: f.Size, Value: argToProto(f.Arg)})
	}
	return out
}

// argFromProto returns the core form of a launch argument; a struct's
// fields are read one level deep (a field is a scalar or an address: the
// host refuses any other).
func argFromProto(a *dispatchv1.LaunchArg, fields bool) core.Arg {
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

// StepRequestFromProto returns the core form of r: the server makes the
// step's plan request (core.StepRequest.PlanRequest), which checks the
// rest. The error wraps core.ErrInvalidRequest.
func StepRequestFromProto(r *dispatchv1.PlanStepRequest) (core.StepRequest, error) {
	var out core.StepRequest
	if r == nil {
		return out, core.NewFieldError("request", "missing")
	}
	m, mode := core.Method(r.GetMethod()), core.ForwardMode(r.GetMode())
	switch {
	case r.GetMethod() < 0 || r.GetMethod() > 255 || !m.Valid():
		return out, core.NewFieldError("method", fmt.Sprintf("unknown method %d", int32(r.GetMethod())))
	case r.GetMode() < 0 || r.GetMode() > 255 || !mode.Valid():
		return out, core.NewFieldError("mode", fmt.Sprintf("unknown forward mode %d", int32(r.GetMode())))
	case r.GetBackend() == "" || len(r.GetBackend()) > core.MaxBackendNameLen:
		return out, core.NewFieldError("backend", "must be a name of 1 to 256 bytes")
	}
	b := r.GetBatch()
	if len(b.GetSeqLens()) > MaxPlanBatch || len(b.GetQLens()) > MaxPlanBatch {
		return out, core.NewFieldError("batch.seq_lens", fmt.Sprintf("%d and %d lengths: at most %d", len(b.GetSeqLens()), len(b.GetQLens()), MaxPlanBatch))
	}
	if err := checkText("pool.kv_dtype", r.GetPool().GetKvDtype(), MaxDTypeLen); err != nil {
		return out, err
	}
	dev, err := DeviceFromProto(r.GetDevice(), "device")
	if err != nil {
		return out, err
	}
	md, p := r.GetModel(), r.GetPool()
	return core.StepRequest{
		Backend: r.GetBackend(), Mode: mode, Method: m, Device: dev,
		Model: core.StepModel{Heads: int(md.GetHeads()), KVLoraRank: int(md.GetKvLoraRank()), QKRopeHeadDim: int(md.GetQkRopeHeadDim()),
			QKNopeHeadDim: int(md.GetQkNopeHeadDim()), VHeadDim: int(md.GetVHeadDim()), SoftmaxScale: md.GetSoftmaxScale(), IndexTopK: int(md.GetIndexTopk())},
		Pool: core.StepPool{PageSize: int(p.GetPageSize()), Slots: p.GetSlots(), MaxTokens: p.GetMaxTokens(), RowWidth: p.GetRowWidth(),
			ContextLen: p.GetContextLen(), KVDType: p.GetKvDtype()},
		Batch: core.StepBatch{Size: int(b.GetSize()), QueryTokens: int(b.GetQueryTokens()), Graph: b.GetGraph(),
			SeqLens: b.GetSeqLens(), QLens: b.GetQLens(), ChunkCapacity: int(min(b.GetChunkCapacity(), math.MaxInt32)), PrefixChunk: b.GetPrefixChunk()},
		QuerySplit: r.GetQuerySplit(),
	}, nil
}

// StepRequestToProto returns the engine API's form of s.
func StepRequestToProto(s *core.StepRequest) *dispatchv1.PlanStepRequest {
	m, p, b := s.Model, s.Pool, s.Batch
	return &dispatchv1.PlanStepRequest{
		Backend: s.Backend, Mode: dispatchv1.ForwardMode(s.Mode), Method: dispatchv1.Method(s.Method), Device: DeviceToProto(s.Device),
		Model: &dispatchv1.StepModel{Heads: int32(m.Heads), KvLoraRank: int32(m.KVLoraRank), QkRopeHeadDim: int32(m.QKRopeHeadDim),
			QkNopeHeadDim: int32(m.QKNopeHeadDim), VHeadDim: int32(m.VHeadDim), SoftmaxScale: m.SoftmaxScale, IndexTopk: int32(m.IndexTopK)},
		Pool: &dispatchv1.StepPool{PageSize: int32(p.PageSize), Slots: p.Slots, MaxTokens: p.MaxTokens, RowWidth: p.RowWidth,
			ContextLen: p.ContextLen, KvDtype: p.KVDType},
		Batch: &dispatchv1.StepBatch{Size: int32(b.Size), QueryTokens: int32(b.QueryTokens), Graph: b.Graph,
			SeqLens: b.SeqLens, QLens: b.QLens, ChunkCapacity: int64(b.ChunkCapacity), PrefixChunk: b.PrefixChunk},
		QuerySplit: s.QuerySplit,
	}
}

// StepPlanToProto returns the engine API's form of p, the plan carrying
// its key.
func StepPlanToProto(p *core.StepPlan) *dispatchv1.PlanStepResponse {
	plan := PlanToProto(p.Plan)
	plan.Key = p.Key.String()
	return &dispatchv1.PlanStepResponse{Request: PlanRequestToProto(&p.Request), Plan: plan,
		MaxSeqLen: p.MaxSeqLen, PagesPerRequest: p.PagesPerRequest}
}

// StepPlanFromProto returns the core form of p; a plan without a key of 64
// hex digits is an error wrapping core.ErrProtocol.
func StepPlanFromProto(p *dispatchv1.PlanStepResponse) (*core.StepPlan, error) {
	req, err := PlanRequestFromProto(p.GetRequest())
	if err != nil {
		return nil, fmt.Errorf("%w: plan step: %w", core.ErrProtocol, err)
	}
	plan, err := PlanFromProto(p.GetPlan())
	if err != nil {
		return nil, err
	}
	out := &core.StepPlan{Request: req, Plan: plan, MaxSeqLen: p.GetMaxSeqLen(), PagesPerRequest: p.GetPagesPerRequest()}
	k, err := hex.DecodeString(p.GetPlan().GetKey())
	if err != nil || len(k) != len(out.Key) {
		return nil, fmt.Errorf("%w: plan step: the plan's key %q is not %d hex digits", core.ErrProtocol, p.GetPlan().GetKey(), 2*len(out.Key))
	}
	copy(out.Key[:], k)
	return out, nil
}
