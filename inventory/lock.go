package inventory

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/attnplug/attnplug/registry"
)

// WriteLock writes what attnplug lock pinned in the lock file at path:
// each binary with its hash, version and names, and its modules.
func WriteLock(w io.Writer, lock *registry.Lock, path string) {
	for _, p := range lock.Plugins {
		fmt.Fprintf(w, "pinned %s  sha256 %s  version %s  names %s\n", p.File, p.SHA256, p.Version, strings.Join(p.Names, ","))
		for _, m := range p.Modules {
			fmt.Fprintf(w, "  module %s  sha256 %s  %s for %s (%s)\n", m.Name, m.SHA256, m.Format, m.Arch, m.Device)
		}
	}
	fmt.Fprintf(w, "wrote %s: %d plugins pinned\n", path, len(lock.Plugins))
}

// PinModules adds to lock the modules that every plugin of infos with
// device code hands for the device deviceOf gives (attnplug lock
// --modules). It fails, naming them, when some plugin has none to pin;
// it says on stderr when no plugin hands device code.
func PinModules(ctx context.Context, stderr io.Writer, reg *registry.Registry, infos []registry.PluginInfo, lock *registry.Lock, deviceOf DeviceFunc) error {
	device, source, err := deviceOf()
	if err != nil {
		return err
	}
	var failed []string
	n := 0
	for _, p := range infos {
		if !p.DeviceCode || p.SHA256 == "" || len(p.Names) == 0 {
			continue
		}
		n++
		mods, err := reg.KernelModules(ctx, p.Names[0], device)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		lock.AddModules(filepath.Base(p.Path), registry.ModulePins(mods, device))
	}
	if len(failed) > 0 {
		return fmt.Errorf("lock --modules: no module pinned for %s (compute %d, %s), nothing written:\n  %s",
			device.Name, device.ComputeCapability, source, strings.Join(failed, "\n  "))
	}
	if n == 0 {
		fmt.Fprintln(stderr, "attnplug lock: --modules: no plugin hands device code")
	}
	return nil
}

// Lock status of a plugin in the listing of attnplug plugins.
const (
	lockPinned    = "pinned"     // in the lock file, same hash
	lockNotPinned = "not pinned" // no lock file, or the binary is not in it
	lockMismatch  = "mismatch"   // in the lock file with another hash
	lockMissing   = "missing"    // in the lock file, not found
)

// LockStatus says how the plugin p of a listing stands with lock (nil:
// no lock file in use): pinned, not pinned, mismatch or missing.
func LockStatus(lock *registry.Lock, p registry.PluginInfo) string {
	if lock == nil {
		return lockNotPinned
	}
	e, ok := lock.Entry(filepath.Base(p.Path))
	if !ok {
		return lockNotPinned
	}
	if p.Path == filepath.Base(p.Path) {
		// The registry lists a pinned binary it did not find by its file
		// name alone.
		return lockMissing
	}
	sum := p.SHA256
	if sum == "" {
		// Refused or broken before it was described: hash the file.
		s, err := registry.FileSHA256(p.Path)
		if err != nil {
			return lockMissing
		}
		sum = s
	}
	if sum != e.SHA256 {
		return lockMismatch
	}
	return lockPinned
}

// FirstLine is the first line of a possibly multi-line message.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
