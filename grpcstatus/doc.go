// Package grpcstatus is the one place where core's error sentinels become
// gRPC status codes and back, for both of attnplug's gRPC APIs: the plugin
// protocol (package wire, whose ToStatus and FromStatus are these) and the
// engine API (package engine and its client, engine/client). It imports
// core and gRPC's status codes only, so a client of attnplug serve links
// no plugin host, and it sits beside wire, below both of its importers.
//
// ToStatus and Code go one way, FromStatus and Remote the other;
// status_test.go round-trips every sentinel; wire/errors_test.go and the
// engine's tests check the same through their APIs.
package grpcstatus
