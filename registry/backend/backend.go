package backend

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/hashicorp/go-hclog"
)

// Backend serves the names of the routes that hold it: the supervised
// process of a plugin binary (package pluginproc) or a core.Backend in the
// host's process (InProcess). Implementations are safe for concurrent use.
type Backend interface {
	// Family names the backend in answers (core.Answer.Plugin) and logs.
	Family() string
	// Description is what the backend described, which its routes follow.
	Description() *core.Description
	// Call runs f on the backend's connection under the deadline of limit
	// and says what it came to. Every call to a backend goes through it.
	Call(ctx context.Context, limit Limit, f func(context.Context, Conn) error) Outcome
	// Health is the backend's state that its routes read on every answer.
	Health() *Health
	// Unsupported says why the backend does not run on the host's
	// hardware; "" when it does.
	Unsupported() string
	// Binary is the path and SHA-256 of the backend's binary (the lock
	// file pins its modules under the path's base name); both "" for a
	// backend in process.
	Binary() (path, sha256 string)
	// Log is the backend's logger.
	Log() hclog.Logger
}

// Conn is what a call asks of a backend: every ability. Over the wire
// each method exists and the description says which the plugin has
// (wire.Client); an in-process backend lacking one answers as a plugin
// without it would.
type Conn interface {
	core.BatchBackend
	core.Configurer
	core.KernelRunner
	core.KernelPlanner
}

// Health is what the routes of a backend read on every answer, with two
// atomic loads and no call: whether answers cached from it may be served,
// and whether its answers may be cached at all.
type Health struct {
	// Degraded is set once the backend cannot serve again by itself:
	// quarantined, its binary's bytes gone, or ended. Its cached answers
	// are not served then. Through a crash, a timeout or a restart they
	// are: they are the answers of the same binary, whose rules are pure.
	Degraded atomic.Bool
	// StaleDesc is set when the running process describes itself otherwise
	// than the description the routes were built from (a cached one): its
	// answers are then never cached.
	StaleDesc atomic.Bool
}

// KernelCallTimeout bounds a LongCall when the caller's context has no
// deadline of its own: kernels on large tensors take far longer than a
// dispatch.
const KernelCallTimeout = 5 * time.Minute

// Limit says which deadline a call to a backend runs under.
type Limit int

const (
	// DispatchCall runs under the registry's call timeout.
	DispatchCall Limit = iota
	// LongCall (a kernel, device code) runs under the caller's own
	// deadline, else KernelCallTimeout.
	LongCall
	// PlanCall (a plan) runs under the registry's call timeout, as
	// DispatchCall does, once the backend has room for it: the registry
	// runs at most MaxPlanCalls plan calls of one backend at a time, and
	// the others wait for room under their caller's context alone. A
	// backend is never asked for more plans at once than it can answer
	// within the deadline, nor made to hold more (each is bounded by
	// core's bounds of a plan): however many clients ask at once, no plan
	// call is late because of the others, and none counts against the
	// backend for it.
	PlanCall
)

// MaxPlanCalls is how many plan calls (PlanCall) of one backend the
// registry runs at a time.
const MaxPlanCalls = 4

// Timeout is the deadline of a call of l when the caller gives none;
// callTimeout is the registry's deadline of a dispatch.
func (l Limit) Timeout(callTimeout time.Duration) time.Duration {
	if l == LongCall {
		return KernelCallTimeout
	}
	return callTimeout
}

// Context returns the context a call of l runs under.
func (l Limit) Context(ctx context.Context, callTimeout time.Duration) (context.Context, context.CancelFunc) {
	if _, has := ctx.Deadline(); l != LongCall || !has {
		return context.WithTimeout(ctx, l.Timeout(callTimeout))
	}
	return ctx, func() {}
}
