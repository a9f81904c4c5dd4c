//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// loadDriver reports that libcuda is only opened on linux/amd64 and linux/arm64.
func loadDriver() (*driver, error) {
	return nil, fmt.Errorf("libcuda on %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}

// loadNVRTCLib reports that NVRTC is only opened on linux/amd64 and linux/arm64.
func loadNVRTCLib(string) (*nvrtc, error) {
	return nil, fmt.Errorf("libnvrtc on %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}

// loadCUBLAS reports that cuBLAS is only opened on linux/amd64 and linux/arm64.
func loadCUBLAS() (*cublas, error) {
	return nil, fmt.Errorf("libcublas on %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)
}

// launch is never reached: no driver loads here.
func (drv *driver) launch(fn uintptr, grid, block [3]uint32, shared uint32, stream uintptr, params *unsafe.Pointer) int32 {
	return 999 // CUDA_ERROR_UNKNOWN
}

// call is never reached: no driver loads here.
func (drv *driver) call(addr uintptr, args ...uintptr) int32 {
	return 999 // CUDA_ERROR_UNKNOWN
}
