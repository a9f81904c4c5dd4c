package wire

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
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

// MethodToProto returns the protobuf enum value of m.
func MethodToProto(m core.Method) pb.Method { return pb.Method(m) }

// MethodFromProto returns the core method of m; an unknown value, such as
// one from a newer protocol, is an error wrapping core.ErrProtocol.
func MethodFromProto(m pb.Method) (core.Method, error) {
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

// RequestToProto returns the protobuf form of r.
func RequestToProto(r *core.Request) *pb.Request {
	out := &pb.Request{}
	requestToProto(r, out)
	return out
}

func requestToProto(r *core.Request, out *pb.Request) {
	out.Backend = r.Backend
	out.Layer = &pb.Layer{
		ChunkedPrefixCacheThreshold: r.Layer.ChunkedPrefixCacheThreshold,
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
		DsaUseMha:              r.Runtime.DSAUseMHA,
		TwoBatchOverlap:        r.Runtime.TwoBatchOverlap,
	}
}

// RequestFromProto returns the core form of r, validated: a plugin's server
// side must not trust what arrives. The error wraps core.ErrInvalidRequest.
func RequestFromProto(r *pb.Request) (core.Request, error) {
	var out core.Request
	if r == nil {
		return out, core.NewFieldError("request", "missing")
	}
	out.Backend = r.GetBackend()
	l := r.GetLayer()
	out.Layer = core.Layer{
		ChunkedPrefixCacheThreshold: l.GetChunkedPrefixCacheThreshold(),
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
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}

func knownLens(v []int64, known bool) []int64 {
	if !known {
		return nil
	}
	if v == nil {
		return []int64{}
	}
	return v
}

// DescriptionToProto returns the protobuf form of d.
func DescriptionToProto(d *core.Description) *pb.DescribeResponse {
	out := &pb.DescribeResponse{
		Name:            d.Name,
		Version:         d.Version,
		ProtocolVersion: int32(d.ProtocolVersion),
	}
	for _, h := range d.Handlers {
		ph := &pb.Handler{
			Name:       h.Name,
			AliasOf:    h.AliasOf,
			Deprecated: h.Deprecated,
			Reads: &pb.Reads{
				Facts:            factsToProto(h.Reads.Facts),
				PrefixSumAtLeast: h.Reads.PrefixSumAtLeast,
				SeqSumAtMost:     h.Reads.SeqSumAtMost,
			},
		}
		for _, m := range h.Methods {
			ph.Methods = append(ph.Methods, MethodToProto(m))
		}
		for _, hw := range h.Hardware {
			ph.Hardware = append(ph.Hardware, hardwareToProto(hw))
		}
		out.Handlers = append(out.Handlers, ph)
	}
	return out
}

// DescriptionFromProto returns the core form of d. A handler whose reads
// name a fact unknown to this host gets core.AllFacts plus the unknown
// marker, so that it is never cached; an unknown method is an error.
func DescriptionFromProto(d *pb.DescribeResponse) (*core.Description, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: empty description", core.ErrProtocol)
	}
	out := &core.Description{
		Name:            d.GetName(),
		Version:         d.GetVersion(),
		ProtocolVersion: int(d.GetProtocolVersion()),
	}
	for _, h := range d.GetHandlers() {
		if h.GetName() == "" {
			return nil, fmt.Errorf("%w: handler with an empty name", core.ErrProtocol)
		}
		facts, ok := factsFromProto(h.GetReads().GetFacts())
		if !ok {
			facts = core.AllFacts | unknownFact
		}
		ch := core.HandlerInfo{
			Name:       h.GetName(),
			AliasOf:    h.GetAliasOf(),
			Deprecated: h.GetDeprecated(),
			Reads: core.Reads{
				Facts:            facts,
				PrefixSumAtLeast: h.GetReads().GetPrefixSumAtLeast(),
				SeqSumAtMost:     h.GetReads().GetSeqSumAtMost(),
			},
		}
		for _, m := range h.GetMethods() {
			cm, err := MethodFromProto(m)
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

func hardwareToProto(h core.Hardware) *pb.Hardware {
	out := &pb.Hardware{
		MinCapability: int32(h.MinCapability),
		MaxCapability: int32(h.MaxCapability),
		Archs:         h.Archs,
		NeedsAmx:      h.NeedsAMX,
	}
	for _, p := range h.Platforms {
		out.Platforms = append(out.Platforms, pb.Platform(p))
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
	}
	for _, p := range h.GetPlatforms() {
		cp, err := platformFromProto(p)
		if err != nil || cp == core.PlatformUnset {
			cp = core.Platform(255)
		}
		out.Platforms = append(out.Platforms, cp)
	}
	return out
}

// HostInfoToProto returns the protobuf form of info.
func HostInfoToProto(info core.HostInfo) *pb.HostInfo {
	return &pb.HostInfo{
		Platform:          pb.Platform(info.Platform),
		ComputeCapability: int32(info.ComputeCapability),
		Archs:             info.Archs,
		Amx:               info.AMX,
	}
}

// HostInfoFromProto returns the core form of info.
func HostInfoFromProto(info *pb.HostInfo) (core.HostInfo, error) {
	p, err := platformFromProto(info.GetPlatform())
	if err != nil {
		return core.HostInfo{}, err
	}
	return core.HostInfo{
		Platform:          p,
		ComputeCapability: int(info.GetComputeCapability()),
		Archs:             info.GetArchs(),
		AMX:               info.GetAmx(),
	}, nil
}
