package convert

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/grpcstatus"
	"google.golang.org/protobuf/proto"
)

// This file is the one place where core's types become the engine API's
// messages and back. The enums of core and of dispatchv1 share their
// numbers; convert_test.go checks it and round-trips every field.

// RequestToProto returns the engine API's form of r.
func RequestToProto(r *core.Request) *dispatchv1.Request {
	var dsaUseMHA *bool
	if r.Runtime.DSAUseMHAGiven() {
		dsaUseMHA = proto.Bool(r.Runtime.DSAUseMHA)
	}
	return &dispatchv1.Request{
		Backend: r.Backend,
		Layer: &dispatchv1.Layer{
			ChunkedPrefixCacheThreshold: proto.Int64(r.Layer.ChunkedPrefixCacheThreshold),
			DisableChunkedPrefixCache:   r.Layer.DisableChunkedPrefixCache,
			FlashinferMlaDisableRagged:  r.Layer.FlashinferMLADisableRagged,
			RocmFusedDecodeMla:          r.Layer.ROCmFusedDecodeMLA,
			UseDsa:                      r.Layer.UseDSA,
			FusedQkvAProjWithMqa:        r.Layer.FusedQKVAProjWithMQA,
			IntelAmx:                    r.Layer.IntelAMX,
		},
		Batch: &dispatchv1.Batch{
			ForwardMode:           dispatchv1.ForwardMode(r.Batch.Mode),
			ExtendPrefixLens:      r.Batch.ExtendPrefixLens,
			ExtendPrefixLensKnown: r.Batch.ExtendPrefixLens != nil,
			SeqLens:               r.Batch.SeqLens,
			SeqLensKnown:          r.Batch.SeqLens != nil,
			MaxChunkCapacity:      r.Batch.MaxChunkCapacity,
			MlaPrefillCp:          r.Batch.MLAPrefillCP,
		},
		Runtime: &dispatchv1.Runtime{
			Platform:               dispatchv1.Platform(r.Runtime.Platform),
			PiecewiseCudaGraph:     r.Runtime.PiecewiseCUDAGraph,
			BreakableCudaGraph:     r.Runtime.BreakableCUDAGraph,
			DeterministicInference: r.Runtime.DeterministicInference,
			DsaUseMha:              dsaUseMHA,
			TwoBatchOverlap:        r.Runtime.TwoBatchOverlap,
			ComputeCapability:      int32(r.Runtime.ComputeCapability),
			KvCacheDtype:           r.Runtime.KVCacheDType,
			DsaUseMhaSet:           r.Runtime.DSAUseMHASet,
		},
	}
}

