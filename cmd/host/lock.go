package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/attnplug/attnplug/inventory"
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
			fmt.Fprintf(e.stderr, "attnplug lock: not pinned: %s (%s): %s\n", p.Name, p.Status, inventory.FirstLine(p.Reason))
		}
	}
	for _, file := range lock.KeepModules(old) {
		fmt.Fprintf(e.stderr, "attnplug lock: %s changed: its module pins are dropped (attnplug lock --modules pins its new ones)\n", file)
	}
	if *modules {
		if err := inventory.PinModules(ctx, e.stderr, reg, infos, lock, dev.device); err != nil {
			return err
		}
	}
	if err := lock.Write(path); err != nil {
		return err
	}
	inventory.WriteLock(e.stdout, lock, path)
	return nil
}
