package wire

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/protobuf/proto"
)

// The enums of core and of pluginv1 share their numbers; these converters
// are the one place that relies on it, and convert_test.go checks it.

func modeToProto(m core.ForwardMode) pb.ForwardMode { return pb.ForwardMode(m) }

func modeFromProto(m pb.ForwardMode) (core.ForwardMode, error) {
	cm := core.ForwardMode(m)
	if m < 0 || m > 255 || !cm.Valid() {
		return 0, core.NewFieldError("forward_mode", fmt.Sprintf("unknown mode %d", int32(m)))
	}
	return cm, nil
}

// methodToProto returns the protobuf enum value of m.
func methodToProto(m core.Method) pb.Method { return pb.Method(m) }

// methodFromProto returns the core method of m; an unknown value, such as
// one from a newer protocol, is an error wrapping core.ErrProtocol.
func methodFromProto(m pb.Method) (core.Method, error) {
	cm := core.Method(m)
	if m < 0 || m > 255 || !cm.Valid() {
		return 0, fmt.Errorf("%w: unknown method %d", core.ErrProtocol, int32(m))
	}
	return cm, nil
}

func platformFromProto(p pb.Platform) (core.Platform, error) {
	cp := core.Platform(p)
	if p < 0 || p > 255 || !cp.Valid() {
		return 0, core.NewFieldError("runtime.platform", fmt.Sprintf("unknown platform %d", int32(p)))
	}
	return cp, nil
}

// factToProto maps core's Fact bits (bit i) to enum values (i+1).
func factsToProto(f core.Fact) []pb.Fact {
	var out []pb.Fact
	for i := 0; f>>i != 0; i++ {
		if f&(1<<i) != 0 {
			out = append(out, pb.Fact(i+1))
		}
	}
	return out
}

// factsFromProto returns the facts; ok is false when one is unknown to
// this version of core, in which case answers must not be cached.
func factsFromProto(fs []pb.Fact) (f core.Fact, ok bool) {
	ok = true
	for _, x := range fs {
		// Range first: a shift by a negative count panics.
		if x <= 0 || x > 32 {
			ok = false
			continue
		}
		bit := core.Fact(1) << (int(x) - 1)
		if bit&core.AllFacts == 0 {
			ok = false
			continue
		}
		f |= bit
	}
	return f, ok
}

// requestToProto returns the protobuf form of r.
func requestToProto(r *core.Request) *pb.Request {
	out := &pb.Request{}
	fillRequestProto(r, out)
	return out
}

func fillRequestProto(r *core.Request, out *pb.Request) {
	out.Backend = r.Backend
	out.Layer = &pb.Layer{
		ChunkedPrefixCacheThreshold: proto.Int64(r.Layer.ChunkedPrefixCacheThreshold),
		DisableChunkedPrefixCache:   r.Layer.DisableChunkedPrefixCache,
		FlashinferMlaDisableRagged:  r.Layer.FlashinferMLADisableRagged,
		RocmFusedDecodeMla:          r.Layer.ROCmFusedDecodeMLA,
		UseDsa:                      r.Layer.UseDSA,
		FusedQkvAProjWithMqa:        r.Layer.FusedQKVAProjWithMQA,
		IntelAmx:                    r.Layer.IntelAMX,
	}
	out.Batch = &pb.Batch{
		ForwardMode:           modeToProto(r.Batch.Mode),
		ExtendPrefixLens:      r.Batch.ExtendPrefixLens,
		ExtendPrefixLensKnown: r.Batch.ExtendPrefixLens != nil,
		SeqLens:               r.Batch.SeqLens,
		SeqLensKnown:          r.Batch.SeqLens != nil,
		MaxChunkCapacity:      r.Batch.MaxChunkCapacity,
		MlaPrefillCp:          r.Batch.MLAPrefillCP,
	}
	out.Runtime = &pb.Runtime{
		Platform:               pb.Platform(r.Runtime.Platform),
		PiecewiseCudaGraph:     r.Runtime.PiecewiseCUDAGraph,
		BreakableCudaGraph:     r.Runtime.BreakableCUDAGraph,
		DeterministicInference: r.Runtime.DeterministicInference,
		DsaUseMha:              dsaUseMHAToProto(&r.Runtime),
		TwoBatchOverlap:        r.Runtime.TwoBatchOverlap,
		ComputeCapability:      int32(r.Runtime.ComputeCapability),
		KvCacheDtype:           r.Runtime.KVCacheDType,
		DsaUseMhaSet:           r.Runtime.DSAUseMHASet,
	}
}

