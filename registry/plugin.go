package registry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// pluginBinary is a discovered plugin binary and what it declared: fixed once
// discovered (a changed file is another binary, which a reload reads).
type pluginBinary struct {
	name     string // the family name, from the description
	path     string
	sha256   string
	cacheKey string // the description cache's key: sha256 and environment
	desc     *core.Description
	// unsupported says why none of the binary's names runs on the host's
	// hardware (Config.Host); such a plugin is never started.
	unsupported string
}

// plugin is the supervisor of one plugin binary: it starts the binary's
// process when a call needs it (process.go), runs every call to it through
// one ladder (call), retires the process when a call fails, and keeps what
// it learns of the binary by running it.
type plugin struct {
	pluginBinary
	cfg    *Config
	logger hclog.Logger
	proc   process

	// state is what the plugin's routes read of it (health): degraded from
	// a failure until the next good answer, staleDesc when its process
	// describes itself otherwise than its routes' description.
	state health
	// refusedHost is set when the plugin refused the host's hardware.
	refusedHost atomic.Pointer[string]
	// rejected says why the last reload refused the binary now at path;
	// this plugin, the previous binary, keeps serving. Nil when none was.
	rejected atomic.Pointer[string]
	// selfChecked is the kernel-catalog self-check (selfcheck.go).
	selfChecked selfCheckState
	// device is the device code learnt from the binary (device.go).
	device deviceState
}

func (p *plugin) family() string  { return p.name }
func (p *plugin) health() *health { return &p.state }

// call runs f on a running process of p, starting one when needed, under
// the deadline of limit: every call to a plugin goes through it. A call
// that fails (not the caller's ctx ending, not the plugin's own answer)
// retires the process, which restarts after the backoff; see backend.call
// for what it returns.
func (p *plugin) call(ctx context.Context, limit callLimit, f func(context.Context, conn) error) error {
	for {
		inst, err := p.acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if !inst.enter() {
			continue // retired by a reload or a failure since acquire
		}
		cctx, cancel := limit.context(ctx, p.cfg)
		err = f(cctx, inst.backend)
		cancel()
		inst.leave()
		if err, done := settled(ctx, err); done {
			return err
		}
		reason := classify(err)
		if reason == ReasonTimeout {
			// gRPC reports a call it cancelled at the deadline in terms of
			// its stream.
			err = fmt.Errorf("no answer within the call deadline of %s: %w", limit.timeout(p.cfg), err)
		}
		p.fail(inst, reason, err)
		return &failure{reason: reason, err: fmt.Errorf("plugin %s: %w", p.name, err), retired: true}
	}
}

