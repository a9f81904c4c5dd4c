package client

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/internal/convert"
	"github.com/attnplug/attnplug/grpcstatus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes is the largest gRPC message a Client sends or takes:
// the server's limit (wire.MaxMessageBytes; a test checks they agree).
const MaxMessageBytes = 64 << 20

// callTimeout bounds one call of a Client to a server, within the
// caller's deadline.
const callTimeout = 30 * time.Second

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
}

// Dial returns a client of the server at addr (as SplitAddress reads it)
// over creds; nil creds is plaintext. It does not wait for the server: a
// server that is not there fails the first call.
func Dial(addr string, creds credentials.TransportCredentials) (*Client, error) {
	network, address := SplitAddress(addr)
	target := address
	if network == "unix" {
		if address == "" {
			return nil, fmt.Errorf("dial %q: names no socket path", addr)
		}
		abs, err := filepath.Abs(address)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		target = "unix://" + abs
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &Client{conn: conn, rpc: dispatchv1.NewDispatcherClient(conn), kernels: dispatchv1.NewKernelsClient(conn)}, nil
}

// Dispatch answers req on the server. An error of the call itself (a
// server that is gone) wraps the core sentinel of its gRPC status code.
func (c *Client) Dispatch(ctx context.Context, req *core.Request) (core.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.rpc.Dispatch(ctx, &dispatchv1.DispatchRequest{Request: convert.RequestToProto(req)})
	if err != nil {
		return core.Answer{}, fmt.Errorf("server: %w", grpcstatus.FromStatus(err))
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
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.rpc.DispatchBatch(ctx, in)
	if err != nil {
		return fmt.Errorf("server: %w", grpcstatus.FromStatus(err))
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
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.kernels.KernelModules(ctx, &dispatchv1.KernelModulesRequest{Backend: backend, Device: convert.DeviceToProto(dev)})
	if err != nil {
		return nil, fmt.Errorf("server: %w", kernelError(err))
	}
	return convert.ModulesFromProto(resp.GetModules()), nil
}

// PlanKernel returns the launches that run req.Method's kernel of the
// handler req.Backend on req's batch, checked by the server as its own
// host checks plans (launch.Check). "No device plan" is an error wrapping
// core.ErrNoPlan; a malformed request, core.ErrInvalidRequest.
func (c *Client) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.kernels.PlanKernel(ctx, convert.PlanRequestToProto(req))
	if err != nil {
		return nil, fmt.Errorf("server: %w", kernelError(err))
	}
	return convert.PlanFromProto(resp.GetPlan())
}

// PlanStep returns the plan of one forward batch of an engine, made by the
// server from the engine's facts (core.StepRequest) and checked there,
// with the bound it holds for and its key. Errors as PlanKernel's.
func (c *Client) PlanStep(ctx context.Context, s *core.StepRequest) (*core.StepPlan, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.kernels.PlanStep(ctx, convert.StepRequestToProto(s))
	if err != nil {
		return nil, fmt.Errorf("server: %w", kernelError(err))
	}
	return convert.StepPlanFromProto(resp)
}

// kernelError is the error of a Kernels call: UNIMPLEMENTED is "no device
// plan" (core.ErrNoPlan), with the server's message; other codes as
// grpcstatus.FromStatus reads them.
func kernelError(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return fmt.Errorf("%w: %s", core.ErrNoPlan, st.Message())
	}
	return grpcstatus.FromStatus(err)
}
