package registry

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
		if _, err := hex.DecodeString(e.SHA256); err != nil || len(e.SHA256) != sha256.Size*2 {
			return nil, fmt.Errorf("lock file %s: entry %d (%s): sha256 %q is not 64 hex digits", path, i+1, e.File, e.SHA256)
		}
	}
	l.Path = path
	return &l, nil
}

// LockOf returns the lock of the plugins in infos that are usable (the
// listing of Registry.Plugins), sorted by file name.
func LockOf(infos []PluginInfo) *Lock {
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
		return fmt.Errorf("lock file: %w", err)
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
		return fmt.Errorf("%w: %s is not pinned in %s (run attnplug lock to pin it)", ErrNotPinned, path, l.Path)
	}
	if e.SHA256 != sum {
		return fmt.Errorf("%w: %s: sha256 %s, but %s pins %s (version %s)", ErrNotPinned, path, sum, l.Path, e.SHA256, e.Version)
	}
	return nil
}

// missing lists the pinned binaries that were not found.
func (l *Lock) missing(found []candidate) []PluginInfo {
	var out []PluginInfo
	for _, e := range l.Plugins {
		seen := false
		for _, c := range found {
			seen = seen || filepath.Base(c.path) == e.File
		}
		if !seen {
			out = append(out, PluginInfo{
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
