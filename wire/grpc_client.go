package wire

import (
	"context"
	"fmt"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Client is the host side of the protocol: a core.BatchBackend,
// core.Configurer, core.KernelRunner and core.KernelPlanner that asks a
// plugin over a gRPC connection. Whether the plugin has kernels and device
// code is in its description, since every method exists on a Client. It checks what comes back: an answer that
// is not a known method is an error wrapping core.ErrProtocol. It is safe
// for concurrent use.
type Client struct {
	rpc pb.BackendClient
}

// NewClient returns a Client over conn.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{rpc: pb.NewBackendClient(conn)}
}

// Describe asks the plugin what it serves.
func (c *Client) Describe(ctx context.Context) (*core.Description, error) {
	resp, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe: %w", FromStatus(err))
	}
	return descriptionFromProto(resp)
}

// Dispatch asks the plugin to decide req.
func (c *Client) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	resp, err := c.rpc.Dispatch(ctx, &pb.DispatchRequest{Request: requestToProto(req)})
	if err != nil {
		return 0, FromStatus(err)
	}
	return methodFromProto(resp.GetMethod())
}

// Configure tells the plugin the host's hardware. A plugin older than the
// Configure RPC accepts every host.
func (c *Client) Configure(ctx context.Context, info core.HostInfo) error {
	_, err := c.rpc.Configure(ctx, &pb.ConfigureRequest{Host: hostInfoToProto(info)})
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configure: %w", FromStatus(err))
	}
	return nil
}

// DispatchBatch asks the plugin to decide every request of reqs in one call.
func (c *Client) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.Result) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("dispatch batch: %d results for %d requests", len(out), len(reqs))
	}
	in := &pb.DispatchBatchRequest{Requests: make([]*pb.Request, len(reqs))}
	msgs := make([]pb.Request, len(reqs))
	for i := range reqs {
		fillRequestProto(&reqs[i], &msgs[i])
		in.Requests[i] = &msgs[i]
	}
	resp, err := c.rpc.DispatchBatch(ctx, in)
	if err != nil {
		return FromStatus(err)
	}
	if got := len(resp.GetResults()); got != len(reqs) {
		return fmt.Errorf("%w: dispatch batch: %d results for %d requests", core.ErrProtocol, got, len(reqs))
	}
	for i, r := range resp.GetResults() {
		if err := resultError(r); err != nil {
			out[i] = core.Result{Err: err}
			continue
		}
		m, err := methodFromProto(r.GetMethod())
		out[i] = core.Result{Method: m, Err: err}
	}
	return nil
}

// RunKernel asks the plugin to run a kernel on tensors in shared memory;
// only the buffer's name, the shapes and the offsets travel. A plugin older
// than the RunKernel RPC gets an error wrapping core.ErrNoKernel.
func (c *Client) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	resp, err := c.rpc.RunKernel(ctx, kernelRequestToProto(req))
	if err != nil {
		// Unimplemented: a plugin older than the RPC, or one whose catalog
		// lacks the kernel.
		return nil, fromStatusUnsupported(err, core.ErrNoKernel)
	}
	return kernelResultFromProto(resp), nil
}

// KernelModules asks the plugin for its device code for dev. A plugin
// older than the RPC, or one without device code for dev, gives an error
// wrapping core.ErrNoPlan. The images are returned as they arrived; the
// caller checks their hashes.
func (c *Client) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	resp, err := c.rpc.KernelModules(ctx, &pb.KernelModulesRequest{Device: deviceToProto(dev)})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", fromStatusUnsupported(err, core.ErrNoPlan))
	}
	return modulesFromProto(resp.GetModules()), nil
}

// PlanKernel asks the plugin for the launches that run req's kernel on
// req's batch. A plugin older than the RPC, or one without a device plan
// for req, gives an error wrapping core.ErrNoPlan. The caller checks the
// plan (launch.Check) before it trusts it.
func (c *Client) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	resp, err := c.rpc.PlanKernel(ctx, planRequestToProto(req))
	if err != nil {
		return nil, fmt.Errorf("plan kernel: %w", fromStatusUnsupported(err, core.ErrNoPlan))
	}
	return planFromProto(resp.GetPlan())
}
