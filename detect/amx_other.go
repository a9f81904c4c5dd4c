//go:build !(linux && amd64)

package detect

import (
	"errors"
	"fmt"
	"runtime"
)

// xcompSupported reports that AMX is not available off linux/amd64.
func xcompSupported() (uint64, error) {
	return 0, fmt.Errorf("arch_prctl on %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}
