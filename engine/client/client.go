package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/internal/convert"
	"github.com/attnplug/attnplug/grpcstatus"
	"github.com/attnplug/attnplug/localsock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes is the largest gRPC message a Client sends or takes:
// the server's limit (wire.MaxMessageBytes; a test checks they agree).
const MaxMessageBytes = 64 << 20

// callTimeout bounds one call of a Client to a server, within the
// caller's deadline, unless WithTimeout says otherwise.
const callTimeout = 30 * time.Second

// connectGrace is how much longer than a call a connection attempt of a
// Client given WithTimeout may take.
const connectGrace = 250 * time.Millisecond

// SplitAddress splits an address of attnplug serve into its network and
// address: unix:///path, unix:path and a path that starts with / or . are
// unix sockets; host:port (or tcp://host:port) is TCP. It does not check
// the address.
func SplitAddress(addr string) (network, address string) {
	if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
		return "unix", rest
	}
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", rest
	}
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".") {
		return "unix", addr
	}
	return "tcp", strings.TrimPrefix(addr, "tcp://")
}

// Client is a connection to a running attnplug serve: the Go client of
// the engine API that attnplug dispatch --connect uses. Errors keep their
// identity: an answer's error satisfies errors.Is with the core sentinel
// it wrapped on the server (core.ErrInvalidRequest, core.ErrRefused, ...),
// and errors.As finds the *core.FieldError of an invalid field. A Client
// is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	rpc     dispatchv1.DispatcherClient
	kernels dispatchv1.KernelsClient
	timeout time.Duration
	// refused is why the last connection to a Unix socket was refused by
	// the peer check, nil once one is accepted.
	refused atomic.Pointer[untrustedPeer]
}

// DefaultAddress is where attnplug serve listens without --listen: the
// Unix socket serve.sock in the user's private socket directory,
// $XDG_RUNTIME_DIR/attnplug, else <os.TempDir()>/attnplug-<uid> (made
// with mode 0700 and checked by the server; the Python client's
// default_address is the same).
func DefaultAddress() string {
	return "unix://" + filepath.Join(localsock.Dir(), DefaultSocketName)
}

// DefaultSocketName is the name of the default socket in the private
// socket directory.
const DefaultSocketName = "serve.sock"

// DialOption configures Dial.
type DialOption func(*dialConfig)

type dialConfig struct {
	timeout time.Duration // of a call
	connect time.Duration // of a connection; 0: gRPC's
}

// WithTimeout bounds connecting to the server and each call to it by d
// (within the caller's deadline); d <= 0 keeps the defaults: 30 seconds a
// call, and gRPC's 20 seconds to connect.
func WithTimeout(d time.Duration) DialOption {
	return func(c *dialConfig) {
		if d > 0 {
			c.timeout, c.connect = d, d
		}
	}
}

// Dial returns a client of the server at addr (as SplitAddress reads it)
// over creds; nil creds is plaintext. It does not wait for the server: a
// server that is not there fails the first call.
//
// On a Unix socket every connection is checked before a byte is trusted:
// the process listening must run as the caller's user or as root (its
// credentials as the kernel recorded them, SO_PEERCRED), else the
// connection is closed and the call fails (core.ErrUnavailable) with an
// error naming the socket, the server's uid and the one expected: another
// local user may have taken the socket's path first. "unix://@name" is
// the abstract socket name, which has no file and no mode to protect it.
// On TCP nothing is checked: a loopback address is open to every local
// user (use TLS with client certificates where that matters).
func Dial(addr string, creds credentials.TransportCredentials, opts ...DialOption) (*Client, error) {
	cfg := dialConfig{timeout: callTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Client{timeout: cfg.timeout}
	network, address := SplitAddress(addr)
	target := address
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	gopts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))}
	if cfg.connect > 0 {
		// A connection attempt outlasts the call waiting on it by
		// connectGrace, so that the call ends at its own deadline and
		// says so, rather than with the transport's closed connection.
		gopts = append(gopts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: cfg.connect + connectGrace}))
	}
	if network == "unix" {
		if address == "" {
			return nil, fmt.Errorf("dial %q: names no socket path", addr)
		}
		path := address
		if !strings.HasPrefix(address, "@") {
			abs, err := filepath.Abs(address)
			if err != nil {
				return nil, fmt.Errorf("dial %s: %w", addr, err)
			}
			path = abs
		}
		// Every connection goes through dialUnix, which checks the peer;
		// the target only names the server to gRPC.
		target = "passthrough:///localhost"
		gopts = append(gopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return c.dialUnix(ctx, path)
		}))
	}
	conn, err := grpc.NewClient(target, gopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.conn, c.rpc, c.kernels = conn, dispatchv1.NewDispatcherClient(conn), dispatchv1.NewKernelsClient(conn)
	return c, nil
}

// dialUnix connects to the Unix socket at path ("@name": the abstract
// one) and checks that the process listening runs as this user or root.
func (c *Client) dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		c.refused.Store(nil)
		return nil, err
	}
	if err := checkPeer(conn, path); err != nil {
		conn.Close()
		c.refused.Store(err)
		return nil, err
	}
	c.refused.Store(nil)
	return conn, nil
}

