package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/attnplug/attnplug/registry"
)

// runLock describes every plugin found and pins the usable ones in the
// lock file: --lock, else attnplug.lock in the first plugin directory.
// Plugins that cannot be described are reported and left out.
func runLock(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("lock", flag.ContinueOnError)
	var h hostFlags
	h.register(fs, "platform", "strict")
	if err := parseFlags(fs, e, args, "attnplug lock [--plugin-dir DIR] [--lock FILE]"); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	logger, err := h.logger(e)
	if err != nil {
		return err
	}
	dirs, err := h.dirs()
	if err != nil {
		return err
	}
	path, _ := h.lockPath(dirs)
	if path == "" {
		return &usageError{"lock: no plugin directory to write the lock file in (give --plugin-dir or --lock)"}
	}
	// Pinning describes the binaries as they are now, whatever an older
	// lock file says.
	h.noLock = true
	reg, err := h.openRegistry(ctx, logger)
	if err != nil {
		return err
	}
	infos := reg.Plugins()
	reg.Close()
	lock := registry.LockOf(infos)
	for _, p := range infos {
		if p.SHA256 == "" {
			fmt.Fprintf(e.stderr, "attnplug lock: not pinned: %s (%s): %s\n", p.Name, p.Status, firstLine(p.Reason))
		}
	}
	if err := lock.Write(path); err != nil {
		return err
	}
	for _, p := range lock.Plugins {
		fmt.Fprintf(e.stdout, "pinned %s  sha256 %s  version %s  names %s\n", p.File, p.SHA256, p.Version, strings.Join(p.Names, ","))
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d plugins pinned\n", path, len(lock.Plugins))
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
