package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/attnplug/attnplug/registry"
)

// runLock describes every plugin found and pins the usable ones in the
// lock file: --lock, else attnplug.lock in the first plugin directory.
// Plugins that cannot be described are reported and left out. The module
// pins of the lock file it replaces are kept for binaries that did not
// change; with --modules, the device code that each plugin hands for the
// device of --arch (default: this machine's GPU) is pinned too, and a
// plugin that has none to pin fails the command before anything is
// written.
func runLock(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("lock", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "platform", "strict")
	modules := fs.Bool("modules", false, "also pin, by SHA-256, the kernel modules (device code) the plugins hand for the device of --arch")
	var dev deviceFlags
	dev.register(fs)
	logger, err := h.parse(fs, e, args, "attnplug lock [--plugin-dir DIR] [--lock FILE] [--modules [--arch sm_XY]]", "")
	if err != nil {
		return err
	}
	if dev.arch != "" && !*modules {
		return &usageError{"lock: --arch needs --modules"}
	}
	dirs, err := h.dirs()
	if err != nil {
		return err
	}
	path, _ := h.lockPath(dirs)
	if path == "" {
		return &usageError{"lock: no plugin directory to write the lock file in (give --plugin-dir or --lock)"}
	}
	var old *registry.Lock
	if _, err := os.Stat(path); err == nil {
		if old, err = registry.ReadLock(path); err != nil {
			fmt.Fprintf(e.stderr, "attnplug lock: the lock file it replaces is unreadable, its module pins are lost: %v\n", err)
		}
	}
	// Pinning describes the binaries as they are now, whatever an older
	// lock file says.
	cfg, err := h.configWithoutLock(ctx, logger)
	if err != nil {
		return err
	}
	reg, err := registry.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer reg.Close()
	infos := reg.Plugins()
	lock := registry.LockOf(infos)
	for _, p := range infos {
		if p.SHA256 == "" {
			fmt.Fprintf(e.stderr, "attnplug lock: not pinned: %s (%s): %s\n", p.Name, p.Status, firstLine(p.Reason))
		}
	}
	for _, file := range lock.KeepModules(old) {
		fmt.Fprintf(e.stderr, "attnplug lock: %s changed: its module pins are dropped (attnplug lock --modules pins its new ones)\n", file)
	}
	if *modules {
		if err := pinModules(ctx, e, reg, infos, lock, &dev); err != nil {
			return err
		}
	}
	if err := lock.Write(path); err != nil {
		return err
	}
	for _, p := range lock.Plugins {
		fmt.Fprintf(e.stdout, "pinned %s  sha256 %s  version %s  names %s\n", p.File, p.SHA256, p.Version, strings.Join(p.Names, ","))
		for _, m := range p.Modules {
			fmt.Fprintf(e.stdout, "  module %s  sha256 %s  %s for %s (%s)\n", m.Name, m.SHA256, m.Format, m.Arch, m.Device)
		}
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d plugins pinned\n", path, len(lock.Plugins))
	return nil
}

// pinModules adds to lock the modules that every plugin of infos with
// device code hands for the device of dev. It fails, naming them, when
// some plugin has none to pin.
func pinModules(ctx context.Context, e *env, reg *registry.Registry, infos []registry.PluginInfo, lock *registry.Lock, dev *deviceFlags) error {
	device, source, err := dev.device()
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
		fmt.Fprintln(e.stderr, "attnplug lock: --modules: no plugin hands device code")
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

// lockStatus says how the plugin p of a listing stands with lock.
func lockStatus(lock *registry.Lock, p registry.PluginInfo) string {
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

// firstLine is the first line of a possibly multi-line message.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
