package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// bins is the real host and plugins, built once for the package's tests.
var bins *testbin.Bins

func TestMain(m *testing.M) {
	if addr := os.Getenv(envReloadAs); addr != "" {
		os.Exit(reloadMain(addr)) // a re-run of the test binary as another user
	}
	testbin.Main(m, true, func(b *testbin.Bins) error {
		bins = b
		warmCache = filepath.Join(filepath.Dir(b.Dir), "cache")
		return describeAll(b.Host, b.PluginDir, warmCache)
	})
}
