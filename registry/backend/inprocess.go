package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Kernels runs kernel k of a catalog on req's tensors in the host's
// process (the registry's Config.Kernels, bound to the host).
type Kernels func(ctx context.Context, k core.Kernel, req *core.KernelRequest) (*core.KernelResult, error)

// InProcess is a core.Backend in the host's process: the triton rules, the
// registry's default route and fallback, or a backend the host links. It
// has no process to start or retire: a call that fails (or panics) is a
// failure of that call only.
type InProcess struct {
	desc        *core.Description
	conn        Conn
	unsupported string
	health      Health // always serving, as described
	logger      hclog.Logger
}

// NewInProcess describes b and wraps it. With host set, a backend none of
// whose names runs there, or that refuses it (core.Configurer), is
// Unsupported; run runs the kernels of a backend that is no
// core.KernelRunner. log is the parent of the backend's logger.
func NewInProcess(ctx context.Context, b core.Backend, host *core.HostInfo, run Kernels, log hclog.Logger) (*InProcess, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("in-process backend %T: describe: %w", b, err)
	}
	if err := Validate(d); err != nil {
		return nil, fmt.Errorf("in-process backend %q: %w", d.Name, err)
	}
	ip := &InProcess{desc: d, conn: inProcessConn{b, d, run}, logger: log.Named(d.Name)}
	if host != nil {
		ip.unsupported = UnsupportedOn(d, *host)
		if c, ok := b.(core.Configurer); ok && ip.unsupported == "" {
			if err := c.Configure(ctx, *host); err != nil {
				if !errors.Is(err, core.ErrRefused) {
					return nil, fmt.Errorf("in-process backend %q: configure: %w", d.Name, err)
				}
				ip.unsupported = err.Error()
			}
		}
	}
	return ip, nil
}

// Family is the name the backend describes itself by.
func (b *InProcess) Family() string { return b.desc.Name }

// Description is what the backend described at NewInProcess.
func (b *InProcess) Description() *core.Description { return b.desc }

// Health is always serving.
func (b *InProcess) Health() *Health { return &b.health }

// Unsupported says why the backend does not run on the host, or "".
func (b *InProcess) Unsupported() string { return b.unsupported }

// Binary is empty: there is no binary to pin.
func (b *InProcess) Binary() (path, sha256 string) { return "", "" }

// Log is the backend's logger.
func (b *InProcess) Log() hclog.Logger { return b.logger }

// Call runs f in the caller's goroutine under the caller's ctx: a backend
// in process must return promptly when ctx is done (core.Backend), and no
// deadline of the registry's can stop one that does not. A panic is a
// Failed call, ReasonCrashed.
func (b *InProcess) Call(ctx context.Context, _ Limit, f func(context.Context, Conn) error) (o Outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = Outcome{Kind: Failed, Reason: ReasonCrashed, Err: fmt.Errorf("in-process backend %s panicked: %v", b.Family(), v)}
		}
	}()
	o = OutcomeOf(ctx, f(ctx, b.conn))
	if o.Kind == Failed {
		o.Err = fmt.Errorf("in-process backend %s: %w", b.Family(), o.Err)
	}
	return o
}

// inProcessConn gives a core.Backend every ability of Conn: those it lacks
// answer as a plugin without them does. A missing DispatchBatch asks
// Dispatch per request; kernels without a KernelRunner run the catalog's
// math by run.
type inProcessConn struct {
	core.Backend
	desc *core.Description // what Describe said at NewInProcess
	run  Kernels
}

func (c inProcessConn) DispatchBatch(ctx context.Context, reqs []core.Request, out []core.Result) error {
	if b, ok := c.Backend.(core.BatchBackend); ok {
		return b.DispatchBatch(ctx, reqs, out)
	}
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := c.Dispatch(ctx, &reqs[i])
		out[i] = core.Result{Method: m, Err: err}
	}
	return nil
}

func (c inProcessConn) Configure(ctx context.Context, info core.HostInfo) error {
	if b, ok := c.Backend.(core.Configurer); ok {
		return b.Configure(ctx, info)
	}
	return nil
}

func (c inProcessConn) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	if b, ok := c.Backend.(core.KernelRunner); ok {
		return b.RunKernel(ctx, req)
	}
	h, ok := c.desc.Handler(req.Backend)
	if !ok {
		return nil, fmt.Errorf("%w: %q", core.ErrUnknownBackend, req.Backend)
	}
	k, ok := h.Kernel(req.Method)
	if !ok {
		return nil, fmt.Errorf("%w: %s's kernel catalog has no kernel for %s", core.ErrNoKernel, h.Name, req.Method)
	}
	return c.run(ctx, k, req)
}

func (c inProcessConn) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	if b, ok := c.Backend.(core.KernelPlanner); ok {
		return b.KernelModules(ctx, dev)
	}
	return nil, fmt.Errorf("%w: the in-process backend has no device code", core.ErrNoPlan)
}

func (c inProcessConn) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	if b, ok := c.Backend.(core.KernelPlanner); ok {
		return b.PlanKernel(ctx, req)
	}
	return nil, fmt.Errorf("%w: the in-process backend has no device code", core.ErrNoPlan)
}
