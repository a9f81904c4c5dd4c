package wire

import (
	"context"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire/pluginv1"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// EnvParentPipe names the environment variable that gives a plugin the
// file descriptor of the read end of a pipe whose write end the host holds.
// When the host is gone, however it ended, the pipe reads EOF and the
// plugin exits.
const EnvParentPipe = "ATTNPLUG_PARENT_PIPE"

// EnvCheckRequests names the environment variable that, set to "1", makes
// Main's server check every request the backend is given: a call whose
// request the backend changed fails with an error wrapping
// ErrRequestChanged. attnplug conform sets it; a host does not, as the
// check copies every request.
const EnvCheckRequests = "ATTNPLUG_CHECK_REQUESTS"

// ProtocolVersion is the plugin protocol version this package speaks.
const ProtocolVersion = 1

// MaxMessageBytes is the largest gRPC message a host and a plugin of this
// package send each other, both ways; gRPC's own default is 4 MiB. A host
// also splits its batches well below it, because older plugins keep gRPC's
// default.
const MaxMessageBytes = 64 << 20

// BatchBytes is how large a host lets one DispatchBatch message grow
// before it starts another.
const BatchBytes = 2 << 20

// ServerOptions are the gRPC server options of a plugin.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes)}
}

// DialOptions are the gRPC dial options of a host's plugin connections.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))}
}

// PluginName is the name of the backend plugin in go-plugin's plugin sets.
const PluginName = "backend"

// BinaryPrefix is how every plugin binary's file name begins; the rest is
// the plugin's family name, as in attnplug-backend-fa3.
const BinaryPrefix = "attnplug-backend-"

// The magic cookie of attnplug plugins. It is not a secret: it tells a
// plugin binary that an attnplug host started it.
const (
	MagicCookieKey   = "ATTNPLUG_PLUGIN"
	MagicCookieValue = "d1ab7b1e-attention-backend-5b3c"
)

// Handshake returns the go-plugin handshake of attnplug plugins.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}

// VersionedPlugins returns the plugin sets of every protocol version this
// package speaks, for go-plugin's ClientConfig.VersionedPlugins. A host
// builds them with a nil backend.
func VersionedPlugins(b core.Backend) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: &GRPCPlugin{Backend: b}},
	}
}

// GRPCPlugin is the go-plugin plugin of a backend: on the plugin side it
// serves Backend, on the host side it makes a Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Backend is what the plugin side serves; nil on the host side.
	Backend core.Backend
	// CheckRequests makes the plugin side check that Backend leaves every
	// request as it was given (Server.CheckRequests); Main sets it when
	// EnvCheckRequests is "1".
	CheckRequests bool
}

// GRPCServer registers the backend's service on s.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	srv := NewServer(p.Backend)
	srv.CheckRequests = p.CheckRequests
	pluginv1.RegisterBackendServer(s, srv)
	return nil
}

// GRPCClient returns a Client over conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return NewClient(conn), nil
}
