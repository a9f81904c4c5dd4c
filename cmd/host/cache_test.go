package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