// acquire returns the running instance, starting the process when none
// runs and the plugin may be started now.
func (p *plugin) acquire(ctx context.Context) (*instance, error) {
	if inst := p.proc.running.Load(); inst != nil {
		return inst, nil
	}
	for {
		p.proc.mu.Lock()
		if inst := p.proc.running.Load(); inst != nil {
			p.proc.mu.Unlock()
			return inst, nil
		}
		switch {
		case p.proc.closed:
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonClosed, err: fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		case p.selfCheckRefusal() != nil:
			err := p.selfCheckRefusal()
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonStartFailed, err: fmt.Errorf("plugin %s: %w", p.name, err)}
		case p.proc.quarantined:
			err := p.proc.lastErr
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonQuarantined, err: fmt.Errorf("plugin %s quarantined after %d failures, last: %w", p.name, p.cfg.QuarantineAfter, err)}
		case time.Now().Before(p.proc.retryAt):
			err, at := p.proc.lastErr, p.proc.retryAt
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonBackoff, err: fmt.Errorf("plugin %s restarts in %s after: %w", p.name, time.Until(at).Round(time.Millisecond), err)}
		}
		if wait := p.proc.starting; wait != nil {
			p.proc.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wait := make(chan struct{})
		p.proc.starting = wait
		p.proc.mu.Unlock()

		sctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
		inst, err := spawn(sctx, p.cfg, p.path, p.sha256, p.logger)
		cancel()
		if err == nil {
			err = p.check(ctx, inst)
		}
		if err == nil {
			err = p.selfCheck(ctx, inst) // selfcheck.go: the kernel catalog
		}

		p.proc.mu.Lock()
		p.proc.starting = nil
		close(wait)
		if p.proc.closed {
			if inst != nil {
				inst.kill()
			}
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonClosed, err: fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
		}
		if err != nil {
			if inst != nil {
				inst.kill()
			}
			if ctx.Err() != nil {
				p.proc.mu.Unlock()
				return nil, ctx.Err()
			}
			if errors.Is(err, core.ErrRefused) {
				// The plugin refused this host's hardware (Configure): it
				// is not restarted, and its names fall back.
				why := err.Error()
				p.refusedHost.Store(&why)
				p.proc.lastErr = err
				p.proc.mu.Unlock()
				p.logger.Warn("plugin refused this host's hardware", "error", err)
				return nil, &failure{reason: ReasonUnsupportedHardware, err: fmt.Errorf("plugin %s: %w", p.name, err)}
			}
			p.failLocked(ReasonStartFailed, err)
			p.proc.mu.Unlock()
			return nil, &failure{reason: ReasonStartFailed, err: fmt.Errorf("plugin %s (%s): start: %w", p.name, p.path, err)}
		}
		p.proc.starts++
		p.proc.running.Store(inst)
		p.proc.mu.Unlock()
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
	if !reflect.DeepEqual(d.Handlers, p.desc.Handlers) && !p.state.staleDesc.Load() {
		// The description came from the cache, and this process says
		// otherwise: trust the process for the cache's next reader, and
		// cache no answer of this run, whose routes follow the old one.
		p.state.staleDesc.Store(true)
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
	p.proc.failures++
	p.state.degraded.Store(true)
	p.proc.lastErr, p.proc.lastReason = err, reason
	backoff := p.cfg.RestartBackoff << min(p.proc.failures-1, 16)
	if backoff > p.cfg.MaxRestartBackoff || backoff <= 0 {
		backoff = p.cfg.MaxRestartBackoff
	}
	p.proc.retryAt = time.Now().Add(backoff)
	if p.cfg.QuarantineAfter > 0 && p.proc.failures >= p.cfg.QuarantineAfter {
		p.proc.quarantined = true
		p.logger.Error("plugin quarantined", "failures", p.proc.failures, "error", err)
	} else {
		p.logger.Warn("plugin failed; restarting after backoff", "reason", string(reason), "backoff", backoff, "error", err)
	}
}

// fail retires inst after a failed call. Only the first caller to report
// a given instance counts it.
func (p *plugin) fail(inst *instance, reason Reason, err error) {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	if !p.proc.running.CompareAndSwap(inst, nil) {
		return
	}
	p.proc.retiring.Add(1)
	go func() {
		defer p.proc.retiring.Done()
		inst.retire()
	}()
	p.failLocked(reason, err)
}

// succeeded resets the failure count after a good answer.
func (p *plugin) succeeded() {
	if !p.state.degraded.Load() {
		return
	}
	p.proc.mu.Lock()
	if !p.proc.closed {
		p.state.degraded.Store(false)
	}
	if p.proc.failures > 0 {
		p.logger.Info("plugin recovered", "after_failures", p.proc.failures)
		p.proc.failures = 0
	}
	p.proc.mu.Unlock()
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
	p.proc.mu.Lock()
	p.proc.closed = true
	p.state.degraded.Store(true)
	inst := p.proc.running.Swap(nil)
	wait := p.proc.starting
	p.proc.mu.Unlock()
	finish := func(i *instance) {
		if graceful {
			i.retire()
		} else {
			i.kill()
		}
	}
	if wait != nil {
		<-wait
		if late := p.proc.running.Swap(nil); late != nil {
			finish(late)
		}
	}
	if inst != nil {
		finish(inst)
	}
	p.proc.retiring.Wait()
}

// ended reports that the plugin was stopped or retired: it starts no
// process again.
func (p *plugin) ended() bool {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return p.proc.closed
}

// info fills the run-time fields of a listing entry.
func (p *plugin) info(pi *PluginInfo) {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	defer func() {
		if why := p.rejected.Load(); why != nil && pi.Reason == "" {
			pi.Reason = "a reload refused the binary now at " + p.path + " (" + *why + "); the binary read before keeps serving"
		}
	}()
	pi.Restarts = max(p.proc.starts-1, 0)
	if p.proc.lastErr != nil {
		pi.LastError = p.proc.lastErr.Error()
	}
	switch inst := p.proc.running.Load(); {
	case p.selfCheckRefusal() != nil:
		pi.Status, pi.Reason = StatusBroken, p.selfCheckRefusal().Error()
	case inst != nil:
		pi.Status, pi.PID = StatusRunning, inst.pid
	case p.proc.quarantined:
		pi.Status, pi.Reason = StatusQuarantined, pi.LastError
	case p.proc.lastErr != nil:
		pi.Status, pi.Reason = StatusFailed, pi.LastError
	default:
		pi.Status = StatusReady
	}
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
