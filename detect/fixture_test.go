package detect

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/detect/detecttest"
)

// copyFixture copies testdata/<name> into a temporary directory, turning
// "%3A" back into ':' in names and symlink targets, and returns the new
// root.
func copyFixture(t testing.TB, name string) string {
	t.Helper()
	return detecttest.Fixture(t, name)
}

// fixtureNames lists the fixture trees.
func fixtureNames() []string { return detecttest.Names() }

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
