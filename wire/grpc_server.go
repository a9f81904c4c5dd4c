package wire

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
)

// MaxBatchRequests is the most requests one DispatchBatch call may carry.
const MaxBatchRequests = 1 << 16

// Server is the plugin side of the protocol: it serves a core.Backend as
// the pluginv1 Backend service. It never trusts a request: each is
// converted and validated before the backend sees it.
type Server struct {
	pb.UnimplementedBackendServer
	backend core.Backend
	// CheckRequests, when set before the server serves, makes every
	// dispatch call compare the request after the backend's call with a
	// copy made before it, and fail the call with an error wrapping
	// ErrRequestChanged when they differ. It costs a copy per request.
	CheckRequests bool
}

// ErrRequestChanged marks a call whose request the backend changed: a rule
// must leave its request as it was given (core.Request). Across the wire
// the error keeps its text, under core.ErrProtocol.
var ErrRequestChanged = errors.New("the rules changed the request they were given")

// NewServer returns a Server for b.
func NewServer(b core.Backend) *Server { return &Server{backend: b} }

// Describe returns the backend's description with this package's protocol
// version.
func (s *Server) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	d, err := s.backend.Describe(ctx)
	if err != nil {
		return nil, ToStatus(fmt.Errorf("describe: %w", err))
	}
	out := descriptionToProto(d)
	out.ProtocolVersion = ProtocolVersion
	return out, nil
}

// Dispatch decides one request.
func (s *Server) Dispatch(ctx context.Context, in *pb.DispatchRequest) (*pb.DispatchResponse, error) {
	req, err := requestFromProto(in.GetRequest())
	if err != nil {
		return nil, ToStatus(err)
	}
	var before core.Request
	if s.CheckRequests {
		before = CloneRequest(&req)
	}
	m, err := s.backend.Dispatch(ctx, &req)
	if err == nil && s.CheckRequests {
		err = RequestChanged(&before, &req)
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pb.DispatchResponse{Method: methodToProto(m)}, nil
}

// DispatchBatch decides every request of the batch; a bad request gets its
// own error result and does not fail the others.
func (s *Server) DispatchBatch(ctx context.Context, in *pb.DispatchBatchRequest) (*pb.DispatchBatchResponse, error) {
	n := len(in.GetRequests())
	if n > MaxBatchRequests {
		return nil, ToStatus(core.NewFieldError("requests", fmt.Sprintf("batch of %d is larger than the limit of %d", n, MaxBatchRequests)))
	}
	reqs := make([]core.Request, n)
	results := make([]core.Result, n)
	valid := make([]bool, n)
	for i, r := range in.GetRequests() {
		req, err := requestFromProto(r)
		if err != nil {
			results[i].Err = err
			continue
		}
		reqs[i], valid[i] = req, true
	}
	var before []core.Request
	if s.CheckRequests {
		before = make([]core.Request, n)
		for i := range reqs {
			before[i] = CloneRequest(&reqs[i])
		}
	}
	if bb, ok := s.backend.(core.BatchBackend); ok {
		sub, idx := compact(reqs, valid)
		subOut := make([]core.Result, len(sub))
		if err := bb.DispatchBatch(ctx, sub, subOut); err != nil {
			return nil, ToStatus(err)
		}
		for j, i := range idx {
			results[i] = subOut[j]
			reqs[i] = sub[j]
		}
	} else {
		for i := range reqs {
			if valid[i] {
				results[i].Method, results[i].Err = s.backend.Dispatch(ctx, &reqs[i])
			}
		}
	}
	for i := range before {
		if err := RequestChanged(&before[i], &reqs[i]); valid[i] && results[i].Err == nil && err != nil {
			results[i] = core.Result{Err: err}
		}
	}
	out := &pb.DispatchBatchResponse{Results: make([]*pb.Result, n)}
	for i, r := range results {
		pr := &pb.Result{}
		if r.Err != nil {
			errorToResult(r.Err, pr)
		} else {
			pr.Method = methodToProto(r.Method)
		}
		out.Results[i] = pr
	}
	return out, nil
}

// Configure passes the host's hardware to a backend that is a
// core.Configurer; any other backend accepts every host.
func (s *Server) Configure(ctx context.Context, in *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	info, err := hostInfoFromProto(in.GetHost())
	if err != nil {
		return nil, ToStatus(err)
	}
	if c, ok := s.backend.(core.Configurer); ok {
		if err := c.Configure(ctx, info); err != nil {
			return nil, ToStatus(err)
		}
	}
	return &pb.ConfigureResponse{}, nil
}

func compact(reqs []core.Request, valid []bool) ([]core.Request, []int) {
	sub := make([]core.Request, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, ok := range valid {
		if ok {
			sub = append(sub, reqs[i])
			idx = append(idx, i)
		}
	}
	return sub, idx
}

// RunKernel runs a kernel for a backend that is a core.KernelRunner; any
// other backend answers Unimplemented, as a plugin older than the RPC.
func (s *Server) RunKernel(ctx context.Context, in *pb.RunKernelRequest) (*pb.RunKernelResponse, error) {
	kr, ok := s.backend.(core.KernelRunner)
	if !ok {
		return s.UnimplementedBackendServer.RunKernel(ctx, in)
	}
	req, err := kernelRequestFromProto(in)
	if err != nil {
		return nil, ToStatus(err)
	}
	res, err := kr.RunKernel(ctx, &req)
	if err != nil {
		return nil, ToStatus(err)
	}
	return kernelResultToProto(res), nil
}

// KernelModules returns the device code of a backend that is a
// core.KernelPlanner; any other backend answers Unimplemented, as a plugin
// older than the RPC. Modules larger than the protocol's message limit are
// refused here, as no device code, rather than failing the transport.
func (s *Server) KernelModules(ctx context.Context, in *pb.KernelModulesRequest) (*pb.KernelModulesResponse, error) {
	kp, ok := s.backend.(core.KernelPlanner)
	if !ok {
		return s.UnimplementedBackendServer.KernelModules(ctx, in)
	}
	dev, err := deviceFromProto(in.GetDevice(), "device")
	if err != nil {
		return nil, ToStatus(err)
	}
	mods, err := kp.KernelModules(ctx, dev)
	if err != nil {
		return nil, ToStatus(err)
	}
	if n := modulesBytes(mods); n > MaxModulesBytes {
		return nil, ToStatus(fmt.Errorf("%w: the kernel modules' images hold %d bytes, more than one answer carries (%d)", core.ErrNoPlan, n, MaxModulesBytes))
	}
	return &pb.KernelModulesResponse{Modules: modulesToProto(mods)}, nil
}

// PlanKernel plans a kernel for a backend that is a core.KernelPlanner;
// any other backend answers Unimplemented.
func (s *Server) PlanKernel(ctx context.Context, in *pb.PlanKernelRequest) (*pb.PlanKernelResponse, error) {
	kp, ok := s.backend.(core.KernelPlanner)
	if !ok {
		return s.UnimplementedBackendServer.PlanKernel(ctx, in)
	}
	req, err := planRequestFromProto(in)
	if err != nil {
		return nil, ToStatus(err)
	}
	p, err := kp.PlanKernel(ctx, &req)
	if err != nil {
		return nil, ToStatus(err)
	}
	if p == nil {
		return nil, ToStatus(fmt.Errorf("%w: plan kernel: the backend returned no plan and no error", core.ErrProtocol))
	}
	return &pb.PlanKernelResponse{Plan: planToProto(p)}, nil
}
