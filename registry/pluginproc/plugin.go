package pluginproc

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/hashicorp/go-hclog"
)

// Plugin is the supervisor of one plugin binary, a backend.Backend: it
// starts the binary's process when a call needs it (process.go), runs
// every call to it through one ladder (Call), retires the process when a
// call fails, and keeps what it learns of the binary by running it. What
// it was discovered as (name, path, hash, description) is fixed: a
// changed file is another binary, which a reload reads.
type Plugin struct {
	name     string // the family name, from the description
	path     string
	sha256   string
	exe      *verifiedBinary // what every start runs
	cacheKey string          // the description cache's key: sha256 and environment
	desc     *core.Description
	// unsupported says why none of the binary's names runs on the host's
	// hardware (Config.Host); such a plugin is never started.
	unsupported string

	cfg    *Config
	logger hclog.Logger
	proc   process

	// health is what the plugin's routes read of it: degraded once it
	// cannot serve again by itself (quarantined, broken, ended), staleDesc
	// when its process describes itself otherwise than its routes'
	// description.
	health backend.Health
	// refusedHost is set when the plugin refused the host's hardware.
	refusedHost atomic.Pointer[string]
	// rejected says why the last reload refused the binary now at path;
	// this plugin, the previous binary, keeps serving. Nil when none was.
	rejected atomic.Pointer[string]
	// selfChecked is the kernel-catalog self-check (selfcheck.go).
	selfChecked selfCheckState
}

var _ backend.Backend = (*Plugin)(nil)

// Family is the plugin's family name.
func (p *Plugin) Family() string { return p.name }

// Description is what the binary described.
func (p *Plugin) Description() *core.Description { return p.desc }

// Health is what the plugin's routes read of it.
func (p *Plugin) Health() *backend.Health { return &p.health }

// Binary is the binary's path and SHA-256.
func (p *Plugin) Binary() (path, sha256 string) { return p.path, p.sha256 }

// Log is the plugin's logger.
func (p *Plugin) Log() hclog.Logger { return p.logger }

// Unsupported says why the plugin does not run on this host: its
// declared hardware is absent, or it refused the host; "" when it runs.
func (p *Plugin) Unsupported() string {
	if p.unsupported != "" {
		return p.unsupported
	}
	if why := p.refusedHost.Load(); why != nil {
		return *why
	}
	return ""
}

// Call runs f on a running process of p, starting one when needed, under
// the deadline of limit: every call to a plugin goes through it. A call
// that fails (not the caller's ctx ending, not the plugin's own answer)
// retires the process, which restarts after the backoff. A call whose
// process died under it (ReasonCrashed) is sent once more, to the
// restarted process: the binary's rules are pure, and the restart is
// waited for within the call deadline. An answer resets the count of
// failures in a row.
func (p *Plugin) Call(ctx context.Context, limit backend.Limit, f func(context.Context, backend.Conn) error) backend.Outcome {
	var restartBy time.Time // the deadline of waiting for a restart, once one is waited for
	retried := false
	for {
		inst, down := p.acquire(ctx, &restartBy)
		if down != nil && ctx.Err() != nil {
			return *canceled(ctx)
		}
		if down != nil {
			return *down
		}
		if !inst.enter() {
			continue // retired by a reload or a failure since acquire
		}
		cctx, cancel := limit.Context(ctx, p.cfg.CallTimeout)
		err := f(cctx, inst.backend)
		cancel()
		inst.leave()
		o := backend.OutcomeOf(ctx, err)
		switch o.Kind {
		case backend.Answered:
			p.succeeded()
			return o
		case backend.Declined, backend.Canceled:
			return o
		}
		err = redactSockets(err)
		if o.Reason == backend.ReasonTimeout {
			// gRPC reports a call it cancelled at the deadline in terms of
			// its stream.
			err = fmt.Errorf("no answer within the call deadline of %s: %w", limit.Timeout(p.cfg.CallTimeout), err)
		}
		p.fail(inst, o.Reason, err)
		if o.Reason == backend.ReasonCrashed && !retried {
			retried = true
			restartBy = time.Now().Add(p.cfg.CallTimeout)
			continue
		}
		o.Err = fmt.Errorf("plugin %s: %w", p.name, err)
		return o
	}
}

// Start starts the plugin's process unless it runs, and waits for it.
func (p *Plugin) Start(ctx context.Context) error {
	if _, o := p.acquire(ctx, new(time.Time)); o != nil {
		return *o
	}
	return nil
}

// Reject notes why a reload refused the binary now at the plugin's path,
// which the plugin keeps serving in place of; "" clears it.
func (p *Plugin) Reject(why string) {
	if why == "" {
		p.rejected.Store(nil)
		return
	}
	p.rejected.Store(&why)
}

// Info lists the plugin: what it described and its run-time state. Names
// and Aliases are left for the registry, which knows which names route to
// it.
func (p *Plugin) Info() Info {
	pi := Info{
		Name: p.name, Path: p.path, Version: p.desc.Version, Vendor: p.desc.Vendor,
		ProtocolVersion: p.desc.ProtocolVersion, SHA256: p.sha256, DeviceCode: p.desc.DeviceCode,
	}
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
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
	case p.Unsupported() != "":
		pi.Status, pi.Reason = StatusUnsupportedHardware, "does not run on this host: "+p.Unsupported()
	case p.proc.quarantined:
		pi.Status, pi.Reason = StatusQuarantined, pi.LastError
	case p.proc.failures > 0:
		pi.Status, pi.Reason = StatusFailed, pi.LastError
	default:
		pi.Status = StatusReady
	}
	if why := p.rejected.Load(); why != nil && pi.Reason == "" {
		pi.Reason = "a reload refused the binary now at " + p.path + " (" + *why + "); the binary read before keeps serving"
	}
	return pi
}
