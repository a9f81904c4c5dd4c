package pluginproc

// Status is the state of a plugin in a listing.
type Status string

// The plugin states.
const (
	StatusReady       Status = "ready"       // described, not running
	StatusRunning     Status = "running"     // a process serves it
	StatusFailed      Status = "failed"      // its last start or call failed
	StatusQuarantined Status = "quarantined" // failed too often; not restarted
	StatusBroken      Status = "broken"      // cannot be used at all
	StatusShadowed    Status = "shadowed"    // the same name came first elsewhere
	// StatusUnsupportedHardware: none of its names runs on the host's
	// hardware, or it refused the host: never started; the reason says
	// what its names need.
	StatusUnsupportedHardware Status = "unsupported_hardware"
)

// Info is one entry of a listing of plugins (registry.Info).
type Info struct {
	// Name is the plugin's family name.
	Name string `json:"name"`
	// Path is the binary's path.
	Path string `json:"path"`
	// Version is the plugin's version, from its description.
	Version string `json:"version,omitempty"`
	// Vendor is who makes the plugin, from its description; empty when it
	// does not say.
	Vendor string `json:"vendor,omitempty"`
	// ProtocolVersion is the protocol version it speaks.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// SHA256 is the binary's hash.
	SHA256 string `json:"sha256,omitempty"`
	// Names are the backend names it serves.
	Names []string `json:"names,omitempty"`
	// Aliases maps an alias among Names to the name whose rules it shares.
	Aliases map[string]string `json:"aliases,omitempty"`
	// DeviceCode reports that the plugin hands the host device code and
	// launch plans (Registry.KernelModules, Registry.PlanKernel).
	DeviceCode bool `json:"device_code,omitempty"`
	// Status is its state.
	Status Status `json:"status"`
	// Reason says why a plugin is broken, failed, quarantined, shadowed or
	// does not run on the host's hardware; for a plugin
	// that keeps serving, why a reload refused the binary now on disk.
	Reason string `json:"reason,omitempty"`
	// LastError is the last failure, even when it recovered since.
	LastError string `json:"last_error,omitempty"`
	// PID is the process ID while running.
	PID int `json:"pid,omitempty"`
	// Restarts counts starts after the first.
	Restarts int `json:"restarts"`
}
