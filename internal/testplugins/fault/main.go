// Command attnplug-backend-fault is a plugin built only for tests: it
// serves the name "fault" and misbehaves on command, so that tests can show
// what the host does when a plugin crashes, hangs, sleeps, answers garbage
// or breaks the protocol.
//
// The faults come from $ATTNPLUG_FAULT, a comma-separated list:
//
//	crash_at_start   exit with status 3 before the handshake
//	crash_after=N    exit with status 2 on the Nth dispatch (1-based)
//	hang_after=N     from the Nth dispatch on, never answer
//	sleep=DURATION   sleep that long in every dispatch
//	garbage          answer a method number no protocol version has
//	undeclared       answer MHA_NPU, which "fault" does not declare
//	refuse           refuse every request as invalid
//	protocol=N       speak plugin protocol version N
//	bad_cookie       expect another magic cookie
//	stdout_noise     write to stdout before the handshake
//	version=V        describe itself with version V
//	name=N           call itself N (the family name) instead of "fault"
//	names=A+B        serve the names A and B instead of "fault"
//	rules=R          decide like R: mla (default), mha, flip (MHA for
//	                 even prefix sums, else MLA)
//
// Without faults it answers MLA for every request, like a well-behaved
// plugin.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

type faults struct {
	crashAtStart, garbage, undeclared, refuse, badCookie, stdoutNoise bool
	crashAfter, hangAfter, protocol                                   int
	sleep                                                             time.Duration
	version, rules, name                                              string
	names                                                             []string
}

func parse(spec string) (faults, error) {
	f := faults{protocol: wire.ProtocolVersion, version: "0.0.1-fault", rules: "mla", name: "fault", names: []string{"fault"}}
	for _, item := range strings.Split(spec, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(item), "=")
		var err error
		switch key {
		case "":
		case "crash_at_start":
			f.crashAtStart = true
		case "crash_after":
			f.crashAfter, err = strconv.Atoi(val)
		case "hang_after":
			f.hangAfter, err = strconv.Atoi(val)
		case "sleep":
			f.sleep, err = time.ParseDuration(val)
		case "garbage":
			f.garbage = true
		case "undeclared":
			f.undeclared = true
		case "refuse":
			f.refuse = true
		case "protocol":
			f.protocol, err = strconv.Atoi(val)
		case "bad_cookie":
			f.badCookie = true
		case "stdout_noise":
			f.stdoutNoise = true
		case "version":
			f.version = val
		case "rules":
			f.rules = val
		case "name":
			f.name = val
		case "names":
			f.names = strings.Split(val, "+")
		default:
			err = fmt.Errorf("unknown fault %q", key)
		}
		if err != nil {
			return f, fmt.Errorf("ATTNPLUG_FAULT: %s: %w", item, err)
		}
	}
	return f, nil
}

// backend is the misbehaving backend.
type backend struct {
	f     faults
	calls atomic.Int64
}

func (b *backend) Describe(context.Context) (*core.Description, error) {
	d := &core.Description{Name: b.f.name, Version: b.f.version}
	for _, n := range b.f.names {
		d.Handlers = append(d.Handlers, core.HandlerInfo{
			Name:    n,
			Reads:   core.Reads{Facts: core.FactPrefixSumZero | core.FactMode},
			Methods: []core.Method{core.MLA, core.MHA},
		})
	}
	return d, nil
}

func (b *backend) Dispatch(ctx context.Context, req *core.Request) (core.Method, error) {
	n := int(b.calls.Add(1))
	if b.f.crashAfter > 0 && n >= b.f.crashAfter {
		os.Exit(2)
	}
	if b.f.hangAfter > 0 && n >= b.f.hangAfter {
		<-ctx.Done()
		select {} // never answer, even after the caller gave up
	}
	if b.f.sleep > 0 {
		time.Sleep(b.f.sleep)
	}
	if !slices.Contains(b.f.names, req.Backend) {
		return 0, fmt.Errorf("fault: %w %q", core.ErrUnknownBackend, req.Backend)
	}
	switch {
	case b.f.garbage:
		return core.Method(200), nil
	case b.f.undeclared:
		return core.MHANPU, nil
	case b.f.refuse:
		return 0, core.NewFieldError("backend", "the fault plugin refuses every request")
	}
	switch b.f.rules {
	case "mha":
		return core.MHA, nil
	case "flip":
		if req.Batch.PrefixSum()%2 == 0 {
			return core.MHA, nil
		}
	}
	return core.MLA, nil
}

func main() {
	f, err := parse(os.Getenv("ATTNPLUG_FAULT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if f.crashAtStart {
		fmt.Fprintln(os.Stderr, "fault: crashing at start, as asked")
		os.Exit(3)
	}
	if f.stdoutNoise {
		fmt.Println("this line is not a go-plugin handshake")
	}
	if f.protocol == wire.ProtocolVersion && !f.badCookie {
		wire.Main(func(hclog.Logger) (core.Backend, error) { return &backend{f: f}, nil })
		return
	}
	hs := wire.Handshake()
	hs.ProtocolVersion = uint(f.protocol)
	if f.badCookie {
		hs.MagicCookieKey, hs.MagicCookieValue = wire.MagicCookieKey, "not-the-attnplug-cookie"
		if os.Getenv(wire.MagicCookieKey) == wire.MagicCookieValue {
			// go-plugin compares the cookie itself; make it differ.
			os.Setenv(wire.MagicCookieKey, "mismatch")
		}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		VersionedPlugins: map[int]plugin.PluginSet{
			f.protocol: {wire.PluginName: &wire.GRPCPlugin{Backend: &backend{f: f}}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true}),
	})
}
