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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/localsock"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// ListenOptions says where a Server listens (Listen) and how it serves
// there (ServeListener).
type ListenOptions struct {
	// Listen is the address of the gRPC server (client.SplitAddress).
	Listen string
	// SocketGroup, for a Unix socket, is a group (a name or a gid) whose
	// members may connect besides the server's user and root: the socket
	// gets that group and mode 0660, and the peer check admits them.
	// Empty: mode 0600, the server's user and root alone.
	SocketGroup string
	// AllowAbstractSocket accepts an abstract Unix socket (unix://@name,
	// Linux): it has no file, so no file mode keeps any local user from
	// connecting, and the peer check alone refuses them. Refused
	// otherwise.
	AllowAbstractSocket bool
	// Creds secures it (ServerTLS.ServerOption); nil: plaintext.
	Creds grpc.ServerOption
	// Metrics is the TCP address of the Prometheus metrics; empty: none.
	Metrics string
	// Logger is where refused connections are logged; nil: nowhere.
	Logger hclog.Logger
	// Ready is called once the server serves, with the address it listens
	// on (as DescribeAddr writes it) and the metrics' URL, or "off".
	Ready func(addr, metrics string)
}

// Check refuses options that are the caller's mistakes, before anything
// is bound: a malformed address, an abstract socket not asked for, a
// group that does not exist or cannot reach the socket. Its errors name
// attnplug serve's flags.
func (o ListenOptions) Check() error {
	_, err := o.check()
	return err
}

// check is Check, returning the policy of the peers a Unix socket admits.
func (o ListenOptions) check() (localsock.Policy, error) {
	pol := localsock.Self
	if err := client.CheckAddress("--listen", o.Listen, true); err != nil {
		return pol, err
	}
	network, address := client.SplitAddress(o.Listen)
	if network != "unix" {
		if o.SocketGroup != "" {
			return pol, fmt.Errorf("serve: --socket-group %s applies to a Unix socket, and --listen %s is TCP", o.SocketGroup, o.Listen)
		}
		return pol, nil
	}
	if strings.HasPrefix(address, "@") && !o.AllowAbstractSocket {
		return pol, fmt.Errorf("serve: --listen %s is an abstract socket, which has no file and so no mode: every local user may connect to it "+
			"and call Admin.Reload unless the server's peer check refuses them; listen on a socket path (the default is %s), "+
			"or pass --allow-abstract-socket to serve there anyway", o.Listen, client.DefaultAddress())
	}
	if o.SocketGroup != "" {
		gid, err := localsock.LookupGroup(o.SocketGroup)
		if err != nil {
			return pol, fmt.Errorf("serve: --socket-group: %v", err)
		}
		if inPrivateDir(address) {
			return pol, fmt.Errorf("serve: --socket-group %s: the socket %s lies in your private directory (mode 0700), which the group cannot enter: "+
				"give --listen a path in a directory the group can reach", o.SocketGroup, address)
		}
		pol.Group = gid
	}
	return pol, nil
}

// inPrivateDir reports whether the socket path lies in the user's
// private socket directory (localsock.Dir).
func inPrivateDir(path string) bool {
	abs, err := filepath.Abs(path)
	return err == nil && filepath.Dir(abs) == filepath.Clean(localsock.Dir())
}

// Listener is what Listen bound for a server: its gRPC address and its
// metrics address. Close it once served (ServeListener does not).
type Listener struct {
	o       ListenOptions
	network string
	grpc    net.Listener
	metrics net.Listener // nil: none
	once    sync.Once
}

