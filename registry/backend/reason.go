package backend

// Reason names why the triton rules decided a request although a backend
// serves, or should serve, its name, or why a backend had no device plan.
// Answer.Fallback starts with it. Package registry exports the type and
// every constant under the same names.
type Reason string

// The reasons of a backend that could not answer.
const (
	// ReasonStartFailed: the plugin binary did not start or failed its
	// handshake.
	ReasonStartFailed Reason = "plugin_start_failed"
	// ReasonCrashed: the plugin process died or its connection broke (or
	// an in-process backend panicked).
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
	// ReasonRetired: a reload replaced the plugin between a request's
	// route lookup and its call. The registry asks the route in force
	// instead, so an answer carries this reason only where that route is
	// the same (it never is after a swap).
	ReasonRetired Reason = "plugin_retired"
	// ReasonRefused: the plugin refused the request as invalid for its
	// rules.
	ReasonRefused Reason = "plugin_refused"
	// ReasonUnsupportedHardware: the plugin's names do not run on the
	// host's hardware, or the plugin refused it.
	ReasonUnsupportedHardware Reason = "plugin_unsupported_hardware"
)

// The reasons of a name that no backend serves.
const (
	// ReasonPluginMissing: no plugin found serves a name the reference
	// registers, or one that a plugin served before a reload.
	ReasonPluginMissing Reason = "plugin_missing"
	// ReasonPluginBroken: the plugin binary that serves the name, or is
	// named for it, is in a plugin directory but cannot be used (it failed
	// to start or describe itself, or its description was refused).
	ReasonPluginBroken Reason = "plugin_broken"
	// ReasonUnknownBackend: no plugin serves the name, or ever did, and it
	// is not triton. Only the registry's Strict makes it a refusal;
	// otherwise the triton rules answer, as in sglang.
	ReasonUnknownBackend Reason = "backend_unknown"
)

// The reasons of device code refused by the host.
const (
	// ReasonBadModules: the plugin's kernel modules were refused (an image
	// that does not hash to its declared SHA-256, a duplicate name), or
	// the lock file does not pin them.
	ReasonBadModules Reason = "plugin_bad_modules"
	// ReasonBadPlan: the plugin's launch plan failed the host's check
	// (launch.Check) and was refused.
	ReasonBadPlan Reason = "plugin_bad_plan"
)
