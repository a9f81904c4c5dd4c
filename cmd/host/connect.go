package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/wire"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// connectCallTimeout bounds one DispatchBatch call to a server.
const connectCallTimeout = 30 * time.Second

// serverClient is a connection to a running attnplug serve.
type serverClient struct {
	conn *grpc.ClientConn
	rpc  dispatchv1.DispatcherClient
}

// checkAddr refuses, as a usage error, an address that names no socket
// path or no valid host:port; unix says whether a unix socket may be
// given. flagName names the flag in the message.
func checkAddr(flagName, addr string, unix bool) error {
	network, address := listenAddr(addr)
	if network == "unix" {
		if !unix {
			return &usageError{fmt.Sprintf("%s %q: want host:port (a TCP address)", flagName, addr)}
		}
		if address == "" {
			return &usageError{fmt.Sprintf("%s %q: names no socket path", flagName, addr)}
		}
		return nil
	}
	want := "want host:port, unix:///path or a socket path starting with / or ."
	if !unix {
		want = "want host:port"
	}
	_, port, err := net.SplitHostPort(address)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return &usageError{fmt.Sprintf("%s %q: %v (%s)", flagName, addr, err, want)}
	}
	return nil
}

// dialServer connects to the serve at addr (unix:///path, a socket path
// starting with / or ., or host:port) with creds.
func dialServer(addr string, creds credentials.TransportCredentials) (*serverClient, error) {
	if err := checkAddr("--connect", addr, true); err != nil {
		return nil, err
	}
	network, address := listenAddr(addr)
	target := address
	if network == "unix" {
		abs, err := filepath.Abs(address)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--connect %s: %v", addr, err)}
		}
		target = "unix://" + abs
	}
	conn, err := grpc.NewClient(target, append(wire.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, fmt.Errorf("--connect %s: %w", addr, err)
	}
	return &serverClient{conn: conn, rpc: dispatchv1.NewDispatcherClient(conn)}, nil
}

// DispatchBatch sends reqs in one call and reads the answers back.
func (c *serverClient) DispatchBatch(ctx context.Context, reqs []core.Request, out []registry.Result) error {
	in := &dispatchv1.DispatchBatchRequest{Requests: make([]*pb.Request, len(reqs))}
	for i := range reqs {
		in.Requests[i] = wire.RequestToProto(&reqs[i])
	}
	// A server that is not there fails the call at once; one that hangs
	// fails it at the deadline.
	ctx, cancel := context.WithTimeout(ctx, connectCallTimeout)
	defer cancel()
	resp, err := c.rpc.DispatchBatch(ctx, in)
	if err != nil {
		return fmt.Errorf("server: %w", wire.FromStatus(err))
	}
	if len(resp.GetAnswers()) != len(reqs) {
		return fmt.Errorf("%w: server answered %d of %d requests", core.ErrProtocol, len(resp.GetAnswers()), len(reqs))
	}
	for i, a := range resp.GetAnswers() {
		if a.GetError() != "" {
			out[i] = registry.Result{Err: errors.New(a.GetError())}
			continue
		}
		m, err := wire.MethodFromProto(a.GetMethod())
		out[i] = registry.Result{Answer: core.Answer{Method: m, Handler: a.GetHandler(), Plugin: a.GetPlugin(), Fallback: a.GetFallback()}, Err: err}
	}
	return nil
}

// Close closes the connection.
func (c *serverClient) Close() error { return c.conn.Close() }
