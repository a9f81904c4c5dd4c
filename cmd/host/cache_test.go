package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// warmCache holds the descriptions of the package's plugins (bins), made
// once by TestMain with attnplug plugins on an empty cache: describing a
// plugin starts it, which was two thirds of the plugin processes the tests
// started, and no test here is about the first run on a machine (the
// registry's tests are). Plugins a test adds (the fault plugin, scripts)
// are described by its own run, as before.
var warmCache string

// describeAll fills dir, a description cache, with the descriptions of
// the plugins in pluginDir, run by host.
func describeAll(host, pluginDir, dir string) error {
	cmd := exec.Command(host, "plugins", "--plugin-dir", pluginDir)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+dir, "ATTNPLUG_PLUGIN_DIR=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("describing the plugins for the tests: %v\n%s", err, out)
	}
	return nil
}

// warmCacheDir returns a new description cache for one host run, holding the
// descriptions of the package's plugins: a host finds there what they
// serve without starting them, as on a machine where attnplug ran before.
func warmCacheDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(warmCache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "desc-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(warmCache, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCacheDirOfOthersIsNotUsed: a description cache directory that other
// users may write, or (as root) that another user owns, is not used: a
// warning names it, and nothing is read from it or written to it.
func TestCacheDirOfOthersIsNotUsed(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	dirs := map[string]string{open: "may write it"}
	if os.Getuid() == 0 {
		cred := testbin.Nobody(t)
		theirs := filepath.Join(t.TempDir(), "theirs")
		os.Mkdir(theirs, 0o755)
		if err := os.Chown(theirs, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		dirs[theirs] = fmt.Sprintf("owned by uid %d", cred.Uid)
	}
	for dir, why := range dirs {
		r := hostEnv(t, bins, []string{"ATTNPLUG_CACHE_DIR=" + dir}, "", "plugins", "--plugin-dir", bins.PluginDir)
		if r.code != 0 || !strings.Contains(r.stdout, "fa3") {
			t.Fatalf("plugins with the cache in %s: exit %d\n%s\n%s", dir, r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "description cache not used") || !strings.Contains(r.stderr, dir) || !strings.Contains(r.stderr, why) {
			t.Errorf("no warning naming %s and saying %q:\n%s", dir, why, r.stderr)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s was written to: %d entries", dir, len(left))
		}
	}

	// A directory that is not there is made, for this user alone.
	made := filepath.Join(t.TempDir(), "new", "cache")
	if r := hostEnv(t, bins, []string{"ATTNPLUG_CACHE_DIR=" + made}, "", "plugins", "--plugin-dir", bins.PluginDir); r.code != 0 {
		t.Fatalf("plugins: exit %d\n%s", r.code, r.stderr)
	}
	if st, err := os.Stat(made); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want a directory of mode 0700", made, st, err)
	} else if left, _ := os.ReadDir(made); len(left) == 0 {
		t.Errorf("%s holds no description", made)
	}
}
