// Package engine is the engine API of attnplug in every form: the gRPC
// API (package dispatchv1, for serving engines not written in Go) on both
// sides (the client in package engine/client), the Server that attnplug
// serve runs over a registry, and the JSON Lines stream of attnplug
// dispatch (Stream), answered by the registry in process or by a client.
//
// Start with NewServer: Register puts the Dispatcher and Admin services
// (with gRPC health and reflection) on a grpc.Server; a request without a
// backend is routed by the Config's prefill and decode backends, as
// sglang's hybrid attention backend does; Reload hot-swaps changed plugins
// (attnplug serve calls it on SIGHUP); Metrics serves Prometheus metrics;
// Stop ends the Watch streams before the gRPC server stops. Listen binds
// where a server serves (attnplug serve binds before any plugin starts): a
// Unix socket of mode 0600 in the user's private directory by default,
// whose every connection from another user is refused; ServeListener
// serves there.
//
// The Go client of the API (Dial, Client) is package engine/client, a
// package of its own so that a Go engine links the engine API and core
// and nothing of the plugin host; Client, Dial and SplitAddress stay here
// as deprecated aliases. Both sides convert through
// engine/internal/convert.
//
// Stream answers a JSON Lines stream of requests through a Batcher (a
// *registry.Registry or a *client.Client): lines are decoded in chunks
// while the previous chunk is decided, one DispatchBatch call per chunk, and the
// answers are written in order, flushed whenever no input waits.
//
// The protobuf messages stay inside the engine API (this package, its
// client and dispatchv1): the converters are internal
// (engine/internal/convert), and the engine API's messages are its own,
// apart from the plugin protocol's (package wire).
package engine
