package registry

import (
	"context"
	"errors"

	"github.com/attnplug/attnplug/core"
)

// Reason names why the triton rules decided a request although a plugin
// serves, or should serve, its name. Answer.Fallback starts with it.
type Reason string

// The fallback reasons.
const (
	// ReasonPluginMissing: no plugin found serves a name the reference
	// registers.
	ReasonPluginMissing Reason = "plugin_missing"
	// ReasonStartFailed: the plugin binary did not start or failed its
	// handshake.
	ReasonStartFailed Reason = "plugin_start_failed"
	// ReasonCrashed: the plugin process died or its connection broke.
	ReasonCrashed Reason = "plugin_crashed"
	// ReasonTimeout: the plugin did not answer within the call deadline.
	ReasonTimeout Reason = "plugin_timeout"
	// ReasonProtocol: the plugin's answer broke the protocol (an unknown or
	// undeclared method, a name it claimed but refused).
	ReasonProtocol Reason = "plugin_protocol_error"
	// ReasonBackoff: the plugin failed recently and waits to be restarted.
	ReasonBackoff Reason = "plugin_restarting"
	// ReasonQuarantined: the plugin failed too often and is not restarted.
	ReasonQuarantined Reason = "plugin_quarantined"
	// ReasonClosed: the registry is shutting down.
	ReasonClosed Reason = "registry_closed"
)

// ReferenceNames returns the backend names that sglang's registry
// registers (core.ReferenceNames). A name of this list that no plugin serves still gets the
// triton rules, but as a fallback, with ReasonPluginMissing: a backend the
// host was expected to have is not there. Which plugin serves a name is
// never assumed; it comes from the plugins' descriptions.
func ReferenceNames() []string { return core.ReferenceNames() }

// ReasonRefused: the plugin refused the request as invalid for its rules.
const ReasonRefused Reason = "plugin_refused"

// ReasonUnsupportedHardware: the plugin's names do not run on the host's
// hardware, or the plugin refused it.
const ReasonUnsupportedHardware Reason = "plugin_unsupported_hardware"

// ReasonPluginBroken: the plugin binary that serves the name, or is named
// for it, is in a plugin directory but cannot be used (it failed to start
// or describe itself, or its description was refused).
const ReasonPluginBroken Reason = "plugin_broken"

// ReasonUnknownBackend: no plugin serves the name, or ever did, and it is
// not triton. Only Config.Strict makes it a refusal; otherwise the triton
// rules answer, as in sglang.
const ReasonUnknownBackend Reason = "backend_unknown"

// isAnswer reports that err is a backend's own answer rather than its
// failure: it refused the request as invalid, or has no kernel or no plan
// for it. The backend stays in service.
func isAnswer(err error) bool {
	return errors.Is(err, core.ErrInvalidRequest) || errors.Is(err, core.ErrNoKernel) || errors.Is(err, core.ErrNoPlan)
}

// failure is an error of a backend with the reason a fallback reports.
type failure struct {
	reason Reason
	err    error
	// retired is set when the call itself failed and the process that ran
	// it was retired (not when no process could be had).
	retired bool
}

func (f *failure) Error() string { return string(f.reason) + ": " + f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

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

// settled sorts the outcome err of a call under ctx: success, the caller's
// ctx ending (its error is returned) and the backend's own answer
// (isAnswer) are settled, done; any other error is a failure of the
// backend, for the caller to classify.
func settled(ctx context.Context, err error) (_ error, done bool) {
	switch {
	case err == nil:
		return nil, true
	case ctx.Err() != nil:
		return ctx.Err(), true
	case isAnswer(err):
		return err, true
	}
	return err, false
}
