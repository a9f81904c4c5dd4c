package grpcstatus

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ToStatus returns err as a gRPC status error, with the code of the core
// sentinel it wraps; nil stays nil, and a status error stays as it is.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(Code(err), err.Error())
}

// Code is the gRPC code of the core sentinel err wraps (Unknown for none).
func Code(err error) codes.Code {
	switch {
	case errors.Is(err, core.ErrInvalidRequest):
		return codes.InvalidArgument
	case errors.Is(err, core.ErrUnknownBackend):
		return codes.NotFound
	case errors.Is(err, core.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, core.ErrRefused):
		return codes.FailedPrecondition
	case errors.Is(err, core.ErrOverloaded):
		return codes.ResourceExhausted
	case errors.Is(err, core.ErrProtocol):
		return codes.Internal
	case errors.Is(err, core.ErrNoKernel), errors.Is(err, core.ErrNoPlan):
		return codes.Unimplemented
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// FromStatus returns the error of a gRPC call wrapping the core sentinel of
// its code, with the peer's message; an error that is no status stays as
// it is.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var base error
	switch st.Code() {
	case codes.InvalidArgument:
		base = core.ErrInvalidRequest
	case codes.NotFound:
		base = core.ErrUnknownBackend
	case codes.Unavailable:
		base = core.ErrUnavailable
	case codes.FailedPrecondition:
		base = core.ErrRefused
	case codes.ResourceExhausted:
		base = core.ErrOverloaded
	case codes.Internal, codes.Unimplemented:
		base = core.ErrProtocol
	case codes.DeadlineExceeded:
		base = context.DeadlineExceeded
	case codes.Canceled:
		base = context.Canceled
	default:
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return Remote(base, st.Message())
}

// Remote returns an error that came over a connection: its text is the
// peer's msg, and errors.Is finds base (none when base is nil).
func Remote(base error, msg string) error { return &remoteError{base: base, msg: msg} }

type remoteError struct {
	base error
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.base }