// Listen binds the addresses of o, after checking them (Check): attnplug
// serve binds before it starts a plugin, so that an address it cannot
// serve on fails at once. On a Unix socket path:
//
//  1. In the user's private socket directory (the default address,
//     client.DefaultAddress) the directory is made with mode 0700 when
//     absent, and refused unless the server's user owns it and no other
//     user can enter it.
//  2. A socket left by a server that is gone is removed; one that still
//     answers is refused.
//  3. The socket gets mode 0600, whatever the umask (0660 and
//     o.SocketGroup's group with a group).
//  4. Every connection is accepted only from a process of the server's
//     user, root, or o.SocketGroup's members (the peer's credentials,
//     SO_PEERCRED); others are closed at once and logged. This guards an
//     abstract socket (o.AllowAbstractSocket) too.
//  5. Closing the listener (the gRPC server does when it stops, before it
//     drains) removes the socket, while it is still the one Listen made:
//     a server started on the same path while this one drains keeps its
//     own.
//
// Loopback TCP has no such check: every local user can connect to it.
func Listen(o ListenOptions) (*Listener, error) {
	pol, err := o.check()
	if err != nil {
		return nil, err
	}
	network, address := client.SplitAddress(o.Listen)
	l := &Listener{o: o, network: network}
	if network == "unix" {
		lis, sock, err := listenUnix(address, pol, o.SocketGroup)
		if err != nil {
			return nil, err
		}
		log := o.Logger
		if log == nil {
			log = hclog.NewNullLogger()
		}
		l.grpc = &peerListener{Listener: lis, policy: pol, log: log, socket: sock}
	} else if l.grpc, err = net.Listen(network, address); err != nil {
		return nil, fmt.Errorf("serve: listen %s: %w", o.Listen, err)
	}
	if o.Metrics != "" {
		if l.metrics, err = net.Listen("tcp", o.Metrics); err != nil {
			l.Close()
			return nil, fmt.Errorf("serve: metrics listen %s: %w", o.Metrics, err)
		}
	}
	return l, nil
}

// Addr is the address the server listens on, as DescribeAddr writes it.
func (l *Listener) Addr() string { return DescribeAddr(l.network, l.grpc.Addr().String()) }

// Close closes the listeners (removing the socket file Listen made, unless
// another took its path since). Later calls do nothing.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.grpc.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil // the gRPC server closed it when it stopped
		}
		if l.metrics != nil {
			l.metrics.Close()
		}
	})
	return err
}

// socketFile is the file of a Unix socket that Listen made: its path and
// its identity (device and inode) when made.
type socketFile struct {
	path string
	made os.FileInfo
}

// remove removes the socket file while it is the one made. Call it before
// the listener closes: a socket that is bound holds its file's inode, so
// that no other file has that identity, however the path changed; and no
// other server takes a path whose socket still answers
// (removeStaleSocket).
func (s *socketFile) remove() {
	if st, err := os.Lstat(s.path); err == nil && os.SameFile(st, s.made) {
		os.Remove(s.path)
	}
}

// listenUnix listens on the Unix socket path (an abstract one when it
// starts with @), as Listen says.
func listenUnix(path string, pol localsock.Policy, group string) (net.Listener, *socketFile, error) {
	if strings.HasPrefix(path, "@") {
		lis, err := net.Listen("unix", path)
		if err != nil {
			return nil, nil, fmt.Errorf("serve: listen unix://%s: %w", path, err)
		}
		return lis, nil, nil
	}
	if inPrivateDir(path) {
		if err := localsock.MakePrivateDir(filepath.Dir(path)); err != nil {
			return nil, nil, fmt.Errorf("serve: the socket's directory: %w (remove it, or point $XDG_RUNTIME_DIR or $TMPDIR elsewhere, or give --listen)", err)
		}
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, nil, err
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("serve: listen unix://%s: %w", path, err)
	}
	// Close leaves the file to socketFile.remove, which knows whether it
	// is still this socket's.
	lis.SetUnlinkOnClose(false)
	made, err := os.Lstat(path)
	if err != nil {
		lis.Close()
		return nil, nil, fmt.Errorf("serve: listen unix://%s: %w", path, err)
	}
	sock := &socketFile{path: path, made: made}
	// Until the mode is set the socket has the umask's; a peer that
	// connects meanwhile meets the peer check.
	mode := os.FileMode(0o600)
	if pol.Group >= 0 {
		mode = 0o660
	}
	if err := setSocketMode(path, made, mode, pol.Group); err != nil {
		sock.remove()
		lis.Close()
		if pol.Group >= 0 {
			return nil, nil, fmt.Errorf("serve: listen unix://%s (--socket-group %s): %w", path, group, err)
		}
		return nil, nil, fmt.Errorf("serve: listen unix://%s: %w", path, err)
	}
	return lis, sock, nil
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

// peerListener accepts the connections of the peers its policy allows,
// and closes the others at once: the connection of another user never
// reaches the gRPC server. Close removes its socket file first.
type peerListener struct {
	net.Listener
	policy localsock.Policy
	log    hclog.Logger
	socket *socketFile // nil: none (an abstract socket)
	logged sync.Map    // uid -> struct{}: the uids whose refusal was logged at Warn
	once   sync.Once
	err    error
}

func (l *peerListener) Close() error {
	l.once.Do(func() {
		if l.socket != nil {
			l.socket.remove()
		}
		l.err = l.Listener.Close()
	})
	return l.err
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := localsock.PeerOf(c)
		if err == nil && l.policy.Allows(p) {
			return c, nil
		}
		// Logged before the close: the refused peer, seeing its
		// connection end, finds the reason already in the log.
		l.logRefusal(p, err)
		c.Close()
	}
}