// dsaUseMHAToProto is runtime.dsa_use_mha, present when it was given.
func dsaUseMHAToProto(r *core.Runtime) *bool {
	if !r.DSAUseMHAGiven() {
		return nil
	}
	return proto.Bool(r.DSAUseMHA)
}

// requestFromProto returns the core form of r, validated: a plugin's server
// side must not trust what arrives. The error wraps core.ErrInvalidRequest.
func requestFromProto(r *pb.Request) (core.Request, error) {
	var out core.Request
	if r == nil {
		return out, core.NewFieldError("request", "missing")
	}
	out.Backend = r.GetBackend()
	l := r.GetLayer()
	threshold := int64(core.DefaultChunkedPrefixCacheThreshold)
	if l != nil && l.ChunkedPrefixCacheThreshold != nil {
		threshold = l.GetChunkedPrefixCacheThreshold()
	}
	out.Layer = core.Layer{
		ChunkedPrefixCacheThreshold: threshold,
		DisableChunkedPrefixCache:   l.GetDisableChunkedPrefixCache(),
		FlashinferMLADisableRagged:  l.GetFlashinferMlaDisableRagged(),
		ROCmFusedDecodeMLA:          l.GetRocmFusedDecodeMla(),
		UseDSA:                      l.GetUseDsa(),
		FusedQKVAProjWithMQA:        l.GetFusedQkvAProjWithMqa(),
		IntelAMX:                    l.GetIntelAmx(),
	}
	b := r.GetBatch()
	mode, err := modeFromProto(b.GetForwardMode())
	if err != nil {
		return out, err
	}
	out.Batch = core.Batch{
		Mode:             mode,
		ExtendPrefixLens: knownLens(b.GetExtendPrefixLens(), b.GetExtendPrefixLensKnown()),
		SeqLens:          knownLens(b.GetSeqLens(), b.GetSeqLensKnown()),
		MaxChunkCapacity: b.GetMaxChunkCapacity(),
		MLAPrefillCP:     b.GetMlaPrefillCp(),
	}
	rt := r.GetRuntime()
	platform, err := platformFromProto(rt.GetPlatform())
	if err != nil {
		return out, err
	}
	out.Runtime = core.Runtime{
		Platform:               platform,
		PiecewiseCUDAGraph:     rt.GetPiecewiseCudaGraph(),
		BreakableCUDAGraph:     rt.GetBreakableCudaGraph(),
		DeterministicInference: rt.GetDeterministicInference(),
		DSAUseMHA:              rt.GetDsaUseMha(),
		TwoBatchOverlap:        rt.GetTwoBatchOverlap(),
		ComputeCapability:      int(rt.GetComputeCapability()),
		KVCacheDType:           rt.GetKvCacheDtype(),
		// dsa_use_mha present, or dsa_use_mha_set (a sender without
		// presence on dsa_use_mha), says it was given; a host older than
		// both sends only dsa_use_mha, and true still counts as given
		// (core.Runtime.DSAUseMHAGiven).
		DSAUseMHASet: (rt != nil && rt.DsaUseMha != nil) || rt.GetDsaUseMhaSet(),
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}

// knownLens is a length list as core holds it: nil when not known. A
// non-empty list is known whatever its flag says; an empty one is known
// (an empty batch) only when the flag says so.
func knownLens(v []int64, known bool) []int64 {
	if !known && len(v) == 0 {
		return nil
	}
	if v == nil {
		return []int64{}
	}
	return v
}

// descriptionToProto returns the protobuf form of d.
func descriptionToProto(d *core.Description) *pb.DescribeResponse {
	out := &pb.DescribeResponse{
		Name:            d.Name,
		Version:         d.Version,
		ProtocolVersion: int32(d.ProtocolVersion),
		DeviceCode:      d.DeviceCode,
		Vendor:          d.Vendor,
	}
	for _, h := range d.Handlers {
		ph := &pb.Handler{
			Name:       h.Name,
			AliasOf:    h.AliasOf,
			Deprecated: h.Deprecated,
			Reads:      readsToProto(&h.Reads),
			Kernels:    kernelsToProto(h.Kernels),
		}
		for _, m := range h.Methods {
			ph.Methods = append(ph.Methods, methodToProto(m))
		}
		for _, hw := range h.Hardware {
			ph.Hardware = append(ph.Hardware, hardwareToProto(hw))
		}
		out.Handlers = append(out.Handlers, ph)
	}
	return out
}

// descriptionFromProto returns the core form of d. A handler whose reads
// name a fact unknown to this host gets core.AllFacts plus the unknown
// marker, so that it is never cached; an unknown method is an error.
func descriptionFromProto(d *pb.DescribeResponse) (*core.Description, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: empty description", core.ErrProtocol)
	}
	out := &core.Description{
		Name:            d.GetName(),
		Version:         d.GetVersion(),
		ProtocolVersion: int(d.GetProtocolVersion()),
		DeviceCode:      d.GetDeviceCode(),
		Vendor:          d.GetVendor(),
	}
	for _, h := range d.GetHandlers() {
		if h.GetName() == "" {
			return nil, fmt.Errorf("%w: handler with an empty name", core.ErrProtocol)
		}
		ch := core.HandlerInfo{
			Name:       h.GetName(),
			AliasOf:    h.GetAliasOf(),
			Deprecated: h.GetDeprecated(),
			Reads:      readsFromProto(h.GetReads()),
		}
		kernels, err := kernelsFromProto(h.GetKernels())
		if err != nil {
			return nil, fmt.Errorf("handler %q: %w", h.GetName(), err)
		}
		ch.Kernels = kernels
		for _, m := range h.GetMethods() {
			cm, err := methodFromProto(m)
			if err != nil {
				return nil, fmt.Errorf("handler %q: %w", h.GetName(), err)
			}
			ch.Methods = append(ch.Methods, cm)
		}
		for _, hw := range h.GetHardware() {
			ch.Hardware = append(ch.Hardware, hardwareFromProto(hw))
		}
		out.Handlers = append(out.Handlers, ch)
	}
	return out, nil
}

