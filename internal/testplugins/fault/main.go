package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/backendkit"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/shm"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

type faults struct {
	crashAtStart, garbage, undeclared, refuse, badCookie, stdoutNoise bool
	kernels, kernelCrash, parentPipe, hangAtStart, orphanChild        bool
	crashAfter, hangAfter, protocol, describePad, allocMiB, manyNames int
	sleep                                                             time.Duration
	version, rules, name, mark                                        string
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
		case "kernels":
			f.kernels = true
		case "kernel_crash":
			f.kernels, f.kernelCrash = true, true
		case "name":
			f.name = val
		case "names":
			f.names = strings.Split(val, "+")
		case "parent_pipe":
			f.parentPipe = true
		case "hang_at_start":
			f.hangAtStart = true
		case "orphan_child":
			f.orphanChild = true
		case "describe_pad":
			f.describePad, err = strconv.Atoi(val)
		case "alloc_mib":
			f.allocMiB, err = strconv.Atoi(val)
		case "mark":
			f.mark = val
		case "many_names":
			f.manyNames, err = strconv.Atoi(val)
		default:
			err = fmt.Errorf("unknown fault %q", key)
		}
		if err != nil {
			return f, fmt.Errorf("ATTNPLUG_FAULT: %s: %w", item, err)
		}
	}
	for i := range f.manyNames {
		f.names = append(f.names, fmt.Sprintf("fault_%d", i))
	}
	return f, nil
}

// backend is the misbehaving backend.
type backend struct {
	f     faults
	calls atomic.Int64
	// held keeps what alloc_mib allocated, so that it stays allocated.
	mu   sync.Mutex
	held [][]byte
}

func (b *backend) Describe(context.Context) (*core.Description, error) {
	d := &core.Description{Name: b.f.name, Version: b.f.version}
	for _, n := range b.f.names {
		d.Handlers = append(d.Handlers, core.HandlerInfo{
			Name:    n,
			Reads:   core.Reads{Facts: core.FactPrefixSumZero | core.FactMode},
			Methods: []core.Method{core.MLA, core.MHA},
		})
		if b.f.kernels {
			d.Handlers[len(d.Handlers)-1].Kernels = faultKernels()
		}
	}
	if b.f.describePad > 0 {
		// A deprecated alias whose reason is describePad bytes long.
		d.Handlers = append(d.Handlers, core.HandlerInfo{
			Name: "fault_padded", AliasOf: b.f.names[0], Deprecated: strings.Repeat("x", b.f.describePad),
			Reads: d.Handlers[0].Reads, Methods: d.Handlers[0].Methods,
		})
	}
	return d, nil
}

func faultKernels() []core.Kernel {
	return []core.Kernel{
		{Name: "fault_mla", Library: "fault", Method: core.MLA},
		{Name: "fault_mha", Library: "fault", Method: core.MHA},
	}
}

// RunKernel runs the catalog's kernels, or dies with the tensors mapped.
func (b *backend) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	if !b.f.kernels {
		return nil, fmt.Errorf("%w: the fault plugin runs kernels only with the kernels fault", core.ErrNoKernel)
	}
	if b.f.kernelCrash {
		if m, err := shm.Open(req.Buffer.Path, req.Buffer.Size); err == nil {
			_ = m.Bytes()[0] // touch the mapping, then die holding it
		}
		fmt.Fprintln(os.Stderr, "fault: crashing in RunKernel, as asked")
		os.Exit(2)
	}
	for _, k := range faultKernels() {
		if k.Method == req.Method {
			return backendkit.Run(ctx, k, req, nil)
		}
	}
	return nil, fmt.Errorf("%w: no fault kernel for %s", core.ErrNoKernel, req.Method)
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
	if b.f.mark != "" {
		if err := os.WriteFile(b.f.mark, nil, 0o644); err != nil {
			return 0, err
		}
	}
	if b.f.sleep > 0 {
		time.Sleep(b.f.sleep)
	}
	if b.f.allocMiB > 0 {
		// Grow by that much at every request, every page written: a
		// plugin whose memory grows without end.
		buf := make([]byte, b.f.allocMiB<<20)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		b.mu.Lock()
		b.held = append(b.held, buf)
		b.mu.Unlock()
	}
	if !slices.Contains(b.f.names, req.Backend) && (b.f.describePad == 0 || req.Backend != "fault_padded") {
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
	if os.Getenv("ATTNPLUG_FAULT_ORPHAN") == "1" {
		time.Sleep(2 * time.Minute) // the orphan of orphan_child
		os.Exit(0)
	}
	f, err := parse(os.Getenv("ATTNPLUG_FAULT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if f.orphanChild {
		// A child in a session of its own (out of the plugin's process
		// group) that keeps the plugin's stdout and stderr open.
		self, _ := os.Executable()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "ATTNPLUG_FAULT_ORPHAN=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fault: orphan child:", err)
		} else {
			fmt.Fprintf(os.Stderr, "fault: orphan child %d holds stdout\n", cmd.Process.Pid)
		}
		os.Exit(5)
	}
	if f.hangAtStart {
		fmt.Fprintln(os.Stderr, "fault: hanging at start, as asked")
		select {}
	}
	if f.crashAtStart {
		fmt.Fprintln(os.Stderr, "fault: crashing at start, as asked")
		os.Exit(3)
	}
	if f.parentPipe {
		if err := checkParentPipe(); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			os.Exit(4)
		}
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

// checkParentPipe fails unless the host gave the parent-death pipe: the
// variable names descriptor 3, and it is the read end of a pipe.
func checkParentPipe() error {
	if v := os.Getenv(wire.EnvParentPipe); v != "3" {
		return fmt.Errorf("$%s is %q, want 3: no parent-death pipe", wire.EnvParentPipe, v)
	}
	st, err := os.NewFile(3, "parent-pipe").Stat()
	if err != nil {
		return fmt.Errorf("descriptor 3: %w", err)
	}
	if st.Mode()&os.ModeNamedPipe == 0 {
		return fmt.Errorf("descriptor 3 is %s, not a pipe", st.Mode())
	}
	return nil
}
