package pluginproc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	goplugin "github.com/hashicorp/go-plugin"
)

// LockFileName is the lock file's name in a plugin directory.
const LockFileName = "attnplug.lock"

// lockFormat is the version of the lock file format.
const lockFormat = 1

// Lock pins plugin binaries by SHA-256: attnplug.lock, written by
// attnplug lock. It is plain JSON, one entry per plugin, sorted by file
// name, so that it reads and diffs well.
type Lock struct {
	// Format is the file format version, 1.
	Format int `json:"format"`
	// Plugins are the pinned binaries.
	Plugins []LockEntry `json:"plugins"`
	// Path is where the lock was read from.
	Path string `json:"-"`
}

// LockEntry pins one plugin binary.
type LockEntry struct {
	// File is the binary's file name, such as attnplug-backend-fa3.
	File string `json:"file"`
	// SHA256 is the hex SHA-256 of the binary.
	SHA256 string `json:"sha256"`
	// Version is the plugin's version when it was pinned.
	Version string `json:"version"`
	// Names are the backend names it served.
	Names []string `json:"names"`
	// Modules pin the device code the plugin hands the host, by the
	// SHA-256 of each image (attnplug lock --modules). When the entry has
	// any, an image whose hash is not among them is refused. Lock files
	// written before device code have none, and pin no modules.
	Modules []ModulePin `json:"modules,omitempty"`
}

// ModulePin pins one kernel module image of a plugin.
type ModulePin struct {
	// Name is the module's name within the plugin.
	Name string `json:"name"`
	// Arch and Format are the image's target and format, for people: the
	// hash alone decides.
	Arch   string `json:"arch"`
	Format string `json:"format"`
	// SHA256 is the hex SHA-256 of the image.
	SHA256 string `json:"sha256"`
	// Device is the device the image was built for, for people.
	Device string `json:"device,omitempty"`
}

// ModulePins returns the pins of mods, built for dev.
func ModulePins(mods []core.KernelModule, dev core.DeviceInfo) []ModulePin {
	device := dev.Name
	if device == "" {
		device = fmt.Sprintf("compute %d", dev.ComputeCapability)
	}
	out := make([]ModulePin, len(mods))
	for i, m := range mods {
		out[i] = ModulePin{Name: m.Name, Arch: m.Arch, Format: string(m.Format), SHA256: m.SHA256, Device: device}
	}
	return out
}

// AddModules adds pins to the entry of the binary called file, skipping
// hashes it pins already; it reports whether the lock has that entry.
func (l *Lock) AddModules(file string, pins []ModulePin) bool {
	for i := range l.Plugins {
		e := &l.Plugins[i]
		if e.File != file {
			continue
		}
		for _, p := range pins {
			if !slices.ContainsFunc(e.Modules, func(q ModulePin) bool { return q.SHA256 == p.SHA256 }) {
				e.Modules = append(e.Modules, p)
			}
		}
		sort.SliceStable(e.Modules, func(a, b int) bool { return e.Modules[a].Name < e.Modules[b].Name })
		return true
	}
	return false
}

// KeepModules carries the module pins of old over to the entries of l
// whose binary has the same file name and SHA-256: pinning the binaries
// again keeps the modules pinned for other devices. It returns the files
// whose pins were dropped because their binary changed.
func (l *Lock) KeepModules(old *Lock) (dropped []string) {
	if old == nil {
		return nil
	}
	for _, oe := range old.Plugins {
		if len(oe.Modules) == 0 {
			continue
		}
		e, ok := l.Entry(oe.File)
		switch {
		case ok && e.SHA256 == oe.SHA256:
			l.AddModules(oe.File, oe.Modules)
		case ok:
			dropped = append(dropped, oe.File)
		}
	}
	return dropped
}

// verifyModules checks the images of mods, handed by the binary called
// file, against the module pins of its entry: with pins, every image's
// hash must be among them. An entry without pins, or no entry, pins
// nothing.
func (l *Lock) VerifyModules(file string, mods []core.KernelModule) error {
	e, ok := l.Entry(file)
	if !ok || len(e.Modules) == 0 {
		return nil
	}
	for _, m := range mods {
		if slices.ContainsFunc(e.Modules, func(p ModulePin) bool { return p.SHA256 == m.SHA256 }) {
			continue
		}
		var pinned []string
		for _, p := range e.Modules {
			if p.Name == m.Name {
				pinned = append(pinned, fmt.Sprintf("%s (%s for %s)", p.SHA256, p.Format, p.Arch))
			}
		}
		what := "pins module " + m.Name + " as sha256 " + strings.Join(pinned, " or ")
		if len(pinned) == 0 {
			what = fmt.Sprintf("pins no module %s for it (it pins %d others)", m.Name, len(e.Modules))
		}
		return fmt.Errorf("%w: %s: kernel module %s (%s for %s) has sha256 %s, but %s %s; "+
			"if this device code is trusted, pin it with attnplug lock --modules on a host with this device (or --arch %s)",
			ErrNotPinned, file, m.Name, m.Format, m.Arch, m.SHA256, l.Path, what, archFlag(m.Arch))
	}
	return nil
}