// unknownFact is a bit outside core.AllFacts: Reads holding it are not
// Cacheable.
const unknownFact = core.Fact(1) << 31

// readsToProto returns the protobuf form of r. Declared quantities add
// FACT_QUANTITIES to the facts, so that a host older than them, which
// does not know that fact, never caches by reads it cannot see.
func readsToProto(r *core.Reads) *pb.Reads {
	out := &pb.Reads{
		Facts:            factsToProto(r.Facts),
		PrefixSumAtLeast: r.PrefixSumAtLeast,
		SeqSumAtMost:     r.SeqSumAtMost,
		MaxSeqLenAtMost:  r.MaxSeqLenAtMost,
	}
	if len(r.Quantities) > 0 {
		out.Facts = append(out.Facts, pb.Fact_FACT_QUANTITIES)
	}
	for _, q := range r.Quantities {
		out.Quantities = append(out.Quantities, &pb.QuantityRead{Quantity: pb.Quantity(q.Quantity), At: q.At})
	}
	for _, c := range r.Conditions {
		when := pb.Fact_FACT_UNSPECIFIED
		if fs := factsToProto(c.When); len(fs) == 1 {
			when = fs[0]
		}
		out.Conditions = append(out.Conditions, &pb.ReadsCondition{When: when, Reads: readsToProto(&c.Reads)})
	}
	return out
}

// readsFromProto returns the core form of r. A fact unknown to this host
// gives core.AllFacts plus the unknown marker, so that the handler is
// never cached; an unknown quantity stays as it is, which Validate
// refuses likewise. A condition whose fact is unknown is left out.
func readsFromProto(r *pb.Reads) core.Reads {
	var fs []pb.Fact
	for _, f := range r.GetFacts() {
		if f != pb.Fact_FACT_QUANTITIES {
			fs = append(fs, f)
		}
	}
	facts, ok := factsFromProto(fs)
	if !ok {
		facts = core.AllFacts | unknownFact
	}
	out := core.Reads{
		Facts:            facts,
		PrefixSumAtLeast: r.GetPrefixSumAtLeast(),
		SeqSumAtMost:     r.GetSeqSumAtMost(),
		MaxSeqLenAtMost:  r.GetMaxSeqLenAtMost(),
	}
	for _, q := range r.GetQuantities() {
		cq := core.Quantity(0) // unknown: not Valid
		if n := q.GetQuantity(); n > 0 && n < 256 {
			cq = core.Quantity(n)
		}
		out.Quantities = append(out.Quantities, core.Read{Quantity: cq, At: q.GetAt()})
	}
	for _, c := range r.GetConditions() {
		// A condition on a fact this host does not know is left out: the
		// whole reads key those requests, which is correct for them too.
		when, ok := factsFromProto([]pb.Fact{c.GetWhen()})
		if !ok {
			continue
		}
		out.Conditions = append(out.Conditions, core.ReadsCondition{When: when, Reads: readsFromProto(c.GetReads())})
	}
	return out
}

