package backend

import (
	"context"
	"errors"

	"github.com/attnplug/attnplug/core"
)

// Kind is what a call to a Backend came to: a closed set.
type Kind uint8

const (
	// Answered: the call returned no error.
	Answered Kind = iota
	// Declined: the backend's own answer, after which it is fine: it
	// refused the request as invalid (core.ErrInvalidRequest), or has no
	// kernel (core.ErrNoKernel) or no plan (core.ErrNoPlan) for it. The
	// Reason is ReasonRefused. It is the request's doing, never counted
	// against the backend. (A request the host refuses itself, invalid
	// or past core's bounds of a plan, never reaches a backend.)
	Declined
	// Unavailable: no process could be had (restarting, quarantined,
	// broken, closed, not started, refused the host); or, for a route,
	// no backend serves the name. Reason says why; nothing was called.
	Unavailable
	// Failed: the call failed (a crash, the deadline, a protocol
	// violation); Reason says which. A plugin's process that ran it was
	// retired and restarts after the backoff, and the failure counts
	// towards its quarantine: the backend's own fault, since every call
	// that reaches it carries a request the host checked and judged
	// within core's bounds, and was admitted when it had room (a plan:
	// PlanCall), so its deadline passed by the backend's doing alone.
	Failed
	// Canceled: the caller's context ended; Err is its error.
	Canceled
)

// Outcome is what one call to a Backend came to. Only Answered has a nil
// Err. As an error, it reads "reason: err".
type Outcome struct {
	Kind   Kind
	Reason Reason
	Err    error
}

// Error is the reason and the error.
func (o Outcome) Error() string {
	if o.Reason == "" {
		return o.Err.Error()
	}
	return string(o.Reason) + ": " + o.Err.Error()
}

// Unwrap returns the error.
func (o Outcome) Unwrap() error { return o.Err }

// Unavailable is the Outcome of a backend that cannot be asked, for
// reason r.
func (r Reason) Unavailable(err error) Outcome {
	return Outcome{Kind: Unavailable, Reason: r, Err: err}
}

// OutcomeOf sorts the error err of a call made under ctx: none is
// Answered; ctx ending is Canceled; the backend's own answer is Declined;
// any other error is Failed, with the reason Classify names.
func OutcomeOf(ctx context.Context, err error) Outcome {
	switch {
	case err == nil:
		return Outcome{Kind: Answered}
	case ctx.Err() != nil:
		return Outcome{Kind: Canceled, Err: ctx.Err()}
	case errors.Is(err, core.ErrInvalidRequest), errors.Is(err, core.ErrNoKernel), errors.Is(err, core.ErrNoPlan):
		return Outcome{Kind: Declined, Reason: ReasonRefused, Err: err}
	}
	return Outcome{Kind: Failed, Reason: Classify(err), Err: err}
}

// Classify names the reason of a failed call.
func Classify(err error) Reason {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, core.ErrProtocol), errors.Is(err, core.ErrUnknownBackend):
		return ReasonProtocol
	}
	return ReasonCrashed
}