// archFlag is the --arch value of a module's target, such as sm_90 for
// sm_90a or compute_90a.
func archFlag(arch string) string {
	a := strings.TrimSuffix(arch, "a")
	if n, ok := strings.CutPrefix(a, "compute_"); ok {
		return "sm_" + n
	}
	return a
}

// ReadLock reads the lock file at path.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	var l Lock
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	if l.Format != lockFormat {
		return nil, fmt.Errorf("lock file %s: format %d, want %d", path, l.Format, lockFormat)
	}
	for i, e := range l.Plugins {
		family, ok := strings.CutPrefix(e.File, wire.BinaryPrefix)
		if !ok || !wire.ValidFamily(family) {
			return nil, fmt.Errorf("lock file %s: entry %d: file %q is not a plugin binary's name (want %s<name>)", path, i+1, e.File, wire.BinaryPrefix)
		}
		if !isSHA256(e.SHA256) {
			return nil, fmt.Errorf("lock file %s: entry %d (%s): sha256 %q is not 64 hex digits", path, i+1, e.File, e.SHA256)
		}
		for j, m := range e.Modules {
			if m.Name == "" || !isSHA256(m.SHA256) {
				return nil, fmt.Errorf("lock file %s: entry %d (%s): module %d: want a name and a sha256 of 64 hex digits, got %q and %q", path, i+1, e.File, j+1, m.Name, m.SHA256)
			}
		}
	}
	l.Path = path
	return &l, nil
}

func isSHA256(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == sha256.Size*2
}

// LockOf returns the lock of the plugins in infos that are usable (the
// listing of Registry.Plugins), sorted by file name.
func LockOf(infos []Info) *Lock {
	l := &Lock{Format: lockFormat}
	for _, p := range infos {
		if p.SHA256 == "" {
			continue
		}
		names := slices.Clone(p.Names)
		sort.Strings(names)
		l.Plugins = append(l.Plugins, LockEntry{File: filepath.Base(p.Path), SHA256: p.SHA256, Version: p.Version, Names: names})
	}
	sort.Slice(l.Plugins, func(i, j int) bool { return l.Plugins[i].File < l.Plugins[j].File })
	return l
}

// Write writes the lock to path, replacing it atomically.
func (l *Lock) Write(path string) error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		// Name the file asked for, not the temporary one beside it.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lock file %s: directory %s: %w", path, filepath.Dir(path), err)
		}
		return fmt.Errorf("lock file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lock file: %w", err)
	}
	return nil
}

// Entry returns the entry of the binary called file.
func (l *Lock) Entry(file string) (LockEntry, bool) {
	for _, e := range l.Plugins {
		if e.File == file {
			return e, true
		}
	}
	return LockEntry{}, false
}

// ErrNotPinned marks a plugin binary refused by the lock file.
var ErrNotPinned = errors.New("refused by the lock file")

// verify checks the binary at path, whose SHA-256 is sum, against the lock.
func (l *Lock) verify(path, sum string) error {
	e, ok := l.Entry(filepath.Base(path))
	if !ok {
		return fmt.Errorf("%w: %s is not pinned in %s (run attnplug lock --plugin-dir %s to pin it)", ErrNotPinned, path, l.Path, filepath.Dir(path))
	}
	if e.SHA256 != sum {
		return fmt.Errorf("%w: %s: sha256 %s, but %s pins %s (version %s); if this build is the one to run, pin it with attnplug lock --plugin-dir %s, else put the pinned build back",
			ErrNotPinned, path, sum, l.Path, e.SHA256, e.Version, filepath.Dir(path))
	}
	return nil
}

// missing lists the pinned binaries that were not found.
func (l *Lock) missing(found []candidate) []Info {
	var out []Info
	for _, e := range l.Plugins {
		seen := false
		for _, c := range found {
			seen = seen || filepath.Base(c.path) == e.File
		}
		if !seen {
			out = append(out, Info{
				Name: strings.TrimPrefix(e.File, wire.BinaryPrefix), Path: e.File, Version: e.Version, SHA256: e.SHA256, Names: e.Names,
				Status: StatusBroken, Reason: fmt.Sprintf("pinned in %s but not found", l.Path),
			})
		}
	}
	return out
}

// secureConfig has go-plugin check the binary's hash at every start.
func secureConfig(sum string) (*goplugin.SecureConfig, error) {
	want, err := hex.DecodeString(sum)
	if err != nil {
		return nil, err
	}
	return &goplugin.SecureConfig{Checksum: want, Hash: sha256.New()}, nil
}
