package registry

import (
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/pluginproc"
)

// The plugin binaries, their listing and their lock file are package
// pluginproc's: these are its names, exported here as the registry's API
// has always named them.

// PluginInfo is one entry of Registry.Plugins.
type PluginInfo = pluginproc.Info

// Status is the state of a plugin in a listing.
type Status = pluginproc.Status

// The plugin states.
const (
	StatusReady       = pluginproc.StatusReady       // described, not running
	StatusRunning     = pluginproc.StatusRunning     // a process serves it
	StatusFailed      = pluginproc.StatusFailed      // its last start or call failed
	StatusQuarantined = pluginproc.StatusQuarantined // failed too often; not restarted
	StatusBroken      = pluginproc.StatusBroken      // cannot be used at all
	StatusShadowed    = pluginproc.StatusShadowed    // the same name came first elsewhere
	// StatusUnsupportedHardware: never started on this host's hardware.
	StatusUnsupportedHardware = pluginproc.StatusUnsupportedHardware
)

// Lock pins plugin binaries by SHA-256: attnplug.lock, written by
// attnplug lock (pluginproc.Lock).
type Lock = pluginproc.Lock

// LockEntry pins one plugin binary.
type LockEntry = pluginproc.LockEntry

// ModulePin pins one kernel module image of a plugin.
type ModulePin = pluginproc.ModulePin

// LockFileName is the lock file's name in a plugin directory.
const LockFileName = pluginproc.LockFileName

var (
	// ErrNotPinned marks a plugin binary refused by the lock file.
	ErrNotPinned = pluginproc.ErrNotPinned
	// ErrBinaryChanged marks a plugin binary whose accepted bytes are
	// gone: the file was changed in place since it was verified. The
	// plugin is not started; a reload reads the new file.
	ErrBinaryChanged = pluginproc.ErrBinaryChanged
)

// ReadLock reads the lock file at path.
func ReadLock(path string) (*Lock, error) { return pluginproc.ReadLock(path) }

// LockOf returns the lock of the plugins in infos that are usable (the
// listing of Registry.Plugins), sorted by file name.
func LockOf(infos []PluginInfo) *Lock { return pluginproc.LockOf(infos) }

// ModulePins returns the pins of mods, built for dev.
func ModulePins(mods []core.KernelModule, dev core.DeviceInfo) []ModulePin {
	return pluginproc.ModulePins(mods, dev)
}

// FileSHA256 returns the hex SHA-256 of the file at path: how plugin
// binaries are identified in the description cache and the lock file.
func FileSHA256(path string) (string, error) { return pluginproc.FileSHA256(path) }

// SplitDirs splits a ':'-separated list of directories, as in
// ATTNPLUG_PLUGIN_DIR, dropping empty entries.
func SplitDirs(list string) []string { return pluginproc.SplitDirs(list) }
