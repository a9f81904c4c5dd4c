package registry_test

import (
	"testing"

	"github.com/attnplug/attnplug/internal/testbin"
)

// bins are the real plugin binaries, built once for the package's tests.
var bins *testbin.Bins

func TestMain(m *testing.M) {
	testbin.Main(m, false, func(b *testbin.Bins) error { bins = b; return nil })
}
