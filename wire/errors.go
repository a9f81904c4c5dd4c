package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file is the one place where errors become gRPC status codes and
// protocol error codes, and back. errors_test.go round-trips each.

// ToStatus returns err as a gRPC status error, with the code of the core
// sentinel it wraps; nil stays nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
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
// its code, with the peer's message.
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
	return &remoteError{base: base, msg: st.Message()}
}

// fromStatusUnsupported is FromStatus for an RPC added to v1 after its
// first release: Unimplemented (a plugin older than the RPC, or a backend
// without the ability) wraps unsupported, the sentinel of the RPC's
// ability, with the peer's message.
func fromStatusUnsupported(err error, unsupported error) error {
	if !Unsupported(err) {
		return FromStatus(err)
	}
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, unsupported.Error()) {
		msg = unsupported.Error() + ": " + msg
	}
	return &remoteError{base: unsupported, msg: msg}
}

// remoteError is an error that came over the wire: its text is the peer's,
// and errors.Is finds the sentinel of its code.
type remoteError struct {
	base error
	msg  string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.base }

func errorToResult(err error, r *pb.Result) {
	switch {
	case errors.Is(err, core.ErrInvalidRequest):
		r.ErrorCode = pb.ErrorCode_ERROR_CODE_INVALID_REQUEST
	case errors.Is(err, core.ErrUnknownBackend):
		r.ErrorCode = pb.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND
	case errors.Is(err, core.ErrUnavailable):
		r.ErrorCode = pb.ErrorCode_ERROR_CODE_UNAVAILABLE
	default:
		r.ErrorCode = pb.ErrorCode_ERROR_CODE_INTERNAL
	}
	r.ErrorMessage = err.Error()
}

func resultError(r *pb.Result) error {
	var base error
	switch r.GetErrorCode() {
	case pb.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return nil
	case pb.ErrorCode_ERROR_CODE_INVALID_REQUEST:
		base = core.ErrInvalidRequest
	case pb.ErrorCode_ERROR_CODE_UNKNOWN_BACKEND:
		base = core.ErrUnknownBackend
	case pb.ErrorCode_ERROR_CODE_UNAVAILABLE:
		base = core.ErrUnavailable
	default:
		base = core.ErrProtocol
	}
	return &remoteError{base: base, msg: r.GetErrorMessage()}
}
