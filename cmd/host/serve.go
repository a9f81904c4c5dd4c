package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/registry"
	"github.com/attnplug/attnplug/wire"
	pb "github.com/attnplug/attnplug/wire/pluginv1"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// defaultSocket is where serve listens without --listen.
func defaultSocket() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return "unix://" + filepath.Join(dir, fmt.Sprintf("attnplug-%d.sock", os.Getuid()))
}

// listenAddr splits an address into its network and address: unix:///path,
// unix:path and a path that starts with / or . are unix sockets; host:port
// (or tcp://host:port) is TCP.
func listenAddr(addr string) (network, address string) {
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

func runServe(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	var sf selectFlags
	sf.register(fs)
	listen := fs.String("listen", defaultSocket(), "where to serve gRPC: unix:///path/to.sock (or a path starting with / or .), or host:port for TCP (an address that is not loopback needs --tls-cert or --insecure)")
	metricsAddr := fs.String("metrics-listen", "127.0.0.1:9464", "HTTP address of the Prometheus metrics (/metrics); empty turns them off")
	specMode := fs.String("speculative-attention-mode", "prefill", "which backend answers target-verify and draft-extend batches: prefill or decode")
	matchHW := fs.Bool("match-hardware", true, "start only the plugins whose hardware this host has, and check forced backends against it")
	noAnswerCache := fs.Bool("no-answer-cache", false, "ask the plugin for every request instead of caching answers by the facts its rules read")
	var tf serveTLSFlags
	tf.register(fs)
	if err := parseFlags(fs, e, args, "attnplug serve [flags]"); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	if *specMode != "prefill" && *specMode != "decode" {
		return &usageError{fmt.Sprintf("--speculative-attention-mode: %q (want prefill or decode)", *specMode)}
	}
	if err := checkAddr("--listen", *listen, true); err != nil {
		return err
	}
	if *metricsAddr != "" {
		if err := checkAddr("--metrics-listen", *metricsAddr, false); err != nil {
			return err
		}
	}
	logger, err := h.logger(e)
	if err != nil {
		return err
	}
	network, address := listenAddr(*listen)
	creds, err := tf.serverOption(ctx, network, address, logger.Named("serve"))
	if err != nil {
		return err
	}
	tp, err := sf.tp()
	if err != nil {
		return err
	}
	report, err := detect.Detect(ctx, detect.Options{Root: "/", TPSize: tp, NoDriverQuery: !*matchHW})
	if err != nil {
		return err
	}
	hy := hybrid{specDecode: *specMode == "decode"}
	var host *core.HostInfo
	if *matchHW {
		sel, err := selectBackends(report, &sf)
		if err != nil {
			return err
		}
		for _, w := range sel.Warnings {
			logger.Warn("backend selection", "warning", w)
		}
		hy.prefill, hy.decode = sel.Prefill, sel.Decode
		info := report.HostInfo()
		host = &info
	} else {
		if hy.prefill, hy.decode, err = unmatchedSelection(&sf); err != nil {
			return err
		}
	}
	reg, err := h.openRegistryWith(ctx, logger, func(c *registry.Config) {
		c.Host = host
		c.NoAnswerCache = *noAnswerCache
	})
	if err != nil {
		return err
	}
	defer reg.Close()
	if _, err := reg.Start(ctx); err != nil {
		logger.Warn("not every plugin started", "error", err)
	}

	m := newMetrics(reg)
	opts := wire.ServerOptions()
	if creds != nil {
		opts = append(opts, creds)
	}
	srv := grpc.NewServer(opts...)
	ds := &dispatchServer{reg: reg, hybrid: hy, metrics: m, log: logger.Named("serve"), stop: make(chan struct{})}
	dispatchv1.RegisterDispatcherServer(srv, ds)
	dispatchv1.RegisterAdminServer(srv, ds)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	for _, name := range []string{"", dispatchv1.Dispatcher_ServiceDesc.ServiceName, dispatchv1.Admin_ServiceDesc.ServiceName} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	reflection.Register(srv)

	if network == "unix" {
		if err := removeStaleSocket(address); err != nil {
			return err
		}
	}
	lis, err := net.Listen(network, address)
	if err != nil {
		return fmt.Errorf("serve: listen %s: %w", *listen, err)
	}
	if network == "unix" {
		defer os.Remove(address)
	}
	var metricsSrv *http.Server
	metricsAt := "off"
	if *metricsAddr != "" {
		mlis, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("serve: metrics listen %s: %w", *metricsAddr, err)
		}
		metricsSrv = &http.Server{Handler: m.handler(), ReadHeaderTimeout: 5 * time.Second}
		go metricsSrv.Serve(mlis)
		defer metricsSrv.Close()
		metricsAt = "http://" + mlis.Addr().String() + "/metrics"
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				ds.reload(ctx)
			}
		}
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	// The ready line on stderr tells scripts and tests where to connect.
	fmt.Fprintf(e.stderr, "attnplug serve: listening on %s, metrics %s (prefill %s, decode %s)\n", describeAddr(network, lis.Addr().String()), metricsAt, hy.prefill, hy.decode)
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	close(ds.stop) // ends the Watch streams, which GracefulStop waits for
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	return nil
}

func describeAddr(network, addr string) string {
	if network == "unix" {
		return "unix://" + addr
	}
	return addr
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

// unmatchedSelection picks the backends from the flags alone, without the
// hardware (--match-hardware=false); triton when nothing is given.
func unmatchedSelection(sf *selectFlags) (prefill, decode string, err error) {
	cfg, err := sf.loadConfig()
	if err != nil {
		return "", "", err
	}
	first := func(vals ...string) string {
		for _, v := range vals {
			if v != "" {
				return v
			}
		}
		return core.TritonName
	}
	var cb, cp, cd string
	if cfg != nil {
		cb, cp, cd = cfg.Backend, cfg.PrefillBackend, cfg.DecodeBackend
	}
	env := os.Getenv(detect.EnvBackend)
	return first(sf.prefillBackend, sf.backend, env, cp, cb), first(sf.decodeBackend, sf.backend, env, cd, cb), nil
}

// dispatchServer is the gRPC face of the registry.
type dispatchServer struct {
	dispatchv1.UnimplementedDispatcherServer
	dispatchv1.UnimplementedAdminServer
	reg     *registry.Registry
	hybrid  hybrid
	metrics *metrics
	log     hclog.Logger
	stop    chan struct{} // closed when the server stops
}

// maxServeBatch is the most requests one DispatchBatch call may carry.
const maxServeBatch = wire.MaxBatchRequests

// convert turns a wire request into a core one, routing an empty backend.
func (s *dispatchServer) convert(in *pb.Request) (core.Request, error) {
	if in != nil && in.GetBackend() == "" {
		mode := core.ForwardMode(in.GetBatch().GetForwardMode())
		if mode.Valid() {
			in.Backend = s.hybrid.backendFor(mode)
		}
	}
	return wire.RequestFromProto(in)
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
	res := make([]registry.Result, len(reqs))
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
		return &dispatchv1.Answer{Error: err.Error()}
	}
	s.metrics.dispatched(backend, a)
	return &dispatchv1.Answer{Method: wire.MethodToProto(a.Method), Handler: a.Handler, Plugin: a.Plugin, Fallback: a.Fallback}
}

func (s *dispatchServer) reload(ctx context.Context) ([]registry.Change, error) {
	changes, err := s.reg.Reload(ctx)
	if err != nil {
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
