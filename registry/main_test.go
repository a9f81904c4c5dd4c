package registry_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// bins are the real plugin binaries, built once for the package's tests.
var bins *testbin.Bins

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "attnplug-registry-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = testbin.Build(dir, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