func hardwareToProto(h core.Hardware) *pb.Hardware {
	out := &pb.Hardware{
		MinCapability: int32(h.MinCapability),
		MaxCapability: int32(h.MaxCapability),
		Archs:         h.Archs,
		NeedsAmx:      h.NeedsAMX,
		PlatformName:  h.PlatformName,
	}
	for _, p := range h.Platforms {
		out.Platforms = append(out.Platforms, pb.Platform(p))
	}
	for _, d := range h.Devices {
		pd := &pb.PCIDevice{VendorId: uint32(d.VendorID), Drivers: d.Drivers}
		for _, id := range d.DeviceIDs {
			pd.DeviceIds = append(pd.DeviceIds, uint32(id))
		}
		out.Devices = append(out.Devices, pd)
	}
	return out
}

// hardwareFromProto keeps a platform unknown to this host as a value no
// host matches, so that the entry constrains rather than vanishes.
func hardwareFromProto(h *pb.Hardware) core.Hardware {
	out := core.Hardware{
		MinCapability: int(h.GetMinCapability()),
		MaxCapability: int(h.GetMaxCapability()),
		Archs:         h.GetArchs(),
		NeedsAMX:      h.GetNeedsAmx(),
		PlatformName:  h.GetPlatformName(),
	}
	for _, p := range h.GetPlatforms() {
		cp, err := platformFromProto(p)
		if err != nil || cp == core.PlatformUnset {
			cp = core.Platform(255)
		}
		out.Platforms = append(out.Platforms, cp)
	}
	for _, d := range h.GetDevices() {
		out.Devices = append(out.Devices, pciDeviceFromProto(d))
	}
	return out
}

// pciDeviceFromProto keeps an ID past 16 bits as a vendor no device has
// (0xffff, the PCI bus's "no device"), so that the entry constrains rather
// than matches another device.
func pciDeviceFromProto(d *pb.PCIDevice) core.PCIDevice {
	id16 := func(v uint32) uint16 {
		if v > 0xffff {
			return 0xffff
		}
		return uint16(v)
	}
	out := core.PCIDevice{VendorID: id16(d.GetVendorId()), Drivers: d.GetDrivers()}
	for _, id := range d.GetDeviceIds() {
		out.DeviceIDs = append(out.DeviceIDs, id16(id))
	}
	return out
}

// hostInfoToProto returns the protobuf form of info.
func hostInfoToProto(info core.HostInfo) *pb.HostInfo {
	out := &pb.HostInfo{
		Platform:          pb.Platform(info.Platform),
		ComputeCapability: int32(info.ComputeCapability),
		Archs:             info.Archs,
		Amx:               info.AMX,
	}
	for _, d := range info.Devices {
		out.Devices = append(out.Devices, &pb.HostDevice{
			VendorId: uint32(d.VendorID), DeviceId: uint32(d.DeviceID), Driver: d.Driver, PciAddress: d.PCIAddress,
		})
	}
	return out
}

// hostInfoFromProto returns the core form of info.
func hostInfoFromProto(info *pb.HostInfo) (core.HostInfo, error) {
	p, err := platformFromProto(info.GetPlatform())
	if err != nil {
		return core.HostInfo{}, err
	}
	out := core.HostInfo{
		Platform:          p,
		ComputeCapability: int(info.GetComputeCapability()),
		Archs:             info.GetArchs(),
		AMX:               info.GetAmx(),
	}
	for _, d := range info.GetDevices() {
		if d.GetVendorId() > 0xffff || d.GetDeviceId() > 0xffff {
			return core.HostInfo{}, core.NewFieldError("host.devices", fmt.Sprintf("PCI ID %#x:%#x is wider than 16 bits", d.GetVendorId(), d.GetDeviceId()))
		}
		out.Devices = append(out.Devices, core.HostDevice{
			VendorID: uint16(d.GetVendorId()), DeviceID: uint16(d.GetDeviceId()), Driver: d.GetDriver(), PCIAddress: d.GetPciAddress(),
		})
	}
	return out, nil
}

