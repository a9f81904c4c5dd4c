package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/engine/internal/convert"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Config is how a Server routes requests that name no backend, and where
// it logs.
type Config struct {
	// Prefill and Decode are the backends of a request that names none,
	// as sglang's hybrid attention backend chooses them: decode and idle
	// batches go to Decode, target-verify and draft-extend batches to
	// Decode when SpeculativeDecode is set and to Prefill otherwise, every
	// other batch to Prefill. Empty: such a request is refused (the
	// backend is required).
	Prefill, Decode string
	// SpeculativeDecode is sglang's speculative attention mode "decode".
	SpeculativeDecode bool
	// Logger is where reloads are logged; nil: nowhere.
	Logger hclog.Logger
	// MaxInflightBytes bounds the memory of the Dispatch and DispatchBatch
	// requests and the KernelModules answers the server holds at once
	// (budget.go): a request is decoded once 16 times its wire size fits,
	// an answer is made once its size fits, until its call ends, and one
	// that finds no room within MaxInflightWait is refused with
	// RESOURCE_EXHAUSTED. Default (0): DefaultMaxInflightBytes; negative:
	// no bound. The options that put it in force are Server.ServerOptions.
	MaxInflightBytes int64
	// MaxInflightWait is how long a request waits for room in
	// MaxInflightBytes. Default: DefaultMaxInflightWait.
	MaxInflightWait time.Duration
}

// Server serves the engine API (package dispatchv1) over a registry: the
// Dispatcher and Admin services, gRPC health and reflection. It counts what
// it answers in Prometheus metrics (Metrics). Its methods are safe for
// concurrent use.
type Server struct {
	ds       *dispatchServer
	budget   *budget
	health   *health.Server
	stopOnce sync.Once
}

// NewServer returns a Server over reg; the caller keeps reg open as long
// as the server serves, and closes it after Stop.
func NewServer(reg *registry.Registry, cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	limit, wait := cfg.MaxInflightBytes, cfg.MaxInflightWait
	switch {
	case limit == 0:
		limit = DefaultMaxInflightBytes
	case limit < 0:
		limit = math.MaxInt64 // no bound; the sizes are still checked
	}
	if wait <= 0 {
		wait = DefaultMaxInflightWait
	}
	b := newBudget(limit, wait)
	return &Server{
		budget: b,
		ds: &dispatchServer{
			reg:     reg,
			hybrid:  hybrid{prefill: cfg.Prefill, decode: cfg.Decode, specDecode: cfg.SpeculativeDecode},
			metrics: newMetrics(reg),
			log:     log,
			stop:    make(chan struct{}),
			budget:  b,
		},
		health: health.NewServer(),
	}
}

// ServerOptions are the options of the gRPC server that s registers on:
// the message-size limits of wire.ServerOptions, the refusal of requests
// larger than any valid one of their kind, and the bound of
// Config.MaxInflightBytes (budget.go). Pass them to grpc.NewServer, with
// any of the caller's own.
func (s *Server) ServerOptions() []grpc.ServerOption {
	opts := wire.ServerOptions()
	opts = append(opts, s.budget.options()...)
	return opts
}

// Register registers the Dispatcher and Admin services on g, with gRPC
// health (every service SERVING until Stop) and reflection.
func (s *Server) Register(g *grpc.Server) {
	dispatchv1.RegisterDispatcherServer(g, s.ds)
	dispatchv1.RegisterAdminServer(g, s.ds)
	dispatchv1.RegisterKernelsServer(g, s.ds)
	healthpb.RegisterHealthServer(g, s.health)
	for _, name := range []string{"", dispatchv1.Dispatcher_ServiceDesc.ServiceName, dispatchv1.Admin_ServiceDesc.ServiceName, dispatchv1.Kernels_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	reflection.Register(g)
}

// Reload looks at the plugin directories again and hot-swaps every plugin
// whose binary changed, as Admin.Reload does (attnplug serve calls it on
// SIGHUP); it logs and counts the changes.
func (s *Server) Reload(ctx context.Context) ([]registry.Change, error) {
	return s.ds.reload(ctx)
}

// Metrics is the Prometheus exposition of the server's metrics at
// /metrics.
func (s *Server) Metrics() http.Handler { return s.ds.metrics.handler() }

// Stop marks every service NOT_SERVING and ends the Watch streams, which
// a graceful stop of the gRPC server waits for. Call it before stopping
// the gRPC server; later calls do nothing.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.health.Shutdown()
		close(s.ds.stop)
	})
}

