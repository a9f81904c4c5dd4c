package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// driver holds the libcuda entry points, bound once per process by loadDriver.
type driver struct {
	path string

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceGetName           func(buf *byte, n int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuModuleLoadData          func(mod *uintptr, image *byte) int32
	cuModuleUnload            func(mod uintptr) int32
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name string) int32
	cuModuleGetGlobal         func(ptr *uint64, size *uintptr, mod uintptr, name string) int32
	cuMemAlloc                func(p *uint64, size uintptr) int32
	cuMemFree                 func(p uint64) int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uintptr) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uintptr) int32
	launchAddr                uintptr // cuLaunchKernel, called through driver.launch
	launchExAddr              uintptr // cuLaunchKernelEx (CUDA 12), 0 when the driver lacks it
	encodeTiledAddr           uintptr // cuTensorMapEncodeTiled (CUDA 12), 0 when the driver lacks it
	cuGetErrorName            func(code int32, s **byte) int32
	cuGetErrorString          func(code int32, s **byte) int32

	// Device execution (exec.go).
	cuFuncSetAttribute          func(fn uintptr, attr int32, v int32) int32
	cuStreamCreate              func(s *uintptr, flags uint32) int32
	cuStreamDestroy             func(s uintptr) int32
	cuStreamSynchronize         func(s uintptr) int32
	cuStreamBeginCapture        func(s uintptr, mode int32) int32
	cuStreamEndCapture          func(s uintptr, g *uintptr) int32
	cuGraphInstantiateWithFlags func(exec *uintptr, g uintptr, flags uint64) int32
	cuGraphLaunch               func(exec uintptr, s uintptr) int32
	cuGraphExecDestroy          func(exec uintptr) int32
	cuGraphDestroy              func(g uintptr) int32
	cuEventCreate               func(e *uintptr, flags uint32) int32
	cuEventRecord               func(e uintptr, s uintptr) int32
	cuEventSynchronize          func(e uintptr) int32
	cuEventElapsedTime          func(ms *float32, start, end uintptr) int32
	cuEventDestroy              func(e uintptr) int32
	cuMemcpyHtoDAsync           func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) int32
	cuMemcpyDtoD                func(dst, src uint64, n uintptr) int32
	cuMemcpyDtoDAsync           func(dst, src uint64, n uintptr, s uintptr) int32
	cuMemsetD8                  func(dst uint64, v uint8, n uintptr) int32
	cuMemsetD16                 func(dst uint64, v uint16, n uintptr) int32
	cuMemsetD32                 func(dst uint64, v uint32, n uintptr) int32
	cuCtxGetCurrent             func(ctx *uintptr) int32
}

// Device attributes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock     = 1
	attrMaxSharedPerBlock      = 8
	attrMultiprocessorCount    = 16
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMaxGridDimX            = 5
	attrMaxGridDimY            = 6
	attrMaxGridDimZ            = 7
	attrMaxSharedPerBlockOptin = 97
)

var (
	driverOnce sync.Once
	driverLib  *driver
	driverErr  error
)

// getDriver loads and initialises libcuda once per process; the library stays loaded
// (unloading the driver after cuInit is not safe).
func getDriver() (*driver, error) {
	driverOnce.Do(func() {
		driverLib, driverErr = loadDriver()
		if driverErr != nil {
			driverErr = fmt.Errorf("%w: %w", ErrUnavailable, driverErr)
			return
		}
		if err := driverLib.check("cuInit", driverLib.cuInit(0)); err != nil {
			driverErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	})
	return driverLib, driverErr
}

// check turns a CUresult into nil or an *Error naming call.
func (drv *driver) check(call string, rc int32) error {
	if rc == cudaSuccess {
		return nil
	}
	e := &Error{Call: call, Code: int(rc), Name: fmt.Sprintf("CUresult(%d)", rc)}
	var s *byte
	if drv.cuGetErrorName != nil && drv.cuGetErrorName(rc, &s) == cudaSuccess && s != nil {
		e.Name = goString(s)
	}
	s = nil
	if drv.cuGetErrorString != nil && drv.cuGetErrorString(rc, &s) == cudaSuccess && s != nil {
		e.Message = goString(s)
	}
	return e
}

// goString copies the NUL-terminated C string at p (owned by the C library).
func goString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns the bytes of b before the first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
