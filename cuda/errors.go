package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnavailable is wrapped by the errors of Open when this process cannot use a CUDA
// GPU: libcuda.so.1 is missing, cuInit fails, or there is no device. Callers test it
// with errors.Is and fall back to the CPU kernels.
var ErrUnavailable = errors.New("cuda: unavailable")

// ErrClosed is returned by the methods of a Device after Close.
var ErrClosed = errors.New("cuda: device is closed")

// ErrNoNVRTC is wrapped by the error that says why the runtime compiler could not be
// loaded (no libnvrtc.so.* found, or a symbol is missing).
var ErrNoNVRTC = errors.New("cuda: NVRTC unavailable")

// Error is a failed CUDA driver or NVRTC call.
type Error struct {
	// Call is the C function that failed, for example "cuMemAlloc_v2".
	Call string
	// Code is the CUresult or nvrtcResult value.
	Code int
	// Name is the enumerator's name, for example "CUDA_ERROR_OUT_OF_MEMORY" or
	// "NVRTC_ERROR_COMPILATION".
	Name string
	// Message is the driver's description of Code (empty for NVRTC).
	Message string
	// Log is the NVRTC compilation log, when Call is nvrtcCompileProgram.
	Log string
}

// Error formats the call, the error name and the description.
func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s", e.Call, e.Name)
	if e.Message != "" && e.Message != e.Name {
		s += " (" + e.Message + ")"
	}
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// CUresult values this package tests for.
const (
	cudaSuccess                    = 0
	cudaErrorNoDevice              = 100
	cudaErrorUnsupportedPTXVersion = 222
)

// errList joins errors on one line ("a; b"), unwrapping to each of them.
type errList []error

func (l errList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (l errList) Unwrap() []error { return l }

// joinErrs returns nil, the only error, or an errList of the non-nil errs.
func joinErrs(errs ...error) error {
	var l errList
	for _, e := range errs {
		if e != nil {
			l = append(l, e)
		}
	}
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	}
	return l
}
