// Package pluginv1 is the attnplug plugin protocol, version 1, as generated
// code: the messages and the gRPC service that a host and a backend plugin
// exchange over go-plugin's transport. Package wire wraps it; plugins and
// hosts use wire and core, not this package.
//
// The code beside this file is generated from plugin.proto by
// protoc-gen-go and protoc-gen-go-grpc; regenerate it with make proto.
// Compatibility: fields and RPCs are only ever added, and a field's number
// and meaning never change.
package pluginv1
