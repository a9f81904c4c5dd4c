package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/attnplug/attnplug/wire"
)

// candidate is a file that looks like a plugin binary.
type candidate struct {
	path   string
	family string
}

// discover lists the plugin binaries of dirs, in order; a family found in
// an earlier directory shadows the same family in a later one. Files that
// look like plugins but cannot be one are returned as broken entries.
func discover(dirs []string, insecure bool) (found []candidate, broken []PluginInfo) {
	seen := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !os.IsNotExist(err) {
				broken = append(broken, PluginInfo{Path: dir, Status: StatusBroken, Reason: fmt.Sprintf("plugin directory: %v", err)})
			}
			continue
		}
		if !insecure {
			if err := checkWritable("plugin directory", dir); err != nil {
				broken = append(broken, PluginInfo{Path: dir, Status: StatusBroken, Reason: err.Error()})
				continue
			}
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, name := range names {
			family, ok := strings.CutPrefix(name, wire.BinaryPrefix)
			if !ok {
				continue
			}
			path := filepath.Join(dir, name)
			info := PluginInfo{Name: family, Path: path, Status: StatusBroken}
			if !wire.ValidFamily(family) {
				info.Reason = fmt.Sprintf("file name %q: want %s<name> with letters, digits, '_' or '-'", name, wire.BinaryPrefix)
				broken = append(broken, info)
				continue
			}
			if first, dup := seen[family]; dup {
				info.Status = StatusShadowed
				info.Reason = fmt.Sprintf("shadowed by %s, found first", first)
				broken = append(broken, info)
				continue
			}
			err := checkExecutable(path)
			if err == nil && !insecure {
				err = checkWritable("plugin binary", path)
			}
			if err != nil {
				info.Reason = err.Error()
				broken = append(broken, info)
				continue
			}
			seen[family] = path
			found = append(found, candidate{path: path, family: family})
		}
	}
	return found, broken
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	if st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not executable (mode %s)", st.Mode().Perm())
	}
	return nil
}

// checkWritable refuses a file or directory that users other than the
// caller (and root) can write: world-writable, or group-writable and owned
// by someone else. Whoever can write a plugin binary runs code in the host.
func checkWritable(what, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	mode := st.Mode().Perm()
	if mode&0o002 != 0 {
		return fmt.Errorf("%s %s is world-writable (mode %s): refused; fix it with chmod o-w, or pass --insecure-plugin-dir", what, path, mode)
	}
	if mode&0o020 != 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
			return fmt.Errorf("%s %s is group-writable and owned by uid %d, not by you (uid %d): refused; fix it with chmod g-w, or pass --insecure-plugin-dir", what, path, sys.Uid, os.Getuid())
		}
	}
	return nil
}

// SplitDirs splits a ':'-separated list of directories, as in
// ATTNPLUG_PLUGIN_DIR, dropping empty entries.
func SplitDirs(list string) []string {
	var out []string
	for _, d := range filepath.SplitList(list) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}
