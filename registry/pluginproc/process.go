package pluginproc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/attnplug/attnplug/wire"
)

// instance is one running plugin process.
type instance struct {
	proc    *wire.Process
	backend backend.Conn
	pid     int
	// stopping is set when the registry ends the process on purpose: its
	// end is then no news for the log (pluginLogger).
	stopping *atomic.Bool

	// calls are held shared by every call in flight; retire waits to take
	// it exclusively, so that the process ends after they finish.
	calls   sync.RWMutex
	retired atomic.Bool // no call enters once set
}

// enter admits a call; false means the instance was retired.
func (i *instance) enter() bool {
	if i.retired.Load() {
		return false
	}
	i.calls.RLock()
	if i.retired.Load() {
		i.calls.RUnlock()
		return false
	}
	return true
}

func (i *instance) leave() { i.calls.RUnlock() }

// retireWait bounds how long a retired instance waits for its calls in
// flight: a call runs under its caller's deadline (a LongCall), which
// must not hold a reload or a restart longer than a call without one may
// run.
const retireWait = backend.KernelCallTimeout

// retire admits no call any more, waits for those in flight (drain, at
// most retireWait), then ends the process: within grace in good order,
// else by SIGKILL (stop). A call still in flight then fails with it.
func (i *instance) retire(grace time.Duration) {
	i.drain(retireWait)
	i.stop(grace)
}

// drain marks i retired and waits at most wait for its calls in flight
// to end; it reports whether they did.
func (i *instance) drain(wait time.Duration) bool {
	i.retired.Store(true)
	drained := make(chan struct{})
	go func() {
		i.calls.Lock() // no call enters now: this waits for those in flight
		i.calls.Unlock()
		close(drained)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-drained:
		return true
	case <-t.C:
		return false
	}
}

// stop ends the process: in good order within grace, else by SIGKILL of
// its process group (wire.Process.Stop).
func (i *instance) stop(grace time.Duration) {
	if i.stopping != nil {
		i.stopping.Store(true)
	}
	i.proc.Stop(grace)
}

// kill ends the process at once, by SIGKILL of its process group, whatever
// its calls in flight (they fail): for a process known to be bad.
func (i *instance) kill() { i.stop(0) }

// process is the lifecycle of the process that runs one plugin binary: at
// most one instance runs at a time; a start in progress is shared by its
// callers; a failed instance is retired (it ends once its calls in flight
// finish) and the next start waits for a backoff that doubles with every
// failure in a row, until Config.QuarantineAfter failures quarantine the
// plugin; once closed, nothing starts again. running is read without the
// lock on every call; everything else is guarded by mu.
type process struct {
	running atomic.Pointer[instance]
	// failing is set from a failure until the next good answer: a good
	// answer then resets the failure count.
	failing atomic.Bool
	// retiring counts the instances retired after a failure whose process
	// has not ended yet; end waits for them.
	retiring sync.WaitGroup
	// dying are those instances, guarded by mu: end kills them at once
	// rather than wait for their calls in flight.
	dying map[*instance]struct{}

	mu          sync.Mutex
	starting    *startAttempt // the start in progress, if any
	closed      bool
	retired     bool // closed by Retire: a reload replaced the plugin
	failures    int  // consecutive failures
	starts      int
	retryAt     time.Time
	lastErr     error
	quarantined bool
	// broken is set when the binary's accepted bytes are gone
	// (ErrBinaryChanged): the plugin does not start again.
	broken error
}

// startAttempt is a start of the plugin's process in progress; done is
// closed when it ends, err is then its outcome.
type startAttempt struct {
	done chan struct{}
	err  *backend.Outcome
}

