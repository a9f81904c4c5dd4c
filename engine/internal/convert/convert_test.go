package convert

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"google.golang.org/protobuf/proto"
)

// overTheWire marshals and unmarshals m, as a real connection does.
func overTheWire[M proto.Message](t *testing.T, m M, into M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal: %v", err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	return into
}

func TestRequestRoundTrip(t *testing.T) {
	full := core.Request{
		Backend: "flashinfer",
		Layer: core.Layer{ChunkedPrefixCacheThreshold: 4096, DisableChunkedPrefixCache: true, FlashinferMLADisableRagged: true,
			ROCmFusedDecodeMLA: true, UseDSA: true, FusedQKVAProjWithMQA: true, IntelAMX: true},
		Batch: core.Batch{Mode: core.ModeDLLMExtend, ExtendPrefixLens: []int64{0, 512}, SeqLens: []int64{1024, 2048},
			MaxChunkCapacity: 131072, MLAPrefillCP: true},
		Runtime: core.Runtime{Platform: core.PlatformHIP, PiecewiseCUDAGraph: true, BreakableCUDAGraph: true,
			DeterministicInference: true, DSAUseMHA: true, TwoBatchOverlap: true, DSAUseMHASet: true,
			ComputeCapability: 90, KVCacheDType: "fp8_e4m3"},
	}
	emptyLens := core.NewRequest("fa3", core.ModeExtend)
	emptyLens.Batch.ExtendPrefixLens, emptyLens.Batch.SeqLens = []int64{}, []int64{}
	zeroThreshold := core.NewRequest("fa3", core.ModeExtend)
	zeroThreshold.Layer.ChunkedPrefixCacheThreshold = 0
	givenFalse := core.NewRequest("dsa", core.ModeExtend)
	givenFalse.Runtime.DSAUseMHASet = true
	tests := map[string]core.Request{
		"minimal_nil_lens":   core.NewRequest("fa3", core.ModeDecode),
		"empty_lens_not_nil": emptyLens,
		"zero_threshold":     zeroThreshold,
		"dsa_use_mha_false":  givenFalse,
		"every_field":        full,
	}
	for p := core.PlatformUnset; p.Valid(); p++ {
		r := full
		r.Runtime.Platform = p
		tests["platform_"+p.String()] = r
	}
	for _, m := range core.ForwardModes() {
		tests["mode_"+m.String()] = core.NewRequest("x", m)
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := RequestFromProto(overTheWire(t, RequestToProto(&want), &dispatchv1.Request{}))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestRequestDefaults: a message that leaves fields out means what the
// JSON line that leaves them out means.
func TestRequestDefaults(t *testing.T) {
	got, err := RequestFromProto(&dispatchv1.Request{Backend: "fa3", Batch: &dispatchv1.Batch{ForwardMode: dispatchv1.ForwardMode_FORWARD_MODE_DECODE}})
	if err != nil {
		t.Fatal(err)
	}
	if want := core.NewRequest("fa3", core.ModeDecode); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// A client without presence on dsa_use_mha says a given false with
	// dsa_use_mha_set.
	got, err = RequestFromProto(&dispatchv1.Request{Backend: "dsa", Batch: &dispatchv1.Batch{ForwardMode: dispatchv1.ForwardMode_FORWARD_MODE_EXTEND},
		Runtime: &dispatchv1.Runtime{DsaUseMhaSet: true}})
	if err != nil || !got.Runtime.DSAUseMHAGiven() || got.Runtime.DSAUseMHA {
		t.Errorf("dsa_use_mha_set: %+v, %v", got.Runtime, err)
	}
}

func TestRequestFromProtoRejects(t *testing.T) {
	mode := func(m dispatchv1.ForwardMode) *dispatchv1.Batch { return &dispatchv1.Batch{ForwardMode: m} }
	for name, tc := range map[string]struct {
		in    *dispatchv1.Request
		field string
	}{
		"missing":          {nil, "request"},
		"no_mode":          {&dispatchv1.Request{Backend: "fa3"}, "forward_mode"},
		"unknown_mode":     {&dispatchv1.Request{Backend: "fa3", Batch: mode(99)}, "forward_mode"},
		"negative_mode":    {&dispatchv1.Request{Backend: "fa3", Batch: mode(-1)}, "forward_mode"},
		"unknown_platform": {&dispatchv1.Request{Backend: "fa3", Batch: mode(2), Runtime: &dispatchv1.Runtime{Platform: 77}}, "runtime.platform"},
		"negative_length":  {&dispatchv1.Request{Backend: "fa3", Batch: &dispatchv1.Batch{ForwardMode: 1, SeqLens: []int64{-5}}}, "seq_lens[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := RequestFromProto(tc.in)
			var fe *core.FieldError
			if !errors.Is(err, core.ErrInvalidRequest) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("got %v, want an invalid request naming %s", err, tc.field)
			}
		})
	}
}

