package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// instance is one running plugin process.
type instance struct {
	client  *goplugin.Client
	backend batchClient
	pid     int
	pipe    *os.File // write end of the parent-death pipe

	// calls are held shared by every call in flight; retire takes it
	// exclusively, so that the process ends only after they finish.
	calls   sync.RWMutex
	retired bool // guarded by calls
}

// batchClient is what the registry needs of a plugin connection
// (wire.Client): every ability, since over the wire each method exists and
// the description says which the plugin has.
type batchClient interface {
	core.BatchBackend
	core.Configurer
	core.KernelRunner
	core.KernelPlanner
}

// enter admits a call; false means the instance was retired.
func (i *instance) enter() bool {
	i.calls.RLock()
	if i.retired {
		i.calls.RUnlock()
		return false
	}
	return true
}

func (i *instance) leave() { i.calls.RUnlock() }

// retire waits for the calls in flight, then ends the process.
func (i *instance) retire() {
	i.calls.Lock()
	i.retired = true
	i.calls.Unlock()
	i.kill()
}

// kill ends the process at once.
func (i *instance) kill() {
	i.client.Kill()
	if i.pipe != nil {
		i.pipe.Close()
	}
}

// plugin is a discovered plugin binary and the process the registry runs
// for it, if any.
type plugin struct {
	name   string // the family name, from the description
	path   string
	sha256 string
	desc   *core.Description
	logger hclog.Logger
	cfg    *Config

	cacheKey string // the description cache's key: sha256 and environment
	running  atomic.Pointer[instance]
	// staleDesc is set when the running process describes itself otherwise
	// than the description the routes were built from (a cached one): its
	// answers are then never cached.
	staleDesc atomic.Bool
	// degraded is set from a failure until the next good answer, and once
	// the plugin ended: its cached answers are not served meanwhile.
	degraded atomic.Bool
	// retiring counts the instances retired after a failure whose process
	// has not ended yet; stop waits for them.
	retiring sync.WaitGroup

	// selfChecked is the kernel-catalog self-check (selfcheck.go).
	selfChecked selfCheckState

	// device is the device code learnt from the binary (device.go).
	device deviceState

	// refusedHost is set when the plugin refused the host's hardware.
	refusedHost atomic.Pointer[string]

	// rejected says why the last reload refused the binary now at path;
	// this plugin, the previous binary, keeps serving. Nil when none was.
	rejected atomic.Pointer[string]

	// unsupported says why none of the plugin's names runs on the host's
	// hardware (Config.Host); such a plugin is never started.
	unsupported string

	mu          sync.Mutex
	starting    chan struct{} // closed when the start in progress ends
	closed      bool
	failures    int // consecutive failures
	starts      int
	retryAt     time.Time
	lastErr     error
	lastReason  Reason
	quarantined bool
}

// failure is an error of a plugin with the reason a fallback reports.
type failure struct {
	reason Reason
	err    error
}

