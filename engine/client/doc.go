// Package client is the Go client of attnplug serve (the engine API,
// api/dispatchv1): what attnplug dispatch --connect uses, and what a Go
// engine links to ask a running host for forward methods, device code
// and plans.
//
// It is a package of its own, apart from the server in package engine,
// so that a client links the engine API and core only: no registry, no
// plugin protocol (wire), no go-plugin (go list -deps shows it, and a
// test checks it). The converters it shares with the server live in
// engine/internal/convert, the gRPC status codes in package grpcstatus.
//
// Dial returns a Client, whose Dispatch and DispatchBatch take and return
// core's types. Each answer crosses the API with an error code naming the
// core sentinel its error wraps, so errors keep their identity:
// errors.Is(err, core.ErrInvalidRequest) holds on the client when it held
// on the server, and errors.As finds a *core.FieldError. KernelModules
// and PlanKernel hand the device code and the checked plans of the
// server's plugins. TLS builds the transport credentials of a Client,
// CheckAddress checks an address before it is dialled, WithTimeout bounds
// connecting and each call.
//
// On a Unix socket (DefaultAddress: serve.sock in the user's private
// directory) every connection is checked before an answer is trusted: a
// server run by another user than the client's or root, who may have
// bound the socket's path first, is refused with an error naming the
// socket and both uids (docs/reliability.md, "Other local users").
package client