// callError is the error of a failed call whose context was ctx: a call
// that failed for want of a server the peer check accepts says why the
// check refused it; one whose deadline passed (whatever the transport
// reported as it gave up) says so; other errors wrap the core sentinel of
// their gRPC code (grpcstatus.FromStatus).
func (c *Client) callError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		err = status.Errorf(codes.DeadlineExceeded, "the call's deadline passed (the client's timeout of %s, or the caller's earlier one): %s",
			c.timeout, status.Convert(err).Message())
	}
	if status.Code(err) == codes.Unavailable {
		if r := c.refused.Load(); r != nil {
			return fmt.Errorf("server: %w", r)
		}
	}
	return fmt.Errorf("server: %w", grpcstatus.FromStatus(err))
}

// untrustedPeer is a connection the peer check refused: the server is
// unavailable to this client.
type untrustedPeer struct{ msg string }

func (e *untrustedPeer) Error() string { return e.msg }
func (e *untrustedPeer) Unwrap() error { return core.ErrUnavailable }

// checkPeer checks that the process at the other end of conn, a
// connection to the Unix socket path, runs as this user or as root, and
// says whom it found otherwise.
func checkPeer(conn net.Conn, path string) *untrustedPeer {
	p, err := localsock.PeerOf(conn)
	if err != nil {
		return &untrustedPeer{fmt.Sprintf("%s: cannot tell who serves it, so its answers are not trusted: %v", path, err)}
	}
	if localsock.Self.Allows(p) {
		return nil
	}
	hint := fmt.Sprintf("another local user may have taken the socket's path; serve in a directory only you can write, such as the default %s", localsock.Dir())
	if strings.HasPrefix(path, "@") {
		hint = "any local user may take an abstract socket's name; serve on a path in a directory only you can write, such as the default " + localsock.Dir()
	}
	return &untrustedPeer{fmt.Sprintf("%s is served by %s, not by you (uid %d) or root: its answers are not trusted (%s)",
		path, localsock.Describe(p.UID), os.Getuid(), hint)}
}

// Dispatch answers req on the server. An error of the call itself (a
// server that is gone) wraps the core sentinel of its gRPC status code.
func (c *Client) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rpc.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: convert.RequestToProto(req)})
	if err != nil {
		return core.Answer{}, c.callError(ctx, err)
	}
	if resp.GetAnswer() == nil {
		return core.Answer{}, fmt.Errorf("%w: server sent no answer", core.ErrProtocol)
	}
	return convert.AnswerFromProto(resp.GetAnswer())
}

// DispatchBatch sends reqs in one call and writes the answer of reqs[i]
// to out[i]; len(out) must be len(reqs). It returns an error only when the
// call fails as a whole: then out holds nothing.
func (c *Client) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.BatchAnswer) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("engine: %d results for %d requests", len(out), len(reqs))
	}
	in := &dispatchv1.DispatchBatchRequest{Requests: make([]*dispatchv1.Request, len(reqs))}
	for i := range reqs {
		in.Requests[i] = convert.RequestToProto(&reqs[i])
	}
	// A server that is not there fails the call at once; one that hangs
	// fails it at the deadline.
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rpc.DispatchBatch(ctx, in)
	if err != nil {
		return c.callError(ctx, err)
	}
	if len(resp.GetAnswers()) != len(reqs) {
		return fmt.Errorf("%w: server answered %d of %d requests", core.ErrProtocol, len(resp.GetAnswers()), len(reqs))
	}
	for i, a := range resp.GetAnswers() {
		ans, err := convert.AnswerFromProto(a)
		out[i] = core.BatchAnswer{Answer: ans, Err: err}
	}
	return nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// KernelModules returns the device code of the plugin serving backend, for
// dev, as the server's registry hands it (hashes checked, pinned by the
// server's lock file). "No device code" is an error wrapping
// core.ErrNoPlan.
func (c *Client) KernelModules(ctx context.Context, backend string, dev core.DeviceInfo) ([]core.KernelModule, error) {
	if err := dev.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.kernels.KernelModules(ctx, &dispatchv1.KernelModulesRequest{Backend: backend, Device: convert.DeviceToProto(dev)})
	if err != nil {
		return nil, c.kernelError(ctx, err)
	}
	return convert.ModulesFromProto(resp.GetModules()), nil
}

// PlanKernel returns the launches that run req.Method's kernel of the
// handler req.Backend on req's batch, checked by the server as its own
// host checks plans (launch.Check). "No device plan" is an error wrapping
// core.ErrNoPlan; a malformed request, core.ErrInvalidRequest.
func (c *Client) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	if req == nil {
		return nil, core.NewFieldError("request", "missing")
	}
	if err := req.Device.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.kernels.PlanKernel(ctx, convert.PlanRequestToProto(req))
	if err != nil {
		return nil, c.kernelError(ctx, err)
	}
	return convert.PlanFromProto(resp.GetPlan())
}

// PlanStep returns the plan of one forward batch of an engine, made by the
// server from the engine's facts (core.StepRequest) and checked there,
// with the bound it holds for and its key. Errors as PlanKernel's.
func (c *Client) PlanStep(ctx context.Context, s *core.StepRequest) (*core.StepPlan, error) {
	if s == nil {
		return nil, core.NewFieldError("step", "missing")
	}
	if err := s.Device.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.kernels.PlanStep(ctx, convert.StepRequestToProto(s))
	if err != nil {
		return nil, c.kernelError(ctx, err)
	}
	return convert.StepPlanFromProto(resp)
}

// kernelError is the error of a Kernels call: UNIMPLEMENTED is "no device
// plan" (core.ErrNoPlan), with the server's message; other errors as
// callError says.
func (c *Client) kernelError(ctx context.Context, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return fmt.Errorf("server: %w: %s", core.ErrNoPlan, st.Message())
	}
	return c.callError(ctx, err)
}
