package registry

import (
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// Reason names why the triton rules decided a request although a plugin
// serves, or should serve, its name, or why a name has no device plan.
// Answer.Fallback starts with it. The reasons are declared, each with what
// it means, in package backend (reason.go there), which the backends
// share; they are the same values under the same names here.
type Reason = backend.Reason

// The fallback reasons (backend/reason.go says what each means).
const (
	ReasonPluginMissing       = backend.ReasonPluginMissing
	ReasonStartFailed         = backend.ReasonStartFailed
	ReasonCrashed             = backend.ReasonCrashed
	ReasonTimeout             = backend.ReasonTimeout
	ReasonProtocol            = backend.ReasonProtocol
	ReasonBackoff             = backend.ReasonBackoff
	ReasonQuarantined         = backend.ReasonQuarantined
	ReasonClosed              = backend.ReasonClosed
	ReasonRetired             = backend.ReasonRetired
	ReasonRefused             = backend.ReasonRefused
	ReasonUnsupportedHardware = backend.ReasonUnsupportedHardware
	ReasonPluginBroken        = backend.ReasonPluginBroken
	ReasonUnknownBackend      = backend.ReasonUnknownBackend
	ReasonBadModules          = backend.ReasonBadModules
	ReasonBadPlan             = backend.ReasonBadPlan
)

// ReferenceNames returns the backend names that sglang's registry
// registers (core.ReferenceNames). A name of this list that no plugin serves still gets the
// triton rules, but as a fallback, with ReasonPluginMissing: a backend the
// host was expected to have is not there. Which plugin serves a name is
// never assumed; it comes from the plugins' descriptions.
func ReferenceNames() []string { return core.ReferenceNames() }
