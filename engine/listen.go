package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/engine/client"
	"google.golang.org/grpc"
)

// Listen listens on addr, an address of attnplug serve
// (client.SplitAddress). A unix socket left by a server that is gone is
// removed first, and one that still answers is refused; closing the
// listener of a unix socket removes the socket.
func Listen(addr string) (net.Listener, error) {
	network, address := client.SplitAddress(addr)
	if network == "unix" {
		if err := removeStaleSocket(address); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("serve: listen %s: %w", addr, err)
	}
	return lis, nil
}

// removeStaleSocket removes a unix socket left by a server that is gone,
// and refuses to take over one that still answers.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("serve: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("serve: another server is listening on %s", path)
	}
	return os.Remove(path)
}

// DescribeAddr is the address a listener of network listens on, as
// attnplug dispatch --connect takes it.
func DescribeAddr(network, addr string) string {
	if network == "unix" {
		return "unix://" + addr
	}
	return addr
}

// ServeMetrics serves the server's Prometheus metrics (Metrics) on
// /metrics of the TCP address addr, plain HTTP, in the background. It
// returns their URL and the function that stops them.
func (s *Server) ServeMetrics(addr string) (url string, stop func() error, err error) {
	mlis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("serve: metrics listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.Metrics(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(mlis)
	return "http://" + mlis.Addr().String() + "/metrics", srv.Close, nil
}

// Serve serves srv (on which Register put the services) on lis until ctx
// ends, reloading the plugins on SIGHUP, and calls ready once it serves.
// When ctx ends it stops the Watch streams (Stop) and the gRPC server,
// gracefully within 5 seconds, and returns nil; a failure of the server
// is returned at once.
func (s *Server) Serve(ctx context.Context, srv *grpc.Server, lis net.Listener, ready func()) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				s.Reload(ctx) // logged by the server
			}
		}
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	ready()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.Stop() // ends the Watch streams, which GracefulStop waits for
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	return nil
}

// DefaultSocket is where attnplug serve listens without --listen: a unix
// socket named after the user in $XDG_RUNTIME_DIR, else in the
// temporary directory.
func DefaultSocket() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return "unix://" + filepath.Join(dir, fmt.Sprintf("attnplug-%d.sock", os.Getuid()))
}

// ListenOptions says where ListenAndServe serves.
type ListenOptions struct {
	// Listen is the address of the gRPC server (client.SplitAddress).
	Listen string
	// Creds secures it (ServerTLS.ServerOption); nil: plaintext.
	Creds grpc.ServerOption
	// Metrics is the TCP address of the Prometheus metrics; empty: none.
	Metrics string
	// Ready is called once the server serves, with the address it listens
	// on (as DescribeAddr writes it) and the metrics' URL, or "off".
	Ready func(addr, metrics string)
}

// ListenAndServe puts the services on a gRPC server of its own (with the
// server's ServerOptions and o.Creds), listens on o.Listen (Listen), serves
// the metrics on o.Metrics (ServeMetrics), and serves until ctx ends
// (Serve); a unix socket is removed at the end.
func (s *Server) ListenAndServe(ctx context.Context, o ListenOptions) error {
	network, address := client.SplitAddress(o.Listen)
	opts := s.ServerOptions()
	if o.Creds != nil {
		opts = append(opts, o.Creds)
	}
	srv := grpc.NewServer(opts...)
	s.Register(srv)
	lis, err := Listen(o.Listen)
	if err != nil {
		return err
	}
	if network == "unix" {
		defer os.Remove(address)
	}
	metricsAt := "off"
	if o.Metrics != "" {
		url, stop, err := s.ServeMetrics(o.Metrics)
		if err != nil {
			lis.Close()
			return err
		}
		defer stop()
		metricsAt = url
	}
	return s.Serve(ctx, srv, lis, func() {
		if o.Ready != nil {
			o.Ready(DescribeAddr(network, lis.Addr().String()), metricsAt)
		}
	})
}
