package wire

import (
	"errors"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/grpcstatus"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc/status"
)

// This file is the one place where errors become the protocol's error
// codes and back, and where the gRPC status codes of package grpcstatus
// meet the protocol. errors_test.go round-trips each.

// ToStatus returns err as a gRPC status error, with the code of the core
// sentinel it wraps; nil stays nil. The mapping is package grpcstatus's,
// shared with the engine API.
func ToStatus(err error) error { return grpcstatus.ToStatus(err) }

// FromStatus returns the error of a gRPC call wrapping the core sentinel of
// its code, with the peer's message.
func FromStatus(err error) error { return grpcstatus.FromStatus(err) }

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
	return grpcstatus.Remote(unsupported, msg)
}

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
	return grpcstatus.Remote(base, r.GetErrorMessage())
}