// hybrid routes a request without a backend the way sglang's hybrid
// attention backend does.
type hybrid struct {
	prefill, decode string
	specDecode      bool // speculative attention mode "decode"
}

// backendFor is the backend of a request of mode m: decode and idle
// batches use the decode backend; target-verify and draft-extend use it
// when the speculative attention mode is decode, else the prefill one;
// everything else uses the prefill backend.
func (h hybrid) backendFor(m core.ForwardMode) string {
	switch {
	case m == core.ModeDecode || m == core.ModeIdle:
		return h.decode
	case m == core.ModeTargetVerify || m == core.ModeDraftExtendV2:
		if h.specDecode {
			return h.decode
		}
		return h.prefill
	}
	return h.prefill
}

// dispatchServer is the gRPC face of the registry.
type dispatchServer struct {
	dispatchv1.UnimplementedDispatcherServer
	dispatchv1.UnimplementedAdminServer
	dispatchv1.UnimplementedKernelsServer
	reg     *registry.Registry
	hybrid  hybrid
	metrics *metrics
	log     hclog.Logger
	stop    chan struct{} // closed when the server stops
	budget  *budget
}

// maxServeBatch is the most requests one DispatchBatch call may carry.
const maxServeBatch = wire.MaxBatchRequests

// convert turns a wire request into a core one, routing an empty backend.
func (s *dispatchServer) convert(in *dispatchv1.Request) (core.Request, error) {
	if in != nil && in.GetBackend() == "" {
		mode := core.ForwardMode(in.GetBatch().GetForwardMode())
		if mode.Valid() {
			in.Backend = s.hybrid.backendFor(mode)
		}
	}
	return convert.RequestFromProto(in)
}

func (s *dispatchServer) Dispatch(ctx context.Context, in *dispatchv1.DispatchRequest) (*dispatchv1.DispatchResponse, error) {
	t0 := time.Now()
	gen := s.reg.Generation()
	req, err := s.convert(in.GetRequest())
	var a core.Answer
	if err == nil {
		a, err = s.reg.Dispatch(ctx, &req)
	}
	if ctx.Err() != nil {
		return nil, wire.ToStatus(ctx.Err())
	}
	s.metrics.observe("Dispatch", time.Since(t0), 1)
	out := &dispatchv1.DispatchResponse{Answer: s.answer(req.Backend, a, err)}
	s.stamp(gen, out.Answer)
	return out, nil
}

func (s *dispatchServer) DispatchBatch(ctx context.Context, in *dispatchv1.DispatchBatchRequest) (*dispatchv1.DispatchBatchResponse, error) {
	t0 := time.Now()
	gen := s.reg.Generation()
	n := len(in.GetRequests())
	if n > maxServeBatch {
		return nil, wire.ToStatus(core.NewFieldError("requests", fmt.Sprintf("batch of %d is larger than the limit of %d", n, maxServeBatch)))
	}
	reqs := make([]core.Request, 0, n)
	idx := make([]int, n)
	out := &dispatchv1.DispatchBatchResponse{Answers: make([]*dispatchv1.Answer, n)}
	for i, r := range in.GetRequests() {
		req, err := s.convert(r)
		if err != nil {
			idx[i] = -1
			out.Answers[i] = s.answer(r.GetBackend(), core.Answer{}, err)
			continue
		}
		idx[i] = len(reqs)
		reqs = append(reqs, req)
	}
	res := make([]core.BatchAnswer, len(reqs))
	if err := s.reg.DispatchBatch(ctx, reqs, res); err != nil {
		return nil, wire.ToStatus(err)
	}
	for i, j := range idx {
		if j >= 0 {
			out.Answers[i] = s.answer(reqs[j].Backend, res[j].Answer, res[j].Err)
		}
	}
	s.metrics.observe("DispatchBatch", time.Since(t0), n)
	s.stamp(gen, out.Answers...)
	return out, nil
}

// answer converts one outcome and counts it.
func (s *dispatchServer) answer(backend string, a core.Answer, err error) *dispatchv1.Answer {
	if err != nil {
		s.metrics.refused(err)
		return convert.ErrorToAnswer(err)
	}
	s.metrics.dispatched(backend, a)
	return convert.AnswerToProto(a)
}