// acquire returns the running instance, starting the process when none
// runs and the plugin may be started now. The first start of the plugin
// is waited for as long as ctx allows (it is bounded by
// Config.StartTimeout); a restart, and the backoff before it, only until
// *restartBy, which acquire sets to Config.CallTimeout from now (or ctx's
// deadline, when sooner) when it is zero: past it the call fails with
// ReasonBackoff.
func (p *Plugin) acquire(ctx context.Context, restartBy *time.Time) (*instance, *backend.Outcome) {
	if inst := p.proc.running.Load(); inst != nil {
		return inst, nil
	}
	for {
		p.proc.mu.Lock()
		if inst := p.proc.running.Load(); inst != nil {
			p.proc.mu.Unlock()
			return inst, nil
		}
		if o := p.unstartable(); o != nil {
			p.proc.mu.Unlock()
			return nil, o
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
				o := backend.ReasonBackoff.Unavailable(fmt.Errorf("plugin %s restarts in %s after: %w", p.name, time.Until(at).Round(time.Millisecond), err))
				return nil, &o
			}
			if o := sleepUntil(ctx, at); o != nil {
				return nil, o
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
		if o := waitStart(ctx, a, restart, *restartBy, p.name); o != nil {
			return nil, o
		}
	}
}

// waitStart waits for the start attempt a to end, for ctx, and, for a
// restart, until restartBy; it returns a's failure, ctx's end, or a
// ReasonBackoff failure past restartBy.
func waitStart(ctx context.Context, a *startAttempt, restart bool, restartBy time.Time, name string) *backend.Outcome {
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
		return canceled(ctx)
	case <-late:
		o := backend.ReasonBackoff.Unavailable(fmt.Errorf("plugin %s is restarting and was not back within the call deadline", name))
		return &o
	}
}

// unstartable returns the failure of a plugin that may not start now for
// good (closed, broken, quarantined), or nil. p.proc.mu is held.
func (p *Plugin) unstartable() *backend.Outcome {
	var o backend.Outcome
	switch {
	case p.proc.closed:
		o = p.closedOutcome()
	case p.selfCheckRefusal() != nil:
		o = backend.ReasonStartFailed.Unavailable(fmt.Errorf("plugin %s: %w", p.name, p.selfCheckRefusal()))
	case p.proc.broken != nil:
		o = backend.ReasonPluginBroken.Unavailable(fmt.Errorf("plugin %s: %w", p.name, p.proc.broken))
	case p.proc.quarantined:
		o = backend.ReasonQuarantined.Unavailable(fmt.Errorf("plugin %s quarantined after %d failures, last: %w", p.name, p.cfg.QuarantineAfter, p.proc.lastErr))
	default:
		return nil
	}
	return &o
}

// closedOutcome is the outcome of a call to a plugin that ended: retired
// by a reload (the registry asks the route in force instead), or closed
// with the registry. p.proc.mu is held.
func (p *Plugin) closedOutcome() backend.Outcome {
	if p.proc.retired {
		return backend.ReasonRetired.Unavailable(fmt.Errorf("plugin %s: %w: replaced by a reload", p.name, core.ErrUnavailable))
	}
	return backend.ReasonClosed.Unavailable(fmt.Errorf("plugin %s: %w: registry closed", p.name, core.ErrUnavailable))
}

// canceled is the outcome of a wait that ctx ended.
func canceled(ctx context.Context) *backend.Outcome {
	return &backend.Outcome{Kind: backend.Canceled, Err: ctx.Err()}
}

// sleepUntil waits until t, or says that ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) *backend.Outcome {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return canceled(ctx)
	}
}

// start starts the plugin's process for attempt a, detached from the
// calls that wait for it: it is bounded by Config.StartTimeout and ends
// with the registry.
func (p *Plugin) start(a *startAttempt) {
	life := p.cfg.life
	if life == nil {
		life = context.Background()
	}
	ctx, cancel := p.cfg.startContext(life)
	defer cancel()
	inst, err := spawn(ctx, p.cfg, p.exe, p.logger)
	if err == nil {
		err = p.check(ctx, inst)
	}
	if err == nil {
		err = p.selfCheck(ctx, inst) // selfcheck.go: the kernel catalog
	}

	p.proc.mu.Lock()
	var unwanted *instance // a process started for nothing, stopped outside the lock
	switch {
	case p.proc.closed:
		unwanted = inst
		o := p.closedOutcome()
		a.err = &o
	case err != nil:
		unwanted = inst
		o := p.startFailed(err)
		a.err = &o
	default:
		p.proc.starts++
		p.proc.running.Store(inst)
		p.logger.Debug("plugin started", "pid", inst.pid, "path", p.path)
	}
	if unwanted != nil {
		// Stopping takes up to StopGrace and the kill's wait: Info and
		// fail do not wait for it. The attempt stays the one in progress
		// (starting) until the process is gone.
		p.proc.mu.Unlock()
		unwanted.stop(p.cfg.StopGrace)
		p.proc.mu.Lock()
	}
	p.proc.starting = nil
	p.proc.mu.Unlock()
	close(a.done)
}

