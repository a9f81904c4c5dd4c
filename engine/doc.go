// Package engine is the engine API of attnplug in every form: the gRPC
// API (package dispatchv1, for serving engines not written in Go) on both
// sides, the Server that attnplug serve runs over a registry and the
// Client that attnplug dispatch --connect uses; and the JSON Lines stream
// of attnplug dispatch (Stream), answered by either.
//
// Start with NewServer: Register puts the Dispatcher and Admin services
// (with gRPC health and reflection) on a grpc.Server; a request without a
// backend is routed by the Config's prefill and decode backends, as
// sglang's hybrid attention backend does; Reload hot-swaps changed plugins
// (attnplug serve calls it on SIGHUP); Metrics serves Prometheus metrics;
// Stop ends the Watch streams before the gRPC server stops.
//
// Dial returns a Client, whose Dispatch and DispatchBatch take and return
// core's types. Each answer crosses the API with an error code naming the
// core sentinel its error wraps, so errors keep their identity:
// errors.Is(err, core.ErrInvalidRequest) holds on the client when it held
// on the server, and errors.As finds a *core.FieldError.
//
// Stream answers a JSON Lines stream of requests through a Batcher (a
// *registry.Registry or a *Client): lines are decoded in chunks while the
// previous chunk is decided, one DispatchBatch call per chunk, and the
// answers are written in order, flushed whenever no input waits.
//
// The protobuf messages stay inside this package and dispatchv1: the
// converters (convert.go) are unexported, and the engine API's messages
// are its own, apart from the plugin protocol's (package wire).
package engine