func (s *dispatchServer) reload(ctx context.Context) ([]registry.Change, error) {
	changes, err := s.reg.Reload(ctx)
	var refused *registry.ReloadRefusal
	switch {
	case errors.As(err, &refused):
		// Logged by the registry (Warn); counted as the rejection of
		// each plugin that keeps serving.
		s.metrics.reloadRefused(refused)
		return nil, err
	case err != nil:
		s.log.Error("reload failed", "error", err)
		return nil, err
	}
	for _, c := range changes {
		s.metrics.swapped(c)
		// The registry logs swaps (Info) and rejections (Warn) itself.
		if c.Action != "swapped" && c.Action != "rejected" {
			s.log.Info("reload", "plugin", c.Plugin, "action", c.Action, "old_version", c.OldVersion, "new_version", c.NewVersion)
		}
	}
	if len(changes) == 0 {
		s.log.Info("reload: no plugin changed")
	}
	s.log.Info("reload finished", "changes", len(changes))
	return changes, nil
}

func (s *dispatchServer) Reload(ctx context.Context, _ *dispatchv1.ReloadRequest) (*dispatchv1.ReloadResponse, error) {
	changes, err := s.reload(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	out := &dispatchv1.ReloadResponse{}
	for _, c := range changes {
		out.Changes = append(out.Changes, &dispatchv1.PluginChange{
			Plugin: c.Plugin, Action: c.Action, OldVersion: c.OldVersion, NewVersion: c.NewVersion,
			OldSha256: c.OldSHA256, NewSha256: c.NewSHA256, Reason: c.Reason,
		})
	}
	return out, nil
}

func (s *dispatchServer) ListPlugins(context.Context, *dispatchv1.ListPluginsRequest) (*dispatchv1.ListPluginsResponse, error) {
	out := &dispatchv1.ListPluginsResponse{}
	for _, p := range s.reg.Plugins() {
		out.Plugins = append(out.Plugins, &dispatchv1.PluginStatus{
			Name: p.Name, Path: p.Path, Version: p.Version, Sha256: p.SHA256, Names: p.Names,
			Status: string(p.Status), Reason: p.Reason, Pid: int32(p.PID), Restarts: int32(p.Restarts), LastError: p.LastError,
		})
	}
	return out, nil
}

// KernelModules answers the modules of the plugin serving a name, for the
// device the client describes.
func (s *dispatchServer) KernelModules(ctx context.Context, in *dispatchv1.KernelModulesRequest) (*dispatchv1.KernelModulesResponse, error) {
	if in.GetBackend() == "" || len(in.GetBackend()) > core.MaxBackendNameLen {
		return nil, wire.ToStatus(core.NewFieldError("backend", "must be a name of 1 to 256 bytes"))
	}
	dev, err := convert.DeviceFromProto(in.GetDevice(), "device")
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	mods, err := s.reg.KernelModules(ctx, in.GetBackend(), dev)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	var n int
	for _, m := range mods {
		n += len(m.Image)
	}
	if n > wire.MaxModulesBytes {
		return nil, wire.ToStatus(fmt.Errorf("%w: the modules of %s are %d bytes, more than an answer carries (%d)", core.ErrNoPlan, in.GetBackend(), n, wire.MaxModulesBytes))
	}
	if err := s.budget.holdAnswer(ctx, int64(n)); err != nil {
		return nil, err
	}
	return &dispatchv1.KernelModulesResponse{Modules: convert.ModulesToProto(mods)}, nil
}

// PlanKernel answers a plan, checked by the registry (launch.Check) for the
// device the client describes.
func (s *dispatchServer) PlanKernel(ctx context.Context, in *dispatchv1.PlanKernelRequest) (*dispatchv1.PlanKernelResponse, error) {
	req, err := convert.PlanRequestFromProto(in)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	p, err := s.reg.PlanKernel(ctx, &req)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	plan := convert.PlanToProto(p)
	plan.Key = req.Key(p.Reads.Effective()).String()
	return &dispatchv1.PlanKernelResponse{Plan: plan}, nil
}

// PlanStep answers the plan of an engine's forward batch, made by the
// registry from the engine's facts (registry.PlanStep) and checked there,
// with its bound and key.
func (s *dispatchServer) PlanStep(ctx context.Context, in *dispatchv1.PlanStepRequest) (*dispatchv1.PlanStepResponse, error) {
	step, err := convert.StepRequestFromProto(in)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	p, err := s.reg.PlanStep(ctx, &step)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return convert.StepPlanToProto(p), nil
}