func (f *failure) Error() string { return string(f.reason) + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// acquire returns the running instance, starting the process when none
// runs and the plugin may be started now.
func (p *plugin) acquire(ctx context.Context) (*instance, error) {
	if inst := p.running.Load(); inst != nil {
		return inst, nil
	}
	for {
		p.mu.Lock()
		if inst := p.running.Load(); inst != nil {
			p.mu.Unlock()
			return inst, nil
		}
		switch {
		case p.closed:
			p.mu.Unlock()
			return nil, &failure{ReasonClosed, fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		case p.selfCheckRefusal() != nil:
			err := p.selfCheckRefusal()
			p.mu.Unlock()
			return nil, &failure{ReasonStartFailed, fmt.Errorf("plugin %s: %w", p.name, err)}
		case p.quarantined:
			err := p.lastErr
			p.mu.Unlock()
			return nil, &failure{ReasonQuarantined, fmt.Errorf("plugin %s quarantined after %d failures, last: %w", p.name, p.cfg.QuarantineAfter, err)}
		case time.Now().Before(p.retryAt):
			err, at := p.lastErr, p.retryAt
			p.mu.Unlock()
			return nil, &failure{ReasonBackoff, fmt.Errorf("plugin %s restarts in %s after: %w", p.name, time.Until(at).Round(time.Millisecond), err)}
		}
		if wait := p.starting; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wait := make(chan struct{})
		p.starting = wait
		p.mu.Unlock()

		sctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
		inst, err := spawn(sctx, p.cfg, p.path, p.sha256, p.logger)
		cancel()
		if err == nil {
			err = p.check(ctx, inst)
		}
		if err == nil {
			err = p.selfCheck(ctx, inst) // selfcheck.go: the kernel catalog
		}

		p.mu.Lock()
		p.starting = nil
		close(wait)
		if p.closed {
			if inst != nil {
				inst.kill()
			}
			p.mu.Unlock()
			return nil, &failure{ReasonClosed, fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		}
		if err != nil {
			if inst != nil {
				inst.kill()
			}
			if ctx.Err() != nil {
				p.mu.Unlock()
				return nil, ctx.Err()
			}
			if errors.Is(err, core.ErrRefused) {
				// The plugin refused this host's hardware (Configure): it
				// is not restarted, and its names fall back.
				why := err.Error()
				p.refusedHost.Store(&why)
				p.lastErr = err
				p.mu.Unlock()
				p.logger.Warn("plugin refused this host's hardware", "error", err)
				return nil, &failure{ReasonUnsupportedHardware, fmt.Errorf("plugin %s: %w", p.name, err)}
			}
			p.failLocked(ReasonStartFailed, err)
			p.mu.Unlock()
			return nil, &failure{ReasonStartFailed, fmt.Errorf("plugin %s (%s): start: %w", p.name, p.path, err)}
		}
		p.starts++
		p.running.Store(inst)
		p.mu.Unlock()
		p.logger.Debug("plugin started", "pid", inst.pid, "path", p.path)
		return inst, nil
	}
}

// check verifies that a freshly started process is the plugin that was
// discovered: same family and the same names.
func (p *plugin) check(ctx context.Context, inst *instance) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	d, err := inst.backend.Describe(ctx)
	if err != nil {
		return err
	}
	if d.Name != p.desc.Name {
		return fmt.Errorf("%w: plugin now calls itself %q, was %q", core.ErrProtocol, d.Name, p.desc.Name)
	}
	if !reflect.DeepEqual(d.Handlers, p.desc.Handlers) && !p.staleDesc.Load() {
		// The description came from the cache, and this process says
		// otherwise: trust the process for the cache's next reader, and
		// cache no answer of this run, whose routes follow the old one.
		p.staleDesc.Store(true)
		p.logger.Warn("plugin describes itself otherwise than its cached description; its answers are not cached in this run", "path", p.path)
		if err := (descCache{dir: p.cfg.CacheDir}).put(p.cacheKey, d, false); err != nil {
			p.logger.Debug("description cache not written", "error", err)
		}
	}
	return nil
}

// failLocked records a failure of the running instance or of a start: the
// process is killed, and the next start waits for the backoff. p.mu is
// held.
func (p *plugin) failLocked(reason Reason, err error) {
	p.failures++
	p.degraded.Store(true)
	p.lastErr, p.lastReason = err, reason
	backoff := p.cfg.RestartBackoff << min(p.failures-1, 16)
	if backoff > p.cfg.MaxRestartBackoff || backoff <= 0 {
		backoff = p.cfg.MaxRestartBackoff
	}
	p.retryAt = time.Now().Add(backoff)
	if p.cfg.QuarantineAfter > 0 && p.failures >= p.cfg.QuarantineAfter {
		p.quarantined = true
		p.logger.Error("plugin quarantined", "failures", p.failures, "error", err)
	} else {
		p.logger.Warn("plugin failed; restarting after backoff", "reason", string(reason), "backoff", backoff, "error", err)
	}
}

// fail retires inst after a failed call. Only the first caller to report
// a given instance counts it.
func (p *plugin) fail(inst *instance, reason Reason, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running.CompareAndSwap(inst, nil) {
		return
	}
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		inst.retire()
	}()
	p.failLocked(reason, err)
}

// succeeded resets the failure count after a good answer.
func (p *plugin) succeeded() {
	if !p.degraded.Load() {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.degraded.Store(false)
	}
	if p.failures > 0 {
		p.logger.Info("plugin recovered", "after_failures", p.failures)
		p.failures = 0
	}
	p.mu.Unlock()
}

// stop kills the running instance, if any, and refuses further starts.
func (p *plugin) stop() { p.end(false) }

// retireAll refuses new starts and ends the running process once its
// calls in flight have finished.
func (p *plugin) retireAll() { p.end(true) }

// end refuses new starts and ends the running process: at once, or, when
// graceful, after the calls in flight on it. It waits for every process of
// the plugin to be gone.
func (p *plugin) end(graceful bool) {
	p.mu.Lock()
	p.closed = true
	p.degraded.Store(true)
	inst := p.running.Swap(nil)
	wait := p.starting
	p.mu.Unlock()
	finish := func(i *instance) {
		if graceful {
			i.retire()
		} else {
			i.kill()
		}
	}
	if wait != nil {
		<-wait
		if late := p.running.Swap(nil); late != nil {
			finish(late)
		}
	}
	if inst != nil {
		finish(inst)
	}
	p.retiring.Wait()
}

// ended reports that the plugin was stopped or retired: it starts no
// process again.
func (p *plugin) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// info fills the run-time fields of a listing entry.
func (p *plugin) info(pi *PluginInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if why := p.rejected.Load(); why != nil && pi.Reason == "" {
			pi.Reason = "a reload refused the binary now at " + p.path + " (" + *why + "); the binary read before keeps serving"
		}
	}()
	pi.Restarts = max(p.starts-1, 0)
	if p.lastErr != nil {
		pi.LastError = p.lastErr.Error()
	}
	switch inst := p.running.Load(); {
	case p.selfCheckRefusal() != nil:
		pi.Status, pi.Reason = StatusBroken, p.selfCheckRefusal().Error()
	case inst != nil:
		pi.Status, pi.PID = StatusRunning, inst.pid
	case p.quarantined:
		pi.Status, pi.Reason = StatusQuarantined, pi.LastError
	case p.lastErr != nil:
		pi.Status, pi.Reason = StatusFailed, pi.LastError
	default:
		pi.Status = StatusReady
	}
}

// classify names the reason of a failed call.
func classify(err error) Reason {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, core.ErrProtocol), errors.Is(err, core.ErrUnknownBackend):
		return ReasonProtocol
	}
	return ReasonCrashed
}

// unsupportedWhy says why the plugin does not run on this host: its
// declared hardware is absent, or it refused the host; "" when it runs.
func (p *plugin) unsupportedWhy() string {
	if p.unsupported != "" {
		return p.unsupported
	}
	if why := p.refusedHost.Load(); why != nil {
		return *why
	}
	return ""
}
