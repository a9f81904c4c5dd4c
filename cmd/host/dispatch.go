package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/engine/client"
	"github.com/attnplug/attnplug/jsonl"
)

func runDispatch(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("dispatch", flag.ContinueOnError)
	var h hostFlags
	h.register(fs)
	maxLine := maxLineFlag(fs, jsonl.MaxLineBytes)
	connect := fs.String("connect", "", "send the requests to a running attnplug serve at this address (unix:///path, a socket path starting with / or ., or host:port) instead of loading plugins; --timeout, when given, bounds connecting to it and each call (default 30s a call)")
	var ct client.TLS
	registerConnectTLS(fs, &ct)
	logger, err := h.parse(fs, e, args, "attnplug dispatch [flags] < requests.jsonl > answers.jsonl", "requests come on stdin")
	if err != nil {
		return err
	}
	if err := checkMaxLine(*maxLine); err != nil {
		return err
	}
	if *connect != "" {
		var local []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "plugin-dir", "platform", "strict", "no-cache", "lock", "insecure-plugin-dir":
				local = append(local, "--"+f.Name)
			}
		})
		if len(local) > 0 {
			return &usageError{fmt.Sprintf("dispatch: %s configure plugins loaded here, and --connect loads none: set them on attnplug serve", strings.Join(local, ", "))}
		}
	}
	if ct.Enabled() && *connect == "" {
		return &usageError{"dispatch: the --tls flags configure --connect, which is not given"}
	}
	creds, err := ct.Credentials()
	if err != nil {
		return usage(err)
	}
	var d engine.Batcher
	if *connect != "" {
		if err := client.CheckAddress("--connect", *connect, true); err != nil {
			return usage(err)
		}
		// --timeout, when given, bounds connecting to the server and each
		// call to it; its default (one plugin call's) would cut off a
		// request that waits for a plugin to start on the server.
		var opts []client.DialOption
		if given(fs, "timeout") {
			opts = append(opts, client.WithTimeout(h.callTimeout))
		}
		if h.callTimeout <= 0 {
			return &usageError{fmt.Sprintf("--timeout: %s is not a positive duration", h.callTimeout)}
		}
		c, err := client.Dial(*connect, creds, opts...)
		if err != nil {
			return fmt.Errorf("--connect: %w", err)
		}
		defer c.Close()
		d = c
	} else {
		reg, err := h.open(ctx, logger)
		if err != nil {
			return err
		}
		defer reg.Close()
		d = reg
	}
	refused, err := engine.Stream(ctx, d, e.stdin, e.stdout, engine.StreamOptions{MaxLine: *maxLine, Routed: *connect != ""})
	if err != nil {
		return err
	}
	if refused > 0 {
		return &refusedError{refused}
	}
	return nil
}
