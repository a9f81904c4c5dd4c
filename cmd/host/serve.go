package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/inventory"
	"github.com/attnplug/attnplug/registry"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// defaultSocket is where serve listens without --listen.
func defaultSocket() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return "unix://" + filepath.Join(dir, fmt.Sprintf("attnplug-%d.sock", os.Getuid()))
}

func runServe(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	var sf selectFlags
	sf.register(fs)
	listen := fs.String("listen", defaultSocket(), "where to serve gRPC: unix:///path/to.sock (or a path starting with / or .), or host:port for TCP (an address that is not loopback needs --tls-cert or --insecure)")
	metricsAddr := fs.String("metrics-listen", "127.0.0.1:9464", "HTTP address of the Prometheus metrics (/metrics); empty turns them off (an address that is not loopback needs --metrics-insecure)")
	metricsInsecure := fs.Bool("metrics-insecure", false, "serve the metrics, plain HTTP without authentication, on a --metrics-listen address that is not loopback (refused otherwise); a warning is logged")
	specMode := fs.String("speculative-attention-mode", "prefill", "which backend answers target-verify and draft-extend batches: prefill or decode")
	matchHW := fs.Bool("match-hardware", true, "start only the plugins whose hardware this host has, and check forced backends against it")
	noAnswerCache := fs.Bool("no-answer-cache", false, "ask the plugin for every request instead of caching answers by the facts its rules read")
	maxInflight := fs.Int64("max-inflight-bytes", engine.DefaultMaxInflightBytes, "bound of the memory of the requests served at once: a request is decoded once 16 times its wire size fits, and refused with RESOURCE_EXHAUSTED when no room comes within 5s; -1: no bound")
	var tf serveTLSFlags
	tf.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug serve [flags]", "")
	if err != nil {
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
		if err := checkMetricsExposure(ctx, *metricsAddr, *metricsInsecure, logger.Named("serve")); err != nil {
			return err
		}
	}
	network, address := client.SplitAddress(*listen)
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
	cfg, err := h.config(ctx, logger)
	if err != nil {
		return err
	}
	cfg.NoAnswerCache = *noAnswerCache
	if *maxInflight == 0 || *maxInflight < -1 {
		return &usageError{fmt.Sprintf("--max-inflight-bytes: %d (want a positive number of bytes, or -1 for no bound)", *maxInflight)}
	}
	ecfg := engine.Config{SpeculativeDecode: *specMode == "decode", Logger: logger.Named("serve"), MaxInflightBytes: *maxInflight}
	if *matchHW {
		info := report.HostInfo()
		cfg.Host = &info
	} else if ecfg.Prefill, ecfg.Decode, err = unmatchedSelection(&sf); err != nil {
		return err
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	if *matchHW {
		sel, err := selectBackends(report, &sf, inventory.ServedHardware(reg))
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

	return serveOn(ctx, e, reg, ecfg, creds, *listen, *metricsAddr)
}

// serveOn serves the engine API over reg, configured by ecfg, on listen
// with creds (nil: plaintext), and its metrics on metricsAddr (empty:
// none), until ctx ends.
func serveOn(ctx context.Context, e *env, reg *registry.Registry, ecfg engine.Config, creds grpc.ServerOption, listen, metricsAddr string) error {
	network, address := client.SplitAddress(listen)
	es := engine.NewServer(reg, ecfg)
	opts := es.ServerOptions()
	if creds != nil {
		opts = append(opts, creds)
	}
	srv := grpc.NewServer(opts...)
	es.Register(srv)
	lis, err := engine.Listen(listen)
	if err != nil {
		return err
	}
	if network == "unix" {
		defer os.Remove(address)
	}
	metricsAt := "off"
	if metricsAddr != "" {
		url, stop, err := es.ServeMetrics(metricsAddr)
		if err != nil {
			lis.Close()
			return err
		}
		defer stop()
		metricsAt = url
	}
	return es.Serve(ctx, srv, lis, func() {
		// The ready line on stderr tells scripts and tests where to connect.
		fmt.Fprintf(e.stderr, "attnplug serve: listening on %s, metrics %s (prefill %s, decode %s)\n", engine.DescribeAddr(network, lis.Addr().String()), metricsAt, ecfg.Prefill, ecfg.Decode)
	})
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

// checkMetricsExposure refuses, as a usage error, metrics on a TCP
// address that is not loopback unless insecure (--metrics-insecure) is
// set, and then logs a warning: /metrics is plain HTTP without
// authentication, and it tells whoever reaches it which backends and
// plugins run and how busy they are. It mirrors --listen and --insecure.
func checkMetricsExposure(ctx context.Context, addr string, insecure bool, log hclog.Logger) error {
	loopback, err := isLoopback(ctx, addr)
	switch {
	case err != nil:
		return &usageError{fmt.Sprintf("serve: --metrics-listen %s: %v", addr, err)}
	case loopback:
		return nil
	case insecure:
		log.Warn("serving metrics over plain HTTP without authentication on an address that is not loopback (--metrics-insecure): whoever reaches it can read them", "address", addr)
		return nil
	}
	return &usageError{fmt.Sprintf("serve: --metrics-listen %s is not a loopback address, and the metrics are plain HTTP without authentication: "+
		"serve them on loopback (the default, 127.0.0.1:9464) for a local scraper or proxy, or pass --metrics-insecure to serve them there anyway", addr)}
}

// checkAddr refuses, as a usage error, an address that names no socket
// path or no valid host:port; unix says whether a unix socket may be
// given. flagName names the flag in the message.
func checkAddr(flagName, addr string, unix bool) error {
	network, address := client.SplitAddress(addr)
	if network == "unix" {
		if !unix {
			return &usageError{fmt.Sprintf("%s %q: want host:port (a TCP address)", flagName, addr)}
		}
		if address == "" {
			return &usageError{fmt.Sprintf("%s %q: names no socket path", flagName, addr)}
		}
		return nil
	}
	want := "want host:port, unix:///path or a socket path starting with / or ."
	if !unix {
		want = "want host:port"
	}
	_, port, err := net.SplitHostPort(address)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return &usageError{fmt.Sprintf("%s %q: %v (%s)", flagName, addr, err, want)}
	}
	return nil
}
