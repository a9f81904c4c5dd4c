// Package dispatchv1 is the gRPC API of attnplug serve, version 1: the
// Dispatcher service (Dispatch and DispatchBatch), which answers which
// forward method a DeepSeek attention layer runs, and the Admin service
// (Reload, ListPlugins), which manages a running server. It is meant for
// engines not written in Go. Its messages are its own, apart from the
// plugin protocol's (package pluginv1): a Request means what the same
// request means in the JSON dispatch format, and each Answer carries an
// ErrorCode that names the core sentinel of its error. Package engine
// serves it and holds the Go client.
//
// The code beside this file is generated from dispatch.proto by
// protoc-gen-go and protoc-gen-go-grpc; regenerate it with make proto.
// Compatibility: fields and RPCs are only ever added.
package dispatchv1
