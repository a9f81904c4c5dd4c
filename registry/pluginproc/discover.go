package pluginproc

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
func discover(dirs []string, insecure bool) (found []candidate, broken []Info) {
	seen := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !os.IsNotExist(err) {
				broken = append(broken, Info{Path: dir, Status: StatusBroken, Reason: fmt.Sprintf("plugin directory: %v", err)})
			}
			continue
		}
		if !insecure {
			if err := checkPath("plugin directory", dir); err != nil {
				broken = append(broken, Info{Path: dir, Status: StatusBroken, Reason: err.Error()})
				continue
			}
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, name := range names {
			family, staged, ok := wire.FamilyOf(name)
			if !ok || staged {
				continue // a binary being put in place is not a plugin yet
			}
			path := filepath.Join(dir, name)
			info := Info{Name: family, Path: path, Status: StatusBroken}
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
				err = checkPath("plugin binary", path)
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

// Why a plugin directory cannot be read as one (DirProblem).
const (
	DirMissing  = "dir_missing"  // gone, unreadable, or not a directory
	DirInsecure = "dir_insecure" // others can write it or a directory above it
	DirEmpty    = "dir_empty"    // it holds no plugin binary
)

// DirProblem says why dir cannot be read as a plugin directory now, and
// which of DirMissing, DirInsecure (unless insecure, the
// --insecure-plugin-dir of discovery) or DirEmpty it is; nil when it can
// (a directory that holds only broken binaries can: they are listed).
func DirProblem(dir string, insecure bool) (kind string, err error) {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return DirMissing, err
	case !st.IsDir():
		return DirMissing, fmt.Errorf("not a directory (%s)", st.Mode().Type())
	}
	if !insecure {
		if err := checkPath("plugin directory", dir); err != nil {
			return DirInsecure, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return DirMissing, err
	}
	for _, e := range entries {
		if _, staged, ok := wire.FamilyOf(e.Name()); ok && !staged {
			return "", nil
		}
	}
	return DirEmpty, fmt.Errorf("it holds no plugin binary (%s<name>)", wire.BinaryPrefix)
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

// checkPath refuses a plugin file or directory (what, at path) that a user
// other than the caller or root could replace: it walks the path from the
// root one component at a time, following every symbolic link, as the
// kernel does, and checks every directory it passes through and the file
// (or directory) it ends at. Each must be owned by root or the caller, and
// neither world-writable nor group-writable unless owned by the caller; a
// directory it passes through may be world- or group-writable when sticky
// (as /tmp), since then no one else can replace what the caller owns in
// it. Whoever can write a plugin binary, or rename one of the directories
// above it, runs code in the host. ssh checks authorized_keys the same way.
func checkPath(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	cur := "/"
	if err := checkOwnerMode(what, path, cur, false); err != nil {
		return err
	}
	todo := components(abs)
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // checked on the way down
			continue
		}
		next := filepath.Join(cur, c)
		st, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return fmt.Errorf("%s %s: more than %d symbolic links", what, path, maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("%s %s: %w", what, path, err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(components(target), todo...)
			continue
		}
		last := len(todo) == 0
		if !last && !st.IsDir() {
			return fmt.Errorf("%s %s: %s is not a directory", what, path, next)
		}
		if err := checkOwnerMode(what, path, next, last); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// maxLinks bounds the symbolic links one path may pass through, as the
// kernel's ELOOP does.
const maxLinks = 40

func components(path string) []string { return strings.Split(path, "/") }

// checkOwnerMode checks one step of checkPath: at, which is the end of the
// path when last, else a directory it passes through.
func checkOwnerMode(what, path, at string, last bool) error {
	st, err := os.Stat(at)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	subject := fmt.Sprintf("%s %s", what, path)
	if !last {
		subject = fmt.Sprintf("%s %s: directory %s on its path", what, path, at)
	} else if at != filepath.Clean(path) {
		subject = fmt.Sprintf("%s %s: its target %s", what, path, at)
	}
	mode := st.Mode()
	uid, me := -1, os.Getuid()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		uid = int(sys.Uid)
	}
	sticky := !last && mode&os.ModeSticky != 0
	const fix = "; fix it, or pass --insecure-plugin-dir"
	switch {
	case mode.Perm()&0o002 != 0 && !sticky:
		return fmt.Errorf("%s is world-writable (mode %s): refused; fix it with chmod o-w%s", subject, modeString(mode, last), orSticky(last))
	case mode.Perm()&0o020 != 0 && !sticky && uid != me:
		return fmt.Errorf("%s is group-writable and owned by uid %d, not by you (uid %d): refused; fix it with chmod g-w%s", subject, uid, me, orSticky(last))
	case uid != 0 && uid != me:
		return fmt.Errorf("%s is owned by uid %d, neither root nor you (uid %d): refused%s", subject, uid, me, fix)
	}
	return nil
}

func orSticky(last bool) string {
	if last {
		return ", or pass --insecure-plugin-dir"
	}
	return " or chmod +t, or pass --insecure-plugin-dir"
}

// modeString is the permission bits, with the sticky bit for a directory
// on the path.
func modeString(m os.FileMode, last bool) string {
	if last {
		return m.Perm().String()
	}
	return (m & (os.ModePerm | os.ModeSticky | os.ModeDir)).String()
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
