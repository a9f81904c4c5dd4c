package engine

import (
	"github.com/attnplug/attnplug/engine/client"
	"google.golang.org/grpc/credentials"
)

// The Go client of attnplug serve moved to package engine/client, which
// links the engine API and core only; these names stay for the programs
// written against them.

// Client is a connection to a running attnplug serve.
//
// Deprecated: use client.Client (package engine/client), which does not
// link the server and the registry.
type Client = client.Client

// Dial returns a client of the server at addr over creds.
//
// Deprecated: use client.Dial (package engine/client).
func Dial(addr string, creds credentials.TransportCredentials) (*Client, error) {
	return client.Dial(addr, creds)
}

// SplitAddress splits an address of attnplug serve into its network and
// address.
//
// Deprecated: use client.SplitAddress (package engine/client).
func SplitAddress(addr string) (network, address string) { return client.SplitAddress(addr) }
