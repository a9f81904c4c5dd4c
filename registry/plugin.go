package registry

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	exe      *verifiedBinary // what every start runs
	cacheKey string          // the description cache's key: sha256 and environment
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

	// state is what the plugin's routes read of it (health): degraded once
	// it cannot serve again by itself (quarantined, broken, ended), staleDesc when its process
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

func (p *plugin) family() string          { return p.name }
func (p *plugin) binary() *verifiedBinary { return p.exe }

func (p *plugin) description() *core.Description { return p.desc }
func (p *plugin) deviceCode() *deviceState       { return &p.device }
func (p *plugin) log() hclog.Logger              { return p.logger }
func (p *plugin) lockName() string               { return filepath.Base(p.path) }

// closeBinary closes the binary's descriptor once the plugin has ended.
func (p *plugin) closeBinary() {
	if p.exe != nil {
		p.exe.close()
	}
}
func (p *plugin) health() *health { return &p.state }

// call runs f on a running process of p, starting one when needed, under
// the deadline of limit: every call to a plugin goes through it. A call
// that fails (not the caller's ctx ending, not the plugin's own answer)
// retires the process, which restarts after the backoff. A call whose
// process died under it (ReasonCrashed) is sent once more, to the
// restarted process: the binary's rules are pure, and the restart is
// waited for within the call deadline. See backend.call for what it
// returns.
func (p *plugin) call(ctx context.Context, limit callLimit, f func(context.Context, conn) error) error {
	var restartBy time.Time // the deadline of waiting for a restart, once one is waited for
	retried := false
	for {
		inst, err := p.acquire(ctx, &restartBy)
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
		err = redactSockets(err)
		if reason == ReasonTimeout {
			// gRPC reports a call it cancelled at the deadline in terms of
			// its stream.
			err = fmt.Errorf("no answer within the call deadline of %s: %w", limit.timeout(p.cfg), err)
		}
		p.fail(inst, reason, err)
		if reason == ReasonCrashed && !retried {
			retried = true
			restartBy = time.Now().Add(p.cfg.CallTimeout)
			continue
		}
		return &failure{reason: reason, err: fmt.Errorf("plugin %s: %w", p.name, err), retired: true}
	}
}

// startAttempt is a start of the plugin's process in progress; done is
// closed when it ends, err is then its outcome.
type startAttempt struct {
	done chan struct{}
	err  error
}

// acquire returns the running instance, starting the process when none
// runs and the plugin may be started now. The first start of the plugin
// is waited for as long as ctx allows (it is bounded by
// Config.StartTimeout); a restart, and the backoff before it, only until
// *restartBy, which acquire sets to Config.CallTimeout from now (or ctx's
// deadline, when sooner) when it is zero: past it the call fails with
// ReasonBackoff.
func (p *plugin) acquire(ctx context.Context, restartBy *time.Time) (*instance, error) {
	if inst := p.proc.running.Load(); inst != nil {
		return inst, nil
	}
	for {
		p.proc.mu.Lock()
		if inst := p.proc.running.Load(); inst != nil {
			p.proc.mu.Unlock()
			return inst, nil
		}
		if err := p.unstartable(); err != nil {
			p.proc.mu.Unlock()
			return nil, err
		}
		restart := p.proc.starts > 0 || p.proc.failures > 0
		if restart && restartBy.IsZero() {
			*restartBy = time.Now().Add(p.cfg.CallTimeout)
			if dl, ok := ctx.Deadline(); ok && dl.Before(*restartBy) {
				*restartBy = dl
			}
		}
		if at := p.proc.retryAt; p.proc.starting == nil && time.Now().Before(at) {
			err := p.proc.lastErr
			p.proc.mu.Unlock()
			if !restart || at.After(*restartBy) {
				return nil, &failure{reason: ReasonBackoff, err: fmt.Errorf("plugin %s restarts in %s after: %w", p.name, time.Until(at).Round(time.Millisecond), err)}
			}
			if err := sleepUntil(ctx, at); err != nil {
				return nil, err
			}
			continue
		}
		a := p.proc.starting
		if a == nil {
			a = &startAttempt{done: make(chan struct{})}
			p.proc.starting = a
			go p.start(a)
		}
		p.proc.mu.Unlock()
		if err := waitStart(ctx, a, restart, *restartBy, p.name); err != nil {
			return nil, err
		}
	}
}