// RequestFromProto returns the core form of r, with the defaults of the
// JSON dispatch format for what r leaves out, validated: the error wraps
// core.ErrInvalidRequest and names the field.
func RequestFromProto(r *dispatchv1.Request) (core.Request, error) {
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
	mode := core.ForwardMode(b.GetForwardMode())
	if m := b.GetForwardMode(); m < 0 || m > 255 || !mode.Valid() {
		return out, core.NewFieldError("forward_mode", fmt.Sprintf("unknown mode %d", int32(m)))
	}
	out.Batch = core.Batch{
		Mode:             mode,
		ExtendPrefixLens: knownLens(b.GetExtendPrefixLens(), b.GetExtendPrefixLensKnown()),
		SeqLens:          knownLens(b.GetSeqLens(), b.GetSeqLensKnown()),
		MaxChunkCapacity: b.GetMaxChunkCapacity(),
		MLAPrefillCP:     b.GetMlaPrefillCp(),
	}
	rt := r.GetRuntime()
	platform := core.Platform(rt.GetPlatform())
	if p := rt.GetPlatform(); p < 0 || p > 255 || !platform.Valid() {
		return out, core.NewFieldError("runtime.platform", fmt.Sprintf("unknown platform %d", int32(p)))
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
		// dsa_use_mha present, or dsa_use_mha_set (a client without
		// presence on dsa_use_mha), says it was given; true counts as
		// given too (core.Runtime.DSAUseMHAGiven).
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

// AnswerToProto returns the engine API's form of a decided answer.
func AnswerToProto(a core.Answer) *dispatchv1.Answer {
	return &dispatchv1.Answer{Method: dispatchv1.Method(a.Method), Handler: a.Handler, Plugin: a.Plugin, Fallback: a.Fallback}
}

// AnswerFromProto returns the answer of a, or its error: the error the
// server had, for which errors.Is holds as it did there (ErrorFromAnswer).
// A method this version does not know is an error wrapping
// core.ErrProtocol.
func AnswerFromProto(a *dispatchv1.Answer) (core.Answer, error) {
	if a.GetError() != "" || a.GetErrorCode() != dispatchv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return core.Answer{}, ErrorFromAnswer(a)
	}
	m := core.Method(a.GetMethod())
	if v := a.GetMethod(); v < 0 || v > 255 || !m.Valid() {
		return core.Answer{}, fmt.Errorf("%w: server answered an unknown method %d", core.ErrProtocol, int32(v))
	}
	return core.Answer{Method: m, Handler: a.GetHandler(), Plugin: a.GetPlugin(), Fallback: a.GetFallback()}, nil
}

// errorCode pairs an error code with the error it stands for.
type errorCode struct {
	code dispatchv1.ErrorCode
	err  error
}

// errorCodes is every error code but UNSPECIFIED and INTERNAL, in the
// order an error is classified: the first that errors.Is finds wins.
func errorCodes() []errorCode {
	return []errorCode{
		{dispatchv1.ErrorCode_ERROR_CODE_INVALID_REQUEST, core.ErrInvalidRequest},
		{dispatchv1.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND, core.ErrUnknownBackend},
		{dispatchv1.ErrorCode_ERROR_CODE_UNAVAILABLE, core.ErrUnavailable},
		{dispatchv1.ErrorCode_ERROR_CODE_REFUSED, core.ErrRefused},
		{dispatchv1.ErrorCode_ERROR_CODE_PROTOCOL, core.ErrProtocol},
		{dispatchv1.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, context.DeadlineExceeded},
		{dispatchv1.ErrorCode_ERROR_CODE_CANCELED, context.Canceled},
	}
}

// ErrorToAnswer returns the answer that carries err: its message, the code
// of the sentinel it wraps (INTERNAL for none), and the field a
// core.FieldError names.
func ErrorToAnswer(err error) *dispatchv1.Answer {
	out := &dispatchv1.Answer{Error: err.Error(), ErrorCode: dispatchv1.ErrorCode_ERROR_CODE_INTERNAL}
	for _, c := range errorCodes() {
		if errors.Is(err, c.err) {
			out.ErrorCode = c.code
			break
		}
	}
	var fe *core.FieldError
	if errors.As(err, &fe) {
		out.ErrorField = fe.Field
	}
	return out
}

// ErrorFromAnswer returns the error of an answer that carries one: a
// *core.FieldError when it names a field and its message is that error's,
// else an error with the server's message for which errors.Is finds the
// sentinel of its code. A server older than error codes sends the
// message only: the error then wraps no sentinel.
func ErrorFromAnswer(a *dispatchv1.Answer) error {
	msg := a.GetError()
	if f := a.GetErrorField(); f != "" && a.GetErrorCode() == dispatchv1.ErrorCode_ERROR_CODE_INVALID_REQUEST {
		if rest, ok := strings.CutPrefix(msg, f+": "); ok {
			return &core.FieldError{Field: f, Msg: rest}
		}
	}
	for _, c := range errorCodes() {
		if a.GetErrorCode() == c.code {
			return grpcstatus.Remote(c.err, msg)
		}
	}
	if msg == "" { // a code without a message
		msg = fmt.Sprintf("server error %s", a.GetErrorCode())
	}
	return grpcstatus.Remote(nil, msg)
}
