// Package convert is the one place where core's types become the engine
// API's messages (package dispatchv1) and back, for both sides of the
// API: the server of package engine and the Go client of package
// engine/client. It is internal, so the protobuf messages stay inside the
// engine API: a user of either side sees core's types only. It imports
// core and dispatchv1 (and grpcstatus for the errors an answer
// carries), nothing of the plugin host.
package convert