// kernelsToProto returns the protobuf form of a kernel catalog.
func kernelsToProto(ks []core.Kernel) []*pb.Kernel {
	var out []*pb.Kernel
	for _, k := range ks {
		pk := &pb.Kernel{
			Name:         k.Name,
			Library:      k.Library,
			Method:       methodToProto(k.Method),
			Dtypes:       k.DTypes,
			CudaGraph:    k.CUDAGraph,
			Sparse:       k.Sparse,
			PrefixChunks: k.PrefixChunks,
			QuerySplit:   k.QuerySplit,
		}
		for _, d := range k.HeadDims {
			pk.HeadDims = append(pk.HeadDims, int32(d))
		}
		for _, p := range k.PageSizes {
			pk.PageSizes = append(pk.PageSizes, int32(p))
		}
		for _, hw := range k.Hardware {
			pk.Hardware = append(pk.Hardware, hardwareToProto(hw))
		}
		out = append(out, pk)
	}
	return out
}

// kernelsFromProto returns the core form of a kernel catalog; a kernel of
// an unknown method is an error wrapping core.ErrProtocol.
func kernelsFromProto(ks []*pb.Kernel) ([]core.Kernel, error) {
	var out []core.Kernel
	for _, pk := range ks {
		m, err := methodFromProto(pk.GetMethod())
		if err != nil {
			return nil, fmt.Errorf("kernel %q: %w", pk.GetName(), err)
		}
		k := core.Kernel{
			Name:         pk.GetName(),
			Library:      pk.GetLibrary(),
			Method:       m,
			DTypes:       pk.GetDtypes(),
			CUDAGraph:    pk.GetCudaGraph(),
			Sparse:       pk.GetSparse(),
			PrefixChunks: pk.GetPrefixChunks(),
			QuerySplit:   pk.GetQuerySplit(),
		}
		for _, d := range pk.GetHeadDims() {
			k.HeadDims = append(k.HeadDims, int(d))
		}
		for _, p := range pk.GetPageSizes() {
			k.PageSizes = append(k.PageSizes, int(p))
		}
		for _, hw := range pk.GetHardware() {
			k.Hardware = append(k.Hardware, hardwareFromProto(hw))
		}
		out = append(out, k)
	}
	return out, nil
}

// Limits of a kernel request, checked before a plugin maps anything.
const (
	// MaxKernelTensors is the most tensor references one request holds.
	MaxKernelTensors = 64
	// MaxKernelBatch is the most requests (seq_lens entries) of a kernel
	// call.
	MaxKernelBatch = 1 << 16
	// maxKernelDim bounds every dimension and shape entry.
	maxKernelDim = 1 << 30
)

// kernelRequestToProto returns the protobuf form of req: the buffer's path
// and size, never its memory.
func kernelRequestToProto(req *core.KernelRequest) *pb.RunKernelRequest {
	d := req.Dims
	out := &pb.RunKernelRequest{
		Backend: req.Backend,
		Method:  methodToProto(req.Method),
		Dims: &pb.KernelDims{
			Heads: int32(d.Heads), KvLoraRank: int32(d.KVLoraRank), QkNopeHeadDim: int32(d.QKNopeHeadDim),
			QkRopeHeadDim: int32(d.QKRopeHeadDim), VHeadDim: int32(d.VHeadDim), SoftmaxScale: d.SoftmaxScale,
			RopeBase: d.RopeBase, ChunkCapacity: int32(d.ChunkCapacity), TopK: int32(d.TopK),
		},
		SeqLens:    req.SeqLens,
		PrefixLens: req.PrefixLens,
		Buffer:     &pb.SharedBuffer{Path: req.Buffer.Path, Size: req.Buffer.Size},
	}
	for _, t := range req.Tensors {
		out.Tensors = append(out.Tensors, &pb.TensorRef{Name: t.Name, Offset: t.Offset, Shape: t.Shape, Dtype: t.DType})
	}
	return out
}