// TestEnumParity checks, by name, that core's enums and dispatchv1's share
// their numbers, and that dispatchv1 has no value core lacks.
func TestEnumParity(t *testing.T) {
	for _, m := range core.ForwardModes() {
		if got := strings.TrimPrefix(dispatchv1.ForwardMode(m).String(), "FORWARD_MODE_"); got != m.String() {
			t.Errorf("mode %d: dispatchv1 %s, core %s", int(m), got, m)
		}
	}
	if got, want := len(dispatchv1.ForwardMode_name), len(core.ForwardModes())+1; got != want {
		t.Errorf("dispatchv1 ForwardMode values: got %d, want %d", got, want)
	}
	for _, m := range core.Methods() {
		if got := strings.TrimPrefix(dispatchv1.Method(m).String(), "METHOD_"); got != m.String() {
			t.Errorf("method %d: dispatchv1 %s, core %s", int(m), got, m)
		}
		a, err := AnswerFromProto(overTheWire(t, AnswerToProto(core.Answer{Method: m, Handler: "h", Plugin: "p", Fallback: "f"}), &dispatchv1.Answer{}))
		if err != nil || a != (core.Answer{Method: m, Handler: "h", Plugin: "p", Fallback: "f"}) {
			t.Errorf("answer of %s: %+v, %v", m, a, err)
		}
	}
	if got, want := len(dispatchv1.Method_name), len(core.Methods())+1; got != want {
		t.Errorf("dispatchv1 Method values: got %d, want %d", got, want)
	}
	n := 0
	for p := core.PlatformUnset; p.Valid(); p++ {
		want := strings.ToUpper(p.String())
		if p == core.PlatformUnset {
			want = "UNSPECIFIED"
		}
		if got := strings.TrimPrefix(dispatchv1.Platform(p).String(), "PLATFORM_"); got != want {
			t.Errorf("platform %d: dispatchv1 %s, want %s", int(p), got, want)
		}
		n++
	}
	if len(dispatchv1.Platform_name) != n {
		t.Errorf("dispatchv1 Platform values: got %d, want %d", len(dispatchv1.Platform_name), n)
	}
}

func TestUnknownMethodIsProtocolError(t *testing.T) {
	_, err := AnswerFromProto(&dispatchv1.Answer{Method: 42})
	if !errors.Is(err, core.ErrProtocol) {
		t.Errorf("got %v, want core.ErrProtocol", err)
	}
}

// TestErrorRoundTrip: every sentinel crosses an answer with its identity
// and its message; a field error comes back as a *core.FieldError.
func TestErrorRoundTrip(t *testing.T) {
	sentinels := []error{core.ErrInvalidRequest, core.ErrUnknownBackend, core.ErrUnavailable, core.ErrRefused, core.ErrProtocol,
		context.DeadlineExceeded, context.Canceled}
	for _, s := range sentinels {
		err := fmt.Errorf("plugin fa3: %w: why", s)
		a := overTheWire(t, ErrorToAnswer(err), &dispatchv1.Answer{})
		_, got := AnswerFromProto(a)
		if !errors.Is(got, s) || got.Error() != err.Error() {
			t.Errorf("%v: got %v (code %s)", s, got, a.GetErrorCode())
		}
		for _, other := range sentinels {
			if other != s && errors.Is(got, other) {
				t.Errorf("%v: the error also is %v", s, other)
			}
		}
	}
	if len(errorCodes())+2 != len(dispatchv1.ErrorCode_name) {
		t.Errorf("%d error codes classified, dispatchv1 has %d (with UNSPECIFIED and INTERNAL)", len(errorCodes()), len(dispatchv1.ErrorCode_name))
	}

	fe := core.NewFieldError("seq_lens[3]", "negative length -5")
	_, got := AnswerFromProto(overTheWire(t, ErrorToAnswer(fe), &dispatchv1.Answer{}))
	var back *core.FieldError
	if !errors.As(got, &back) || back.Field != "seq_lens[3]" || got.Error() != fe.Error() || !errors.Is(got, core.ErrInvalidRequest) {
		t.Errorf("field error: got %#v", got)
	}
	// Wrapped: the message is kept whole, the identity too.
	wrapped := fmt.Errorf("line 3: %w", fe)
	_, got = AnswerFromProto(ErrorToAnswer(wrapped))
	if got.Error() != wrapped.Error() || !errors.Is(got, core.ErrInvalidRequest) {
		t.Errorf("wrapped field error: got %v", got)
	}

	// An error of no sentinel: INTERNAL, the message kept.
	a := ErrorToAnswer(errors.New("disk on fire"))
	_, got = AnswerFromProto(a)
	if a.GetErrorCode() != dispatchv1.ErrorCode_ERROR_CODE_INTERNAL || got.Error() != "disk on fire" {
		t.Errorf("other error: code %s, %v", a.GetErrorCode(), got)
	}
	for _, s := range sentinels {
		if errors.Is(got, s) {
			t.Errorf("other error is %v", s)
		}
	}

	// A server older than error codes sends the message only.
	_, got = AnswerFromProto(&dispatchv1.Answer{Error: "seq_lens[0]: negative length -5"})
	if got == nil || got.Error() != "seq_lens[0]: negative length -5" {
		t.Errorf("message only: %v", got)
	}
}
