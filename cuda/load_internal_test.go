package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadError: a load the driver refuses for the PTX's ISA version
// wraps ErrUnsupportedPTX and names the driver's CUDA release, and keeps
// the driver's *Error; any other failed load is the driver's error as it
// is.
func TestLoadError(t *testing.T) {
	unsupported := &Error{Call: "cuModuleLoadData", Code: cudaErrorUnsupportedPTXVersion, Name: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"}
	err := loadError(unsupported, 12040)
	var e *Error
	if !errors.Is(err, ErrUnsupportedPTX) || !errors.As(err, &e) || e != unsupported ||
		!strings.Contains(err.Error(), "this driver is CUDA 12.4, cuDriverGetVersion 12040") || !strings.Contains(err.Error(), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION") {
		t.Errorf("unsupported PTX on CUDA 12.4: %v", err)
	}
	if err := loadError(unsupported, 0); !errors.Is(err, ErrUnsupportedPTX) || strings.Contains(err.Error(), "this driver is") {
		t.Errorf("unsupported PTX, driver not known: %v", err)
	}
	invalid := &Error{Call: "cuModuleLoadData", Code: 218, Name: "CUDA_ERROR_INVALID_PTX"}
	if err := loadError(invalid, 12040); err != invalid {
		t.Errorf("invalid PTX: %v, want the driver's error as it is", err)
	}
}