// startFailed records the failed start err and returns its outcome.
// p.proc.mu is held.
func (p *Plugin) startFailed(err error) backend.Outcome {
	switch {
	case errors.Is(err, core.ErrRefused):
		// The plugin refused this host's hardware (Configure): it is
		// not restarted, and its names fall back.
		why := err.Error()
		p.refusedHost.Store(&why)
		p.proc.lastErr = err
		p.logger.Warn("plugin refused this host's hardware", "error", err)
		return backend.ReasonUnsupportedHardware.Unavailable(fmt.Errorf("plugin %s: %w", p.name, err))
	case errors.Is(err, ErrBinaryChanged):
		// The accepted bytes are gone: no start can succeed until a
		// reload reads the new file.
		p.proc.broken, p.proc.lastErr = err, err
		p.health.Degraded.Store(true)
		p.logger.Error("plugin binary changed in place; not started again until a reload", "error", err)
		return backend.ReasonPluginBroken.Unavailable(fmt.Errorf("plugin %s: %w", p.name, err))
	}
	p.failLocked(backend.ReasonStartFailed, err)
	return backend.ReasonStartFailed.Unavailable(fmt.Errorf("plugin %s (%s): start: %w", p.name, p.path, err))
}

// check verifies that a freshly started process is the plugin that was
// discovered: same family and the same names.
func (p *Plugin) check(ctx context.Context, inst *instance) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	d, err := inst.backend.Describe(ctx)
	if err != nil {
		return err
	}
	if d.Name != p.desc.Name {
		return fmt.Errorf("%w: plugin now calls itself %q, was %q", core.ErrProtocol, d.Name, p.desc.Name)
	}
	if !reflect.DeepEqual(d.Handlers, p.desc.Handlers) && !p.health.StaleDesc.Load() {
		// The description came from the cache, and this process says
		// otherwise: trust the process for the cache's next reader, and
		// cache no answer of this run, whose routes follow the old one.
		p.health.StaleDesc.Store(true)
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
func (p *Plugin) failLocked(reason backend.Reason, err error) {
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
		p.health.Degraded.Store(true) // its cached answers are served no more
		p.logger.Error("plugin quarantined", "failures", p.proc.failures, "error", err)
	} else {
		p.logger.Warn("plugin failed; restarting after backoff", "reason", string(reason), "backoff", backoff, "error", err)
	}
}

// fail retires inst after a failed call. Only the first caller to report
// a given instance counts it.
func (p *Plugin) fail(inst *instance, reason backend.Reason, err error) {
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
func (p *Plugin) succeeded() {
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

// Stop kills the running process, if any, and refuses further starts
// (the registry's Close, a binary a reload rejected).
func (p *Plugin) Stop() { p.end(false) }

// Retire refuses new starts and ends the running process once its calls
// in flight have finished (a reload's swap).
func (p *Plugin) Retire() { p.end(true) }

// end refuses new starts and ends the running process: when graceful,
// after the calls in flight on it (a reload's swap), else at once (Close);
// either way it is let go within the registry's grace, then killed
// (Config.StopGrace). The processes retired after failures are killed at
// once. end waits for every process of the plugin to be gone, which takes
// a bounded time whatever state they are in.
func (p *Plugin) end(graceful bool) {
	p.proc.mu.Lock()
	p.proc.retired = graceful && !p.proc.closed
	p.proc.closed = true
	p.health.Degraded.Store(true)
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
	if p.exe != nil {
		p.exe.close()
	}
}

// Lift gives a plugin that a reload keeps a fresh start: a quarantine is
// lifted, and the failures in a row and the backoff are forgotten, so
// that the next call starts its process at once (a plugin that ended or
// whose binary is broken stays so). It returns the error a quarantined
// plugin was quarantined on, nil when it was not quarantined.
func (p *Plugin) Lift() (quarantinedOn error) {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	if p.proc.closed || p.proc.broken != nil {
		return nil
	}
	if p.proc.quarantined {
		quarantinedOn = p.proc.lastErr
		p.proc.quarantined = false
		p.health.Degraded.Store(false)
	}
	p.proc.failures = 0
	p.proc.retryAt = time.Time{}
	p.proc.failing.Store(false)
	return quarantinedOn
}

// Keepable reports that a reload may keep the plugin as it is: it has not
// ended and its binary's bytes are still there.
func (p *Plugin) Keepable() bool {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return !p.proc.closed && p.proc.broken == nil
}
