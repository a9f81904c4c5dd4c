// Package wire is the attnplug plugin protocol as Go: the go-plugin
// handshake, the gRPC service glue, and the converters between core's types
// and the protobuf messages of package pluginv1.
//
// It is the one package a backend plugin imports besides core, in this
// repository or in a vendor's own module, and it is kept small and stable.
//
// A plugin's main is one call:
//
//	func main() { wire.Main(rules.New) }
//
// Main checks that the host started the binary, builds the backend with a
// JSON logger on stderr (the host forwards those lines into its own log
// under the plugin's name), and serves it over gRPC until the host ends it.
//
// Hosts use Handshake and VersionedPlugins to configure go-plugin's client;
// the client side, Client, implements core.BatchBackend over the
// connection. Protobuf never leaves this package: convert.go is the one
// place where messages become core types and back, and errors.go the one
// place where errors become gRPC status codes and back.
//
// The plugin lifecycle:
//
//  1. The host runs the binary with the magic cookie in its environment and
//     the protocol versions it speaks.
//  2. Main checks the cookie; without it the binary prints what it is and
//     exits with status 1.
//  3. go-plugin negotiates the highest common protocol version and prints
//     the handshake line on stdout; nothing else may ever write there.
//  4. The host calls Describe, learns the names the plugin serves, and
//     calls Dispatch or DispatchBatch for requests to those names; a
//     plugin with a kernel catalog also gets RunKernel, and one whose
//     description sets device_code gets KernelModules once per device and
//     PlanKernel once per batch (Server serves them for a backend that is
//     a core.KernelPlanner; Client reads Unimplemented, from an older
//     plugin, as core.ErrNoPlan).
//  5. The host kills the process when it no longer needs it, when it
//     fails, and when the host ends.
package wire
