package kernelrun

import (
	"context"
	"testing"
	"time"

	"github.com/attnplug/attnplug/internal/testbin"
)

// bins is the real plugins, built once for the package's tests.
var bins *testbin.Bins

func TestMain(m *testing.M) {
	testbin.Main(m, false, func(b *testbin.Bins) error { bins = b; return nil })
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
