// Package v1pluspb is test-only generated code: plugin protocol v1 with an
// added field in DescribeResponse, Request and DispatchResponse and an added
// RPC, Kernels, as a later revision of v1 may add them. The tests of
// internal/vendortest call it under the v1 service name to show that old
// and new peers interoperate. Regenerate with go generate (needs protoc,
// protoc-gen-go and protoc-gen-go-grpc).
package v1pluspb

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative plugin_v1plus.proto
