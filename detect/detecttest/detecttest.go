package detecttest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ColonEscape is how fixture names spell ':'.
const ColonEscape = "%3A"

// Names lists the fixture trees.
func Names() []string {
	return []string{
		"h100", "h200", "b200", "a100", "rtx4090", "container_no_driver", "vfio", "nvidia_plus_igpu",
		"mi300x", "mi355x", "ascend910b", "intel_max1550", "spr_amx", "cpu_noamx", "arm64",
		"acme", "acme_no_node",
	}
}

// Dir returns the directory holding the fixture trees, detect/testdata,
// found from this file's location: it works where the module's source is,
// as under go test.
func Dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("detecttest: cannot locate the source")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "testdata")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("detecttest: fixtures: %w", err)
	}
	return dir, nil
}

// Materialize copies the fixture tree src into dst (created if needed),
// turning ColonEscape back into ':' in names and symlink targets.
func Materialize(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, strings.ReplaceAll(rel, ColonEscape, ":"))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(strings.ReplaceAll(target, ColonEscape, ":"), out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
}

// Fixture copies the named fixture tree into a temporary directory of t
// and returns it, ready to pass as detect.Options.Root or --root.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Materialize(filepath.Join(dir, name), dst); err != nil {
		t.Fatalf("copy fixture %s: %v", name, err)
	}
	return dst
}
