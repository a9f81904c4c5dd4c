package grpcstatus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/attnplug/attnplug/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRoundTrip: each core sentinel becomes its code and comes back as an
// error that wraps it (and no other) with the sender's message.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		sentinel error
		code     codes.Code
		back     error // what errors.Is finds on the way back
	}{
		{"invalid_request", core.ErrInvalidRequest, codes.InvalidArgument, core.ErrInvalidRequest},
		{"unknown_backend", core.ErrUnknownBackend, codes.NotFound, core.ErrUnknownBackend},
		{"unavailable", core.ErrUnavailable, codes.Unavailable, core.ErrUnavailable},
		{"refused", core.ErrRefused, codes.FailedPrecondition, core.ErrRefused},
		{"overloaded", core.ErrOverloaded, codes.ResourceExhausted, core.ErrOverloaded},
		{"protocol", core.ErrProtocol, codes.Internal, core.ErrProtocol},
		{"no_kernel", core.ErrNoKernel, codes.Unimplemented, core.ErrProtocol},
		{"no_plan", core.ErrNoPlan, codes.Unimplemented, core.ErrProtocol},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, context.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("fa3: plan: %w", tt.sentinel)
			if got := Code(err); got != tt.code {
				t.Errorf("Code: got %v, want %v", got, tt.code)
			}
			st := ToStatus(err)
			if got := status.Code(st); got != tt.code {
				t.Errorf("ToStatus code: got %v, want %v", got, tt.code)
			}
			back := FromStatus(st)
			if !errors.Is(back, tt.back) || back.Error() != err.Error() {
				t.Errorf("FromStatus: got %v, want %q wrapping %v", back, err, tt.back)
			}
			for _, other := range tests {
				if other.back != tt.back && errors.Is(back, other.back) {
					t.Errorf("FromStatus: also wraps %v", other.back)
				}
			}
		})
	}
}

// TestLeftAsTheyAre: nil stays nil, a status error is not wrapped again,
// an error that is no status comes back unchanged, and an unknown code
// names itself and wraps no sentinel.
func TestLeftAsTheyAre(t *testing.T) {
	if ToStatus(nil) != nil || FromStatus(nil) != nil {
		t.Error("nil did not stay nil")
	}
	st := status.Error(codes.Aborted, "aborted by the peer")
	if got := ToStatus(st); got != st {
		t.Errorf("ToStatus(status error) = %v, want it unchanged", got)
	}
	plain := errors.New("dial: connection refused")
	if got := FromStatus(plain); got != plain {
		t.Errorf("FromStatus(plain error) = %v, want it unchanged", got)
	}
	back := FromStatus(st)
	if back.Error() != "Aborted: aborted by the peer" {
		t.Errorf("FromStatus(Aborted) = %q", back)
	}
	for _, s := range []error{core.ErrInvalidRequest, core.ErrUnavailable, core.ErrProtocol, context.Canceled} {
		if errors.Is(back, s) {
			t.Errorf("FromStatus(Aborted) wraps %v", s)
		}
	}
}

// TestRemote: the peer's message is the error's text, and errors.Is
// finds the base, or nothing when there is none.
func TestRemote(t *testing.T) {
	err := Remote(core.ErrRefused, "strict: no plugin serves fa3")
	if err.Error() != "strict: no plugin serves fa3" || !errors.Is(err, core.ErrRefused) {
		t.Errorf("Remote(ErrRefused, ...) = %v", err)
	}
	if err := Remote(nil, "gone"); err.Error() != "gone" || errors.Unwrap(err) != nil {
		t.Errorf("Remote(nil, ...) = %v wrapping %v", err, errors.Unwrap(err))
	}
}
