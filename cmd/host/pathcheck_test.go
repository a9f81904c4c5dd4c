package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// pathCheckReq is the two requests each layout of TestPluginPathChecksFollowLinks is asked.
const pathCheckReq = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n" + `{"backend":"fa4","forward_mode":"DECODE"}` + "\n"

// mkdirMode makes a directory with mode (chmod: the umask does not apply).
func mkdirMode(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// moveFa3 moves the fa3 binary of tree to dir and links it back.
func moveFa3(t *testing.T, tree *testbin.Bins, dir string) string {
	t.Helper()
	moved := filepath.Join(dir, "attnplug-backend-fa3")
	if err := os.Rename(tree.Plugin("fa3"), moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, tree.Plugin("fa3")); err != nil {
		t.Fatal(err)
	}
	return moved
}

// TestPluginPathChecksFollowLinks sets up plugin binaries and directories
// that another user could replace through a directory above them or
// through a symbolic link, and checks that each is refused, that the
// answer (not only the log) says why, and that the safe layouts and
// --insecure-plugin-dir are accepted.
func TestPluginPathChecksFollowLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs the host on seven copies of the plugin tree (make test runs it)")
	}
	for _, tc := range []struct {
		name string
		// setup returns the plugin directory to use and the text the answer
		// must give, empty when the layout is safe.
		setup func(t *testing.T, base string, tree *testbin.Bins) (dir, want string)
	}{
		{"link to a file in a world-writable directory", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
			moveFa3(t, tree, open)
			return tree.PluginDir, "directory " + open + " on its path is world-writable (mode drwxrwxrwx)"
		}},
		{"link to a link in a world-writable directory", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
			safe := mkdirMode(t, filepath.Join(base, "safe"), 0o755)
			moved := moveFa3(t, tree, safe)
			hop := filepath.Join(open, "hop")
			if err := os.Symlink(moved, hop); err != nil {
				t.Fatal(err)
			}
			os.Remove(tree.Plugin("fa3"))
			if err := os.Symlink(hop, tree.Plugin("fa3")); err != nil {
				t.Fatal(err)
			}
			return tree.PluginDir, "directory " + open + " on its path is world-writable"
		}},
		{"plugin directory under a world-writable parent", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			mkdirMode(t, tree.Dir, 0o777)
			return tree.PluginDir, "directory " + tree.Dir + " on its path is world-writable"
		}},
		{"plugin directory reached through a link in a world-writable directory", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
			link := filepath.Join(open, "plugins")
			if err := os.Symlink(tree.PluginDir, link); err != nil {
				t.Fatal(err)
			}
			return link, "directory " + open + " on its path is world-writable"
		}},
		{"directory on the path owned by another user", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			if err := os.Chown(tree.Dir, os.Getuid()+4242, -1); err != nil {
				t.Skipf("cannot chown: %v", err)
			}
			return tree.PluginDir, "directory " + tree.Dir + " on its path is owned by uid"
		}},
		{"link to a file in a sticky world-writable directory", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			moveFa3(t, tree, mkdirMode(t, filepath.Join(base, "sticky"), 0o777|os.ModeSticky))
			return tree.PluginDir, ""
		}},
		{"relative link to a file in a safe directory", func(t *testing.T, base string, tree *testbin.Bins) (string, string) {
			moved := moveFa3(t, tree, mkdirMode(t, filepath.Join(base, "safe"), 0o755))
			os.Remove(tree.Plugin("fa3"))
			rel, err := filepath.Rel(tree.PluginDir, moved)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(rel, tree.Plugin("fa3")); err != nil {
				t.Fatal(err)
			}
			return tree.PluginDir, ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkPluginPath(t, tc.setup) })
	}
}

// checkPluginPath runs dispatch on a copy of the plugin tree laid out by setup
// and checks that a safe layout is served and an unsafe one refused, with
// the reason, unless --insecure-plugin-dir is given.
func checkPluginPath(t *testing.T, setup func(t *testing.T, base string, tree *testbin.Bins) (dir, want string)) {
	t.Helper()
	base := t.TempDir()
	tree, err := bins.CopyTree(filepath.Join(base, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	dir, want := setup(t, base, tree)
	res := host(t, tree, pathCheckReq, "dispatch", "--plugin-dir", dir)
	got := parseAnswers(t, res.stdout)
	if len(got) != 2 {
		t.Fatalf("answers: %s %s", res.stdout, res.stderr)
	}
	for _, a := range got {
		switch {
		case want == "" && (a.Plugin != "fa3" || a.Fallback != ""):
			t.Errorf("a safe layout is refused: %+v\n%s", a, res.stderr)
		case want != "" && (!strings.HasPrefix(a.Fallback, wantReason(a.Handler, a.Fallback)) || !strings.Contains(a.Fallback, want) || !strings.Contains(a.Fallback, "--insecure-plugin-dir")):
			t.Errorf("answer %+v; want a %s fallback that says %q", a, wantReason(a.Handler, a.Fallback), want)
		}
	}
	if want == "" {
		return
	}
	res = host(t, tree, pathCheckReq, "dispatch", "--plugin-dir", dir, "--insecure-plugin-dir")
	for _, a := range parseAnswers(t, res.stdout) {
		if a.Plugin != "fa3" || a.Fallback != "" {
			t.Errorf("with --insecure-plugin-dir: %+v", a)
		}
	}
}

// wantReason is the reason of a fallback whose refusal says fallback: a
// refused binary named for the name (fa3's) is broken; a refused
// directory, or a binary not known to serve the name, leaves it missing.
func wantReason(_, fallback string) string {
	if strings.Contains(fallback, `serves "fa3"`) && strings.Contains(fallback, "plugin binary") {
		return "plugin_broken"
	}
	return "plugin_missing"
}
