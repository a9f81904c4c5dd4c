package wire

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unsupported reports whether err, the error of a gRPC call, says that the
// peer does not implement the RPC (gRPC Unimplemented). Protocol v1 only
// ever gains RPCs: a host that calls one added after a plugin was built
// gets Unimplemented, and must treat it as "not supported by this plugin",
// never as a failure of the plugin. Call it on the error the generated
// client returned, before FromStatus.
func Unsupported(err error) bool {
	return err != nil && status.Code(err) == codes.Unimplemented
}
