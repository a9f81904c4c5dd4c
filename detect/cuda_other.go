//go:build !(linux && (amd64 || arm64))

package detect

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// queryCUDA reports that libcuda is not queried on this platform.
func queryCUDA(context.Context) ([]cudaDevice, error) {
	return nil, fmt.Errorf("libcuda on %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}
