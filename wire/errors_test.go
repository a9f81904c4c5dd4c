package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		sentinel error
		code     codes.Code
	}{
		{"invalid_request", core.ErrInvalidRequest, codes.InvalidArgument},
		{"unknown_backend", core.ErrUnknownBackend, codes.NotFound},
		{"unavailable", core.ErrUnavailable, codes.Unavailable},
		{"refused", core.ErrRefused, codes.FailedPrecondition},
		{"overloaded", core.ErrOverloaded, codes.ResourceExhausted},
		{"protocol", core.ErrProtocol, codes.Internal},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("fa3: dispatch: %w", tt.sentinel)
			st := ToStatus(err)
			if got := status.Code(st); got != tt.code {
				t.Errorf("ToStatus code: got %v, want %v", got, tt.code)
			}
			back := FromStatus(st)
			if !errors.Is(back, tt.sentinel) {
				t.Errorf("FromStatus(%v): errors.Is(%v) = false, want true", st, tt.sentinel)
			}
			if back.Error() != err.Error() {
				t.Errorf("FromStatus message: got %q, want %q", back, err)
			}
			for _, other := range tests {
				if other.sentinel != tt.sentinel && errors.Is(back, other.sentinel) {
					t.Errorf("FromStatus(%v): also errors.Is %v", st, other.sentinel)
				}
			}
		})
	}
	t.Run("field_error_keeps_message", func(t *testing.T) {
		err := core.NewFieldError("seq_lens[0]", "negative length -1")
		back := FromStatus(ToStatus(err))
		if !errors.Is(back, core.ErrInvalidRequest) || back.Error() != "seq_lens[0]: negative length -1" {
			t.Errorf("got %v, want an ErrInvalidRequest with the field's message", back)
		}
	})
	t.Run("unknown_error", func(t *testing.T) {
		st := ToStatus(errors.New("boom"))
		if status.Code(st) != codes.Unknown {
			t.Errorf("ToStatus code: got %v, want Unknown", status.Code(st))
		}
		back := FromStatus(st)
		if back.Error() != "Unknown: boom" {
			t.Errorf("FromStatus message: got %q, want %q", back, "Unknown: boom")
		}
		for _, tt := range tests {
			if errors.Is(back, tt.sentinel) {
				t.Errorf("FromStatus(Unknown): errors.Is %v, want none", tt.sentinel)
			}
		}
	})
	t.Run("unimplemented_is_protocol", func(t *testing.T) {
		if back := FromStatus(status.Error(codes.Unimplemented, "no Configure")); !errors.Is(back, core.ErrProtocol) || back.Error() != "no Configure" {
			t.Errorf("got %v, want an ErrProtocol", back)
		}
	})
	t.Run("unsupported_abilities", checkUnsupportedAbilities)
	t.Run("nil_stays_nil", func(t *testing.T) {
		if ToStatus(nil) != nil || FromStatus(nil) != nil {
			t.Errorf("ToStatus(nil) or FromStatus(nil) is not nil")
		}
	})
	t.Run("status_kept", func(t *testing.T) {
		st := status.Error(codes.ResourceExhausted, "full")
		if got := ToStatus(st); got != st {
			t.Errorf("ToStatus(status): got %v, want it unchanged", got)
		}
	})
	t.Run("non_status_kept", func(t *testing.T) {
		err := errors.New("plain")
		if got := FromStatus(err); got != err {
			t.Errorf("FromStatus(plain): got %v, want it unchanged", got)
		}
	})
}

// checkUnsupportedAbilities: the RPCs added after v1's first release read
// Unimplemented as the absence of their ability, with the peer's message once.
func checkUnsupportedAbilities(t *testing.T) {
	for _, sentinel := range []error{core.ErrNoKernel, core.ErrNoPlan} {
		err := fmt.Errorf("fa3: %w: no NVRTC", sentinel)
		st := ToStatus(err)
		if status.Code(st) != codes.Unimplemented {
			t.Errorf("ToStatus(%v): code %v, want Unimplemented", err, status.Code(st))
		}
		if back := fromStatusUnsupported(st, sentinel); !errors.Is(back, sentinel) || back.Error() != err.Error() {
			t.Errorf("fromStatusUnsupported(%v): got %v, want %v with the same message", st, back, sentinel)
		}
		old := status.Error(codes.Unimplemented, "unknown method PlanKernel for service attnplug.plugin.v1.Backend")
		if back := fromStatusUnsupported(old, sentinel); !errors.Is(back, sentinel) || back.Error() != sentinel.Error()+": "+status.Convert(old).Message() {
			t.Errorf("fromStatusUnsupported(old plugin): got %v", back)
		}
		if back := fromStatusUnsupported(ToStatus(core.ErrRefused), sentinel); !errors.Is(back, core.ErrRefused) || errors.Is(back, sentinel) {
			t.Errorf("fromStatusUnsupported(refused): got %v, want ErrRefused only", back)
		}
	}
}

func TestResultErrorCodes(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     pb.ErrorCode
		sentinel error
	}{
		{"invalid_request", core.NewFieldError("seq_lens[1]", "negative length -2"), pb.ErrorCode_ERROR_CODE_INVALID_REQUEST, core.ErrInvalidRequest},
		{"unknown_backend", fmt.Errorf("fa3: %w %q", core.ErrUnknownBackend, "x"), pb.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND, core.ErrUnknownBackend},
		{"unavailable", fmt.Errorf("x: %w", core.ErrUnavailable), pb.ErrorCode_ERROR_CODE_UNAVAILABLE, core.ErrUnavailable},
		{"protocol", fmt.Errorf("x: %w", core.ErrProtocol), pb.ErrorCode_ERROR_CODE_INTERNAL, core.ErrProtocol},
		{"other_is_internal", errors.New("boom"), pb.ErrorCode_ERROR_CODE_INTERNAL, core.ErrProtocol},
		{"refused_is_internal", fmt.Errorf("x: %w", core.ErrRefused), pb.ErrorCode_ERROR_CODE_INTERNAL, core.ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r pb.Result
			errorToResult(tt.err, &r)
			if r.GetErrorCode() != tt.code || r.GetErrorMessage() != tt.err.Error() {
				t.Errorf("errorToResult: got %v %q, want %v %q", r.GetErrorCode(), r.GetErrorMessage(), tt.code, tt.err)
			}
			back := resultError(&r)
			if !errors.Is(back, tt.sentinel) || back.Error() != tt.err.Error() {
				t.Errorf("resultError: got %v, want errors.Is %v with message %q", back, tt.sentinel, tt.err)
			}
		})
	}
	if err := resultError(&pb.Result{Method: pb.Method_METHOD_MLA}); err != nil {
		t.Errorf("resultError of an answer: got %v, want nil", err)
	}
	if err := resultError(&pb.Result{ErrorCode: 42, ErrorMessage: "newer"}); !errors.Is(err, core.ErrProtocol) || err.Error() != "newer" {
		t.Errorf("resultError of code 42: got %v, want an ErrProtocol", err)
	}
}