// kernelRequestFromProto returns the core form of r, checked: a method the
// protocol knows, dimensions and lengths in range, and every tensor inside
// the buffer. The kernel checks the rest (shapes against dimensions). The
// error wraps core.ErrInvalidRequest.
func kernelRequestFromProto(r *pb.RunKernelRequest) (core.KernelRequest, error) {
	var out core.KernelRequest
	if r == nil {
		return out, core.NewFieldError("request", "missing")
	}
	m := core.Method(r.GetMethod())
	if r.GetMethod() < 0 || r.GetMethod() > 255 || !m.Valid() {
		return out, core.NewFieldError("method", fmt.Sprintf("unknown method %d", int32(r.GetMethod())))
	}
	d := r.GetDims()
	out = core.KernelRequest{
		Backend: r.GetBackend(),
		Method:  m,
		Dims: core.KernelDims{
			Heads: int(d.GetHeads()), KVLoraRank: int(d.GetKvLoraRank()), QKNopeHeadDim: int(d.GetQkNopeHeadDim()),
			QKRopeHeadDim: int(d.GetQkRopeHeadDim()), VHeadDim: int(d.GetVHeadDim()), SoftmaxScale: d.GetSoftmaxScale(),
			RopeBase: d.GetRopeBase(), ChunkCapacity: int(d.GetChunkCapacity()), TopK: int(d.GetTopK()),
		},
		SeqLens:    r.GetSeqLens(),
		PrefixLens: r.GetPrefixLens(),
		Buffer:     core.SharedBuffer{Path: r.GetBuffer().GetPath(), Size: r.GetBuffer().GetSize()},
	}
	if out.Backend == "" || len(out.Backend) > core.MaxBackendNameLen {
		return out, core.NewFieldError("backend", "must be a name of 1 to 256 bytes")
	}
	if n := len(out.SeqLens); n == 0 || n > MaxKernelBatch || len(out.PrefixLens) != n {
		return out, core.NewFieldError("seq_lens", fmt.Sprintf("has %d entries and prefix_lens %d: want the same number, 1 to %d", n, len(out.PrefixLens), MaxKernelBatch))
	}
	if out.Buffer.Path == "" || out.Buffer.Size <= 0 {
		return out, core.NewFieldError("buffer", "needs a path and a positive size")
	}
	if n := len(r.GetTensors()); n == 0 || n > MaxKernelTensors {
		return out, core.NewFieldError("tensors", fmt.Sprintf("has %d entries, want 1 to %d", n, MaxKernelTensors))
	}
	for i, t := range r.GetTensors() {
		field := fmt.Sprintf("tensors[%d]", i)
		if t.GetDtype() != "float32" && t.GetDtype() != "int32" {
			return out, core.NewFieldError(field+".dtype", fmt.Sprintf("unknown dtype %q (want float32 or int32)", t.GetDtype()))
		}
		elems := int64(1)
		for _, x := range t.GetShape() {
			if x < 0 || x > maxKernelDim {
				return out, core.NewFieldError(field+".shape", fmt.Sprintf("dimension %d is out of [0, %d]", x, maxKernelDim))
			}
			elems *= x
			if elems > out.Buffer.Size {
				return out, core.NewFieldError(field+".shape", "is larger than the buffer")
			}
		}
		if t.GetOffset() < 0 || t.GetOffset()%4 != 0 || t.GetOffset() > out.Buffer.Size-4*elems {
			return out, core.NewFieldError(field+".offset", fmt.Sprintf("%d: %d bytes at it do not fit a buffer of %d, or it is not 4-byte aligned", t.GetOffset(), 4*elems, out.Buffer.Size))
		}
		out.Tensors = append(out.Tensors, core.TensorRef{Name: t.GetName(), Offset: t.GetOffset(), Shape: t.GetShape(), DType: t.GetDtype()})
	}
	return out, nil
}

// kernelResultToProto returns the protobuf form of res.
func kernelResultToProto(res *core.KernelResult) *pb.RunKernelResponse {
	return &pb.RunKernelResponse{
		Kernel: res.Kernel, Library: res.Library, Emulated: res.Emulated,
		TimeNs: res.TimeNS, Note: res.Note, Sparse: res.Sparse,
	}
}

// kernelResultFromProto returns the core form of r.
func kernelResultFromProto(r *pb.RunKernelResponse) *core.KernelResult {
	return &core.KernelResult{
		Kernel: r.GetKernel(), Library: r.GetLibrary(), Emulated: r.GetEmulated(),
		TimeNS: r.GetTimeNs(), Note: r.GetNote(), Sparse: r.GetSparse(),
	}
}
