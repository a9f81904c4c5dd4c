package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// backend is what serves the names of a route: the supervised process of a
// plugin binary (*plugin) or a core.Backend linked into the host
// (*inProcess: the triton rules, and the backends of Config.Backends). The
// registry routes, caches, calls and falls back the same way for both.
type backend interface {
	// family names the backend in answers (core.Answer.Plugin) and logs.
	family() string
	// call runs f on the backend's connection under the deadline of limit.
	// It returns nil; the caller's ctx.Err() when ctx ended; an error of
	// the backend's own answer (isAnswer: it refused the request, has no
	// kernel or no plan), after which the backend is fine; or a *failure,
	// the reason a fallback reports: no process could be had, or the call
	// failed and the process was retired.
	call(ctx context.Context, limit callLimit, f func(context.Context, conn) error) error
	// health is the backend's state that its routes read on every answer.
	health() *health
	// unsupportedWhy says why the backend does not run on the host's
	// hardware; "" when it does.
	unsupportedWhy() string
	// succeeded notes a good answer.
	succeeded()
	// description is what the backend described, which its routes follow.
	description() *core.Description
	// deviceCode is the device code learnt from the backend (device.go).
	deviceCode() *deviceState
	// log is the backend's logger.
	log() hclog.Logger
	// lockName is the file name the lock file pins the backend's modules
	// under; "" for a backend in process, which has no binary to pin.
	lockName() string
}

// health is what the routes of a backend read on every answer, with two
// atomic loads and no call: whether answers cached from it may be served,
// and whether its answers may be cached at all.
type health struct {
	// degraded is set once the backend cannot serve again by itself:
	// quarantined, its binary's bytes gone, or ended. Its cached answers
	// are not served then. Through a crash, a timeout or a restart they
	// are: they are the answers of the same binary, whose rules are pure.
	degraded atomic.Bool
	// staleDesc is set when the running process describes itself otherwise
	// than the description the routes were built from (a cached one): its
	// answers are then never cached.
	staleDesc atomic.Bool
}

// conn is what the registry asks of a backend: every ability. Over the
// wire each method exists and the description says which the plugin has
// (wire.Client); an in-process backend lacking one answers as a plugin
// without it would (inProcessConn).
type conn interface {
	core.BatchBackend
	core.Configurer
	core.KernelRunner
	core.KernelPlanner
}

// callLimit says which deadline a call to a backend runs under.
type callLimit int

const (
	// dispatchCall runs under Config.CallTimeout.
	dispatchCall callLimit = iota
	// longCall (a kernel, device code, a plan) runs under the caller's own
	// deadline, else KernelCallTimeout.
	longCall
)

// timeout is the deadline of a call of limit when the caller gives none.
func (l callLimit) timeout(cfg *Config) time.Duration {
	if l == longCall {
		return KernelCallTimeout
	}
	return cfg.CallTimeout
}

// context returns the context a call of limit runs under.
func (l callLimit) context(ctx context.Context, cfg *Config) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); l == dispatchCall || !has {
		return context.WithTimeout(ctx, l.timeout(cfg))
	}
	return ctx, func() {}
}

// inProcess is a core.Backend in the host's process: the triton rules, the
// fallback of every name, or a backend the host links (Config.Backends).
// It has no process to start or retire: a call that fails (or panics) is a
// failure of that call only.
type inProcess struct {
	desc        *core.Description
	conn        conn
	unsupported string
	state       health // always serving, as described
	device      deviceState
	logger      hclog.Logger
}

// newInProcess describes b and wraps it for the registry.
func newInProcess(ctx context.Context, b core.Backend, cfg *Config) (*inProcess, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("in-process backend %T: describe: %w", b, err)
	}
	if err := validateDescription(d); err != nil {
		return nil, fmt.Errorf("in-process backend %q: %w", d.Name, err)
	}
	ip := &inProcess{desc: d, conn: inProcessConn{b, d, cfg}, logger: cfg.Logger.Named(d.Name)}
	if cfg.Host != nil {
		ip.unsupported = unsupportedReason(d, *cfg.Host)
		if c, ok := b.(core.Configurer); ok && ip.unsupported == "" {
			if err := c.Configure(ctx, *cfg.Host); err != nil {
				if !errors.Is(err, core.ErrRefused) {
					return nil, fmt.Errorf("in-process backend %q: configure: %w", d.Name, err)
				}
				ip.unsupported = err.Error()
			}
		}
	}
	return ip, nil
}

func (b *inProcess) family() string         { return b.desc.Name }
func (b *inProcess) health() *health        { return &b.state }
func (b *inProcess) unsupportedWhy() string { return b.unsupported }
func (b *inProcess) succeeded()             {}

func (b *inProcess) description() *core.Description { return b.desc }
func (b *inProcess) deviceCode() *deviceState       { return &b.device }
func (b *inProcess) log() hclog.Logger              { return b.logger }
func (b *inProcess) lockName() string               { return "" }

// call runs f in the caller's goroutine under the caller's ctx: a backend
// in process must return promptly when ctx is done (core.Backend), and no
// deadline of the registry's can stop one that does not.
func (b *inProcess) call(ctx context.Context, _ callLimit, f func(context.Context, conn) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &failure{reason: ReasonCrashed, err: fmt.Errorf("in-process backend %s panicked: %v", b.family(), v)}
		}
	}()
	err = f(ctx, b.conn)
	if err, done := settled(ctx, err); done {
		return err
	}
	return &failure{reason: classify(err), err: fmt.Errorf("in-process backend %s: %w", b.family(), err)}
}

// inProcessConn gives a core.Backend every ability of conn: those it lacks
// answer as a plugin without them does. A missing DispatchBatch asks
// Dispatch per request; kernels without a KernelRunner run the catalog's
// math by Config.Kernels.
type inProcessConn struct {
	core.Backend
	desc *core.Description // what Describe said at New
	cfg  *Config
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
		h = c.desc.Handlers[0] // the triton rules answer every name
	}
	k, ok := h.Kernel(req.Method)
	if !ok {
		return nil, fmt.Errorf("%w: %s's kernel catalog has no kernel for %s", core.ErrNoKernel, h.Name, req.Method)
	}
	return c.cfg.runKernel(ctx, k, req)
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
