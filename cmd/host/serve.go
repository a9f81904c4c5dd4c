package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
)

// serveFlags are serve's own flags, beside the host's and the backend
// selection's.
type serveFlags struct {
	listen, socketGroup, metricsAddr, specMode string
	allowAbstract, metricsInsecure, matchHW    bool
	noAnswerCache                              bool
	maxInflight                                int64
	tls                                        engine.ServerTLS
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", engine.DefaultSocket(), "where to serve gRPC: unix:///path/to.sock (or a path starting with / or .; mode 0600, and only this user and root may connect), or host:port for TCP (loopback is open to every local user; an address that is not loopback needs --tls-cert or --insecure)")
	fs.StringVar(&f.socketGroup, "socket-group", "", "let the members of this group (a name or a gid) connect to the --listen Unix socket too: mode 0660 and that group, instead of 0600")
	fs.BoolVar(&f.allowAbstract, "allow-abstract-socket", false, "accept an abstract --listen socket (unix://@name), which has no file and so no mode: only the server's check of each peer's user keeps other local users out")
	fs.StringVar(&f.metricsAddr, "metrics-listen", "127.0.0.1:9464", "HTTP address of the Prometheus metrics (/metrics); empty turns them off (an address that is not loopback needs --metrics-insecure)")
	fs.BoolVar(&f.metricsInsecure, "metrics-insecure", false, "serve the metrics, plain HTTP without authentication, on a --metrics-listen address that is not loopback (refused otherwise); a warning is logged")
	fs.StringVar(&f.specMode, "speculative-attention-mode", "prefill", "which backend answers target-verify and draft-extend batches: prefill or decode")
	fs.BoolVar(&f.matchHW, "match-hardware", true, "start only the plugins whose hardware this host has, and check forced backends against it")
	fs.BoolVar(&f.noAnswerCache, "no-answer-cache", false, "ask the plugin for every request instead of caching answers by the facts its rules read")
	fs.Int64Var(&f.maxInflight, "max-inflight-bytes", engine.DefaultMaxInflightBytes, "bound of the memory of the requests and KernelModules answers served at once: a request is decoded once 16 times its wire size fits, an answer made once its size fits, and either refused with RESOURCE_EXHAUSTED when no room comes within 5s; -1: no bound")
	registerServeTLS(fs, &f.tls)
}

// listenOptions checks the flags and returns the listener's options
// (without Ready).
func (f *serveFlags) listenOptions(ctx context.Context, logger hclog.Logger) (engine.ListenOptions, error) {
	if f.specMode != "prefill" && f.specMode != "decode" {
		return engine.ListenOptions{}, &usageError{fmt.Sprintf("--speculative-attention-mode: %q (want prefill or decode)", f.specMode)}
	}
	if f.maxInflight == 0 || f.maxInflight < -1 {
		return engine.ListenOptions{}, &usageError{fmt.Sprintf("--max-inflight-bytes: %d (want a positive number of bytes, or -1 for no bound)", f.maxInflight)}
	}
	lo := engine.ListenOptions{Listen: f.listen, SocketGroup: f.socketGroup, AllowAbstractSocket: f.allowAbstract, Metrics: f.metricsAddr, Logger: logger}
	if err := lo.Check(); err != nil {
		return lo, usage(err)
	}
	if f.metricsAddr != "" {
		if err := client.CheckAddress("--metrics-listen", f.metricsAddr, false); err != nil {
			return lo, usage(err)
		}
		if err := engine.CheckMetricsExposure(ctx, f.metricsAddr, f.metricsInsecure, logger); err != nil {
			return lo, usage(err)
		}
	}
	creds, err := f.tls.ServerOption(ctx, f.listen, logger)
	if err != nil {
		return lo, usage(err)
	}
	lo.Creds = creds
	return lo, nil
}

func runServe(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	var sf selectFlags
	sf.register(fs)
	var f serveFlags
	f.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug serve [flags]", "")
	if err != nil {
		return err
	}
	lo, err := f.listenOptions(ctx, logger.Named("serve"))
	if err != nil {
		return err
	}
	var ecfg engine.Config // the ready line's backends, set once chosen below
	// SIGHUP asks a serving server to reload; before it serves (binding,
	// describing the plugins) one must not end the process, as its
	// default action would: it is logged, and the plugins are those found
	// at start.
	var serving atomic.Bool
	early := make(chan os.Signal, 1)
	signal.Notify(early, syscall.SIGHUP)
	defer signal.Stop(early)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-early:
				if !serving.Load() {
					logger.Named("serve").Info("SIGHUP before the server serves: the plugins are those found at start; send it again to reload")
				}
			}
		}
	}()
	// Bind before a plugin starts: an address that cannot be served on
	// fails at once, not after the plugins' start lines.
	lo.Ready = func(addr, metrics string) {
		serving.Store(true)
		// The ready line on stderr tells scripts and tests where to connect.
		fmt.Fprintf(e.stderr, "attnplug serve: listening on %s, metrics %s (prefill %s, decode %s)\n", addr, metrics, ecfg.Prefill, ecfg.Decode)
	}
	lis, err := engine.Listen(lo)
	if err != nil {
		return err
	}
	defer lis.Close()
	ecfg = engine.Config{SpeculativeDecode: f.specMode == "decode", Logger: logger.Named("serve"), MaxInflightBytes: f.maxInflight}
	reg, err := serveRegistry(ctx, &h, &sf, &f, logger, &ecfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	// The plugins start in the background, each on its own: one that hangs
	// at start delays neither the others nor the server, and a request for
	// a plugin still starting waits for it.
	go func() {
		if _, err := reg.Start(ctx); err != nil {
			logger.Warn("not every plugin started", "error", err)
		}
	}()

	return engine.NewServer(reg, ecfg).ServeListener(ctx, lis)
}

// serveRegistry makes serve's registry and chooses the backends of ecfg:
// with --match-hardware, the plugins this host's hardware runs and the
// backends selected for it; without, every plugin and the forced ones.
func serveRegistry(ctx context.Context, h *hostFlags, sf *selectFlags, f *serveFlags, logger hclog.Logger, ecfg *engine.Config) (*registry.Registry, error) {
	tp, err := sf.tp()
	if err != nil {
		return nil, err
	}
	report, err := detect.Detect(ctx, detect.Options{Root: "/", TPSize: tp, NoDriverQuery: !f.matchHW})
	if err != nil {
		return nil, err
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return nil, err
	}
	cfg.NoAnswerCache = f.noAnswerCache
	if f.matchHW {
		info := report.HostInfo()
		cfg.Host = &info
	} else {
		opts, err := sf.options(nil)
		if err != nil {
			return nil, err
		}
		ecfg.Prefill, ecfg.Decode = detect.Forced(opts)
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if !f.matchHW {
		return reg, nil
	}
	sel, err := selectBackends(report, sf, inventory.ServedHardware(reg))
	if errors.Is(err, detect.ErrUnsupportedBackend) {
		err = fmt.Errorf("%w (pass --match-hardware=false to serve it on any hardware and start every plugin, or --allow-fallback to answer with triton instead)", err)
	}
	if err != nil {
		reg.Close()
		return nil, err
	}
	for _, w := range sel.Warnings {
		logger.Warn("backend selection", "warning", w)
	}
	ecfg.Prefill, ecfg.Decode = sel.Prefill, sel.Decode
	return reg, nil
}
