package wire_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/attnplug/attnplug/wire/pluginv1"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// acmeRules is a vendor's backend: one name, with a threshold of its own.
func acmeRules(logger hclog.Logger) (core.Backend, error) {
	return core.NewRuleBackend("acme_mla", "1.0.0", logger, core.Rule{
		Name: "acme_mla",
		Decide: func(r *core.Request) core.Method {
			if r.Batch.Mode.IsExtendWithoutSpeculative() && r.Batch.PrefixSum() >= 16384 {
				return core.MHAChunkedKV
			}
			return core.MLA
		},
		Reads:   core.Reads{Facts: core.FactMode, PrefixSumAtLeast: []int64{16384}},
		Methods: []core.Method{core.MLA, core.MHAChunkedKV},
	})
}

// A plugin binary's whole main function is one call to Main with the
// plugin's Factory. Build it as attnplug-backend-<family> and put it in a
// plugin directory; the attnplug host starts it when a request for one of
// its names arrives.
func ExampleMain() {
	// In package main of the plugin:
	main := func() { wire.Main(acmeRules) }
	_ = main
}

// A Factory builds the backend a plugin serves. Main calls it with a logger
// whose JSON lines the host forwards into its own log.
func ExampleFactory() {
	var f wire.Factory = acmeRules
	b, err := f(hclog.NewNullLogger())
	if err != nil {
		log.Fatal(err)
	}
	d, _ := b.Describe(context.Background())
	fmt.Println(d.Name, d.Version, d.Handlers[0].Methods)
	// Output: acme_mla 1.0.0 [MLA MHA_CHUNKED_KV]
}

// The handshake a host and a plugin share: a plugin is started with the
// magic cookie in its environment and speaks these protocol versions.
func ExampleHandshake() {
	hs := wire.Handshake()
	fmt.Println(hs.MagicCookieKey, hs.ProtocolVersion)
	for v := range wire.VersionedPlugins(nil) {
		fmt.Println("host speaks protocol version", v)
	}
	fmt.Println("binary name:", wire.BinaryPrefix+"acme_mla")
	// Output:
	// ATTNPLUG_PLUGIN 1
	// host speaks protocol version 1
	// binary name: attnplug-backend-acme_mla
}

// NewServer and NewClient are the two ends of the protocol. Main and the
// host wire them through go-plugin; here they meet over a plain gRPC
// connection, as a vendor's own test of its backend may do.
func ExampleNewServer() {
	b, err := acmeRules(hclog.NewNullLogger())
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginv1.RegisterBackendServer(srv, wire.NewServer(b))
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := wire.NewClient(conn)

	ctx := context.Background()
	for _, prefix := range []int64{8192, 16384} {
		req := core.NewRequest("acme_mla", core.ModeExtend)
		req.Runtime.Platform = core.PlatformCUDA
		req.Batch.ExtendPrefixLens = []int64{prefix}
		req.Batch.SeqLens = []int64{prefix + 1024}
		m, err := client.Dispatch(ctx, &req)
		fmt.Println(prefix, m, err)
	}
	// The server validates what arrives: a negative length is refused.
	bad := core.NewRequest("acme_mla", core.ModeExtend)
	bad.Runtime.Platform = core.PlatformCUDA
	bad.Batch.ExtendPrefixLens = []int64{-1}
	_, err = client.Dispatch(ctx, &bad)
	fmt.Println(err)
	// Output:
	// 8192 MLA <nil>
	// 16384 MHA_CHUNKED_KV <nil>
	// extend_prefix_lens[0]: negative length -1
}

// Unsupported tells a host that a plugin was built before the RPC it
// called existed.
func ExampleUnsupported() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer() // serves no Backend service at all
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	_, err = pluginv1.NewBackendClient(conn).Describe(context.Background(), &pluginv1.DescribeRequest{})
	fmt.Println(wire.Unsupported(err))
	// Output: true
}