// logRefusal logs a refused connection of peer p (err: why its peer is
// unknown). The first refusal of each user at Warn, the others at Debug:
// a user that connects in a loop does not flood the log.
func (l *peerListener) logRefusal(p localsock.Peer, err error) {
	if err != nil {
		l.log.Warn("refused a connection whose peer is unknown", "error", err)
		return
	}
	log := l.log.Debug
	if _, seen := l.logged.LoadOrStore(p.UID, struct{}{}); !seen {
		log = l.log.Warn
	}
	log("refused a connection of another user", "uid", p.UID, "pid", p.PID, "allowed", "this user, root"+groupNote(l.policy))
}

func groupNote(p localsock.Policy) string {
	if p.Group < 0 {
		return ""
	}
	return fmt.Sprintf(", members of gid %d", p.Group)
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
	url, stop = s.serveMetrics(mlis)
	return url, stop, nil
}

// serveMetrics serves the metrics on mlis in the background.
func (s *Server) serveMetrics(mlis net.Listener) (url string, stop func() error) {
	srv := &http.Server{Handler: s.Metrics(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(mlis)
	return "http://" + mlis.Addr().String() + "/metrics", srv.Close
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

// DefaultSocket is where attnplug serve listens without --listen
// (client.DefaultAddress): serve.sock in the user's private socket
// directory, $XDG_RUNTIME_DIR/attnplug, else
// <os.TempDir()>/attnplug-<uid>.
func DefaultSocket() string { return client.DefaultAddress() }

// ServeListener puts the services on a gRPC server of its own (with the
// server's ServerOptions and the Listener's Creds), serves the metrics
// on its metrics address, and serves until ctx ends (Serve). The caller
// closes l afterwards.
func (s *Server) ServeListener(ctx context.Context, l *Listener) error {
	opts := s.ServerOptions()
	if l.o.Creds != nil {
		opts = append(opts, l.o.Creds)
	}
	srv := grpc.NewServer(opts...)
	s.Register(srv)
	metricsAt := "off"
	if l.metrics != nil {
		url, stop := s.serveMetrics(l.metrics)
		defer stop()
		metricsAt = url
	}
	return s.Serve(ctx, srv, l.grpc, func() {
		if l.o.Ready != nil {
			l.o.Ready(l.Addr(), metricsAt)
		}
	})
}

// ListenAndServe listens as o says (Listen), serves there until ctx ends
// (ServeListener), and closes the listener: a Unix socket is removed at
// the end, unless another server took its path since.
func (s *Server) ListenAndServe(ctx context.Context, o ListenOptions) error {
	l, err := Listen(o)
	if err != nil {
		return err
	}
	defer l.Close()
	return s.ServeListener(ctx, l)
}
