package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// bins is the real host and plugins, built once for the package's tests.
var bins *testbin.Bins

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "attnplug-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = testbin.Build(dir, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
