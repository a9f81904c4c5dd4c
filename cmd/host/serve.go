package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
)

func runServe(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	var sf selectFlags
	sf.register(fs)
	listen := fs.String("listen", engine.DefaultSocket(), "where to serve gRPC: unix:///path/to.sock (or a path starting with / or .; mode 0600, and only this user and root may connect), or host:port for TCP (loopback is open to every local user; an address that is not loopback needs --tls-cert or --insecure)")
	socketGroup := fs.String("socket-group", "", "let the members of this group (a name or a gid) connect to the --listen Unix socket too: mode 0660 and that group, instead of 0600")
	allowAbstract := fs.Bool("allow-abstract-socket", false, "accept an abstract --listen socket (unix://@name), which has no file and so no mode: only the server's check of each peer's user keeps other local users out")
	metricsAddr := fs.String("metrics-listen", "127.0.0.1:9464", "HTTP address of the Prometheus metrics (/metrics); empty turns them off (an address that is not loopback needs --metrics-insecure)")
	metricsInsecure := fs.Bool("metrics-insecure", false, "serve the metrics, plain HTTP without authentication, on a --metrics-listen address that is not loopback (refused otherwise); a warning is logged")
	specMode := fs.String("speculative-attention-mode", "prefill", "which backend answers target-verify and draft-extend batches: prefill or decode")
	matchHW := fs.Bool("match-hardware", true, "start only the plugins whose hardware this host has, and check forced backends against it")
	noAnswerCache := fs.Bool("no-answer-cache", false, "ask the plugin for every request instead of caching answers by the facts its rules read")
	maxInflight := fs.Int64("max-inflight-bytes", engine.DefaultMaxInflightBytes, "bound of the memory of the requests and KernelModules answers served at once: a request is decoded once 16 times its wire size fits, an answer made once its size fits, and either refused with RESOURCE_EXHAUSTED when no room comes within 5s; -1: no bound")
	var tf engine.ServerTLS
	registerServeTLS(fs, &tf)
	logger, err := h.parse(fs, e, args, "attnplug serve [flags]", "")
	if err != nil {
		return err
	}
	if *specMode != "prefill" && *specMode != "decode" {
		return &usageError{fmt.Sprintf("--speculative-attention-mode: %q (want prefill or decode)", *specMode)}
	}
	var ecfg engine.Config // the ready line's backends, set once chosen below
	lo := engine.ListenOptions{Listen: *listen, SocketGroup: *socketGroup, AllowAbstractSocket: *allowAbstract, Metrics: *metricsAddr, Logger: logger.Named("serve")}
	if err := lo.Check(); err != nil {
		return usage(err)
	}
	if *metricsAddr != "" {
		if err := client.CheckAddress("--metrics-listen", *metricsAddr, false); err != nil {
			return usage(err)
		}
		if err := engine.CheckMetricsExposure(ctx, *metricsAddr, *metricsInsecure, logger.Named("serve")); err != nil {
			return usage(err)
		}
	}
	creds, err := tf.ServerOption(ctx, *listen, logger.Named("serve"))
	if err != nil {
		return usage(err)
	}
	if *maxInflight == 0 || *maxInflight < -1 {
		return &usageError{fmt.Sprintf("--max-inflight-bytes: %d (want a positive number of bytes, or -1 for no bound)", *maxInflight)}
	}
	// Bind before a plugin starts: an address that cannot be served on
	// fails at once, not after the plugins' start lines.
	lo.Creds = creds
	lo.Ready = func(addr, metrics string) {
		// The ready line on stderr tells scripts and tests where to connect.
		fmt.Fprintf(e.stderr, "attnplug serve: listening on %s, metrics %s (prefill %s, decode %s)\n", addr, metrics, ecfg.Prefill, ecfg.Decode)
	}
	lis, err := engine.Listen(lo)
	if err != nil {
		return err
	}
	defer lis.Close()
	tp, err := sf.tp()
	if err != nil {
		return err
	}
	report, err := detect.Detect(ctx, detect.Options{Root: "/", TPSize: tp, NoDriverQuery: !*matchHW})
	if err != nil {
		return err
	}
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	cfg.NoAnswerCache = *noAnswerCache
	ecfg = engine.Config{SpeculativeDecode: *specMode == "decode", Logger: logger.Named("serve"), MaxInflightBytes: *maxInflight}
	if *matchHW {
		info := report.HostInfo()
		cfg.Host = &info
	} else {
		opts, err := sf.options(nil)
		if err != nil {
			return err
		}
		ecfg.Prefill, ecfg.Decode = detect.Forced(opts)
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	if *matchHW {
		sel, err := selectBackends(report, &sf, inventory.ServedHardware(reg))
		if errors.Is(err, detect.ErrUnsupportedBackend) {
			return fmt.Errorf("%w (pass --match-hardware=false to serve it on any hardware and start every plugin, or --allow-fallback to answer with triton instead)", err)
		}
		if err != nil {
			return err
		}
		for _, w := range sel.Warnings {
			logger.Warn("backend selection", "warning", w)
		}
		ecfg.Prefill, ecfg.Decode = sel.Prefill, sel.Decode
	}
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
