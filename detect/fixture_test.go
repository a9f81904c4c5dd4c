package detect

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// colonEscape is how fixture names spell ':' (Go module paths cannot hold
// one); see testdata/mkfixtures.sh.
const colonEscape = "%3A"

// copyFixture copies testdata/<name> into a temporary directory, turning
// colonEscape back into ':' in names and symlink targets, and returns the
// new root.
func copyFixture(t testing.TB, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, strings.ReplaceAll(rel, colonEscape, ":"))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(strings.ReplaceAll(target, colonEscape, ":"), out)
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
	if err != nil {
		t.Fatalf("copy fixture %s: %v", name, err)
	}
	return dst
}

// fixtureNames lists the fixture trees.
func fixtureNames() []string {
	return []string{
		"h100", "h200", "b200", "a100", "rtx4090", "container_no_driver", "vfio", "nvidia_plus_igpu",
		"mi300x", "mi355x", "ascend910b", "intel_max1550", "spr_amx", "cpu_noamx", "arm64",
	}
}

// testEnv is a fixture env: plain opens, no libcuda, no arch_prctl.
func testEnv(root string) *env {
	return &env{root: root, open: openNode}
}

// detectFixture runs detection on a copy of a fixture.
func detectFixture(t testing.TB, name string, opts Options) *Report {
	t.Helper()
	root := copyFixture(t, name)
	opts.Root = root
	r, err := detect(context.Background(), opts, testEnv(root))
	if err != nil {
		t.Fatalf("detect %s: %v", name, err)
	}
	return r
}

// tree builds a small root from path -> content; content "->target" makes
// a symlink.
func tree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(c, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