// waitStart waits for the start attempt a to end, for ctx, and, for a
// restart, until restartBy; it returns a's failure, ctx's error, or a
// ReasonBackoff failure past restartBy.
func waitStart(ctx context.Context, a *startAttempt, restart bool, restartBy time.Time, name string) error {
	var late <-chan time.Time
	if restart {
		t := time.NewTimer(time.Until(restartBy))
		defer t.Stop()
		late = t.C
	}
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	case <-late:
		return &failure{reason: ReasonBackoff, err: fmt.Errorf("plugin %s is restarting and was not back within the call deadline", name)}
	}
}

// unstartable returns the failure of a plugin that may not start now for
// good (closed, broken, quarantined), or nil. p.proc.mu is held.
func (p *plugin) unstartable() error {
	switch {
	case p.proc.closed:
		return &failure{reason: ReasonClosed, err: fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
	case p.selfCheckRefusal() != nil:
		return &failure{reason: ReasonStartFailed, err: fmt.Errorf("plugin %s: %w", p.name, p.selfCheckRefusal())}
	case p.proc.broken != nil:
		return &failure{reason: ReasonPluginBroken, err: fmt.Errorf("plugin %s: %w", p.name, p.proc.broken)}
	case p.proc.quarantined:
		return &failure{reason: ReasonQuarantined, err: fmt.Errorf("plugin %s quarantined after %d failures, last: %w", p.name, p.cfg.QuarantineAfter, p.proc.lastErr)}
	}
	return nil
}

// sleepUntil waits until t, or returns ctx's error when it ends first.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start starts the plugin's process for attempt a, detached from the
// calls that wait for it: it is bounded by Config.StartTimeout and ends
// with the registry.
func (p *plugin) start(a *startAttempt) {
	life := p.cfg.life
	if life == nil {
		life = context.Background()
	}
	ctx, cancel := p.cfg.startContext(life)
	defer cancel()
	inst, err := spawn(ctx, p.cfg, p.binary(), p.logger)
	if err == nil {
		err = p.check(ctx, inst)
	}
	if err == nil {
		err = p.selfCheck(ctx, inst) // selfcheck.go: the kernel catalog
	}

	p.proc.mu.Lock()
	defer func() {
		p.proc.starting = nil
		p.proc.mu.Unlock()
		close(a.done)
	}()
	switch {
	case p.proc.closed:
		if inst != nil {
			inst.stop(p.cfg.StopGrace)
		}
		a.err = &failure{reason: ReasonClosed, err: fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable)}
	case err != nil:
		if inst != nil {
			inst.stop(p.cfg.StopGrace)
		}
		switch {
		case errors.Is(err, core.ErrRefused):
			// The plugin refused this host's hardware (Configure): it is
			// not restarted, and its names fall back.
			why := err.Error()
			p.refusedHost.Store(&why)
			p.proc.lastErr = err
			p.logger.Warn("plugin refused this host's hardware", "error", err)
			a.err = &failure{reason: ReasonUnsupportedHardware, err: fmt.Errorf("plugin %s: %w", p.name, err)}
		case errors.Is(err, ErrBinaryChanged):
			// The accepted bytes are gone: no start can succeed until a
			// reload reads the new file.
			p.proc.broken, p.proc.lastErr = err, err
			p.state.degraded.Store(true)
			p.logger.Error("plugin binary changed in place; not started again until a reload", "error", err)
			a.err = &failure{reason: ReasonPluginBroken, err: fmt.Errorf("plugin %s: %w", p.name, err)}
		default:
			p.failLocked(ReasonStartFailed, err)
			a.err = &failure{reason: ReasonStartFailed, err: fmt.Errorf("plugin %s (%s): start: %w", p.name, p.path, err)}
		}
	default:
		p.proc.starts++
		p.proc.running.Store(inst)
		p.logger.Debug("plugin started", "pid", inst.pid, "path", p.path)
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
	p.proc.failing.Store(true)
	p.proc.lastErr = err
	backoff := p.cfg.RestartBackoff << min(p.proc.failures-1, 16)
	if backoff > p.cfg.MaxRestartBackoff || backoff <= 0 {
		backoff = p.cfg.MaxRestartBackoff
	}
	p.proc.retryAt = time.Now().Add(backoff)
	if p.cfg.QuarantineAfter > 0 && p.proc.failures >= p.cfg.QuarantineAfter {
		p.proc.quarantined = true
		p.state.degraded.Store(true) // its cached answers are served no more
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
	if p.proc.dying == nil {
		p.proc.dying = map[*instance]struct{}{}
	}
	p.proc.dying[inst] = struct{}{}
	go func() {
		defer p.proc.retiring.Done()
		// A failed process is not asked to exit: it is killed once the
		// calls that were still in flight on it have ended.
		inst.retire(0)
		p.proc.mu.Lock()
		delete(p.proc.dying, inst)
		p.proc.mu.Unlock()
	}()
	p.failLocked(reason, err)
}

// succeeded resets the failure count after a good answer.
func (p *plugin) succeeded() {
	if !p.proc.failing.Load() {
		return
	}
	p.proc.mu.Lock()
	if p.proc.failures > 0 {
		p.logger.Info("plugin recovered", "after_failures", p.proc.failures)
		p.proc.failures = 0
	}
	p.proc.failing.Store(false)
	p.proc.mu.Unlock()
}

// stop kills the running instance, if any, and refuses further starts.
func (p *plugin) stop() { p.end(false) }

// retireAll refuses new starts and ends the running process once its
// calls in flight have finished.
func (p *plugin) retireAll() { p.end(true) }

// end refuses new starts and ends the running process: when graceful,
// after the calls in flight on it (a reload's swap), else at once (Close);
// either way it is let go within the registry's grace, then killed
// (Config.StopGrace). The processes retired after failures are killed at
// once. end waits for every process of the plugin to be gone, which takes
// a bounded time whatever state they are in.
func (p *plugin) end(graceful bool) {
	p.proc.mu.Lock()
	p.proc.closed = true
	p.state.degraded.Store(true)
	inst := p.proc.running.Swap(nil)
	wait := p.proc.starting
	dying := make([]*instance, 0, len(p.proc.dying))
	for i := range p.proc.dying {
		dying = append(dying, i)
	}
	p.proc.mu.Unlock()
	for _, i := range dying {
		i.kill()
	}
	finish := func(i *instance) {
		if graceful {
			i.retire(p.cfg.StopGrace)
		} else {
			i.stop(p.cfg.StopGrace)
		}
	}
	if wait != nil {
		<-wait.done
		if late := p.proc.running.Swap(nil); late != nil {
			finish(late)
		}
	}
	if inst != nil {
		finish(inst)
	}
	p.proc.retiring.Wait()
	p.closeBinary()
}

// ended reports that the plugin was stopped or retired: it starts no
// process again.
func (p *plugin) ended() bool {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return p.proc.closed
}

// keepable reports that a reload may keep the plugin as it is: it has not
// ended and its binary's bytes are still there.
func (p *plugin) keepable() bool {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return !p.proc.closed && p.proc.broken == nil
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
	case p.proc.broken != nil:
		pi.Status, pi.Reason = StatusBroken, p.proc.broken.Error()
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
