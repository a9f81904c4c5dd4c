//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/attnplug/attnplug/cuda/dynlib"
	"github.com/ebitengine/purego"
)

// loadDriver opens libcuda.so.1 and binds the driver entry points.
func loadDriver() (*driver, error) {
	lib, path, err := dlopenFirst([]string{"libcuda.so.1", "libcuda.so"})
	if err != nil {
		return nil, err
	}
	drv := &driver{path: path}
	syms := []struct {
		fptr  any
		names []string
	}{
		{&drv.cuInit, []string{"cuInit"}},
		{&drv.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&drv.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&drv.cuDeviceGet, []string{"cuDeviceGet"}},
		{&drv.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&drv.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&drv.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&drv.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&drv.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&drv.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&drv.cuModuleLoadData, []string{"cuModuleLoadData"}},
		{&drv.cuModuleUnload, []string{"cuModuleUnload"}},
		{&drv.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&drv.cuModuleGetGlobal, []string{"cuModuleGetGlobal_v2"}},
		{&drv.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&drv.cuMemFree, []string{"cuMemFree_v2"}},
		{&drv.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&drv.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
		{&drv.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
		{&drv.cuGetErrorName, []string{"cuGetErrorName"}},
		{&drv.cuGetErrorString, []string{"cuGetErrorString"}},
		{&drv.cuFuncSetAttribute, []string{"cuFuncSetAttribute"}},
		{&drv.cuStreamCreate, []string{"cuStreamCreate"}},
		{&drv.cuStreamDestroy, []string{"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{&drv.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&drv.cuStreamBeginCapture, []string{"cuStreamBeginCapture_v2", "cuStreamBeginCapture"}},
		{&drv.cuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&drv.cuGraphInstantiateWithFlags, []string{"cuGraphInstantiateWithFlags"}},
		{&drv.cuGraphLaunch, []string{"cuGraphLaunch"}},
		{&drv.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&drv.cuGraphDestroy, []string{"cuGraphDestroy"}},
		{&drv.cuEventCreate, []string{"cuEventCreate"}},
		{&drv.cuEventRecord, []string{"cuEventRecord"}},
		{&drv.cuEventSynchronize, []string{"cuEventSynchronize"}},
		{&drv.cuEventElapsedTime, []string{"cuEventElapsedTime"}},
		{&drv.cuEventDestroy, []string{"cuEventDestroy_v2", "cuEventDestroy"}},
		{&drv.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&drv.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&drv.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&drv.cuMemsetD8, []string{"cuMemsetD8_v2"}},
		{&drv.cuMemsetD16, []string{"cuMemsetD16_v2"}},
		{&drv.cuMemsetD32, []string{"cuMemsetD32_v2"}},
		{&drv.cuCtxGetCurrent, []string{"cuCtxGetCurrent"}},
	}
	for _, s := range syms {
		if err := bind(lib, s.fptr, s.names...); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if drv.launchAddr, err = dynlib.Symbol(lib, "cuLaunchKernel"); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// CUDA 12's, for clusters, programmatic launches and TMA descriptors:
	// a driver without them still runs every other launch.
	drv.launchExAddr, _ = dynlib.Symbol(lib, "cuLaunchKernelEx")
	drv.encodeTiledAddr, _ = dynlib.Symbol(lib, "cuTensorMapEncodeTiled")
	return drv, nil
}

// call calls the driver entry point at addr with args through
// purego.SyscallN; args that are addresses point to pinned memory.
func (drv *driver) call(addr uintptr, args ...uintptr) int32 {
	rc, _, _ := purego.SyscallN(addr, args...)
	return int32(rc)
}

// launch calls cuLaunchKernel through purego.SyscallN, without the
// reflection of a registered function: it is the per-layer call of a host.
func (drv *driver) launch(fn uintptr, grid, block [3]uint32, shared uint32, stream uintptr, params *unsafe.Pointer) int32 {
	rc, _, _ := purego.SyscallN(drv.launchAddr, fn, uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), uintptr(shared), stream, uintptr(unsafe.Pointer(params)), 0)
	return int32(rc)
}

// loadNVRTCLib opens one NVRTC library file (or soname) and binds its entry points.
// For a path it first loads the libnvrtc-builtins beside it, which NVRTC opens by
// soname at compile time and would otherwise find only on the loader's search path.
func loadNVRTCLib(name string) (*nvrtc, error) {
	if filepath.IsAbs(name) {
		builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(name), "libnvrtc-builtins.so*"))
		for _, b := range builtins {
			dynlib.Open(b, purego.RTLD_NOW|purego.RTLD_GLOBAL) // best effort
		}
	}
	lib, err := dynlib.Open(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, err
	}
	nv := &nvrtc{path: name}
	syms := []struct {
		fptr any
		name string
	}{
		{&nv.nvrtcVersion, "nvrtcVersion"},
		{&nv.nvrtcGetErrorString, "nvrtcGetErrorString"},
		{&nv.nvrtcCreateProgram, "nvrtcCreateProgram"},
		{&nv.nvrtcCompileProgram, "nvrtcCompileProgram"},
		{&nv.nvrtcGetPTXSize, "nvrtcGetPTXSize"},
		{&nv.nvrtcGetPTX, "nvrtcGetPTX"},
		{&nv.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"},
		{&nv.nvrtcGetProgramLog, "nvrtcGetProgramLog"},
		{&nv.nvrtcDestroyProgram, "nvrtcDestroyProgram"},
	}
	for _, s := range syms {
		if err := bind(lib, s.fptr, s.name); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return nv, nil
}

// dlopenFirst opens the first library of names that loads.
func dlopenFirst(names []string) (uintptr, string, error) {
	var errs []error
	for _, name := range names {
		lib, err := dynlib.Open(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return lib, name, nil
		}
		errs = append(errs, err)
	}
	return 0, "", joinErrs(errs...)
}

// bind looks up the first of names that lib exports and registers it into fptr.
func bind(lib uintptr, fptr any, names ...string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("binding %s: %v", names[0], p)
		}
	}()
	for _, name := range names {
		sym, e := dynlib.Symbol(lib, name)
		if e != nil {
			err = fmt.Errorf("missing symbol %s: %w", name, e)
			continue
		}
		purego.RegisterFunc(fptr, sym)
		return nil
	}
	return err
}

// loadCUBLAS opens the newest libcublas found and binds what BLAS uses.
func loadCUBLAS() (*cublas, error) {
	names := append(libraryCandidates("libcublas", "cublas"), "libcublas.so.13", "libcublas.so.12", "libcublas.so")
	lib, path, err := dlopenFirst(names)
	if err != nil {
		return nil, fmt.Errorf("cuda: no cuBLAS library: %w", err)
	}
	b := &cublas{path: path}
	for _, s := range []struct {
		fptr any
		name string
	}{
		{&b.create, "cublasCreate_v2"}, {&b.destroy, "cublasDestroy_v2"},
		{&b.setStream, "cublasSetStream_v2"}, {&b.gemmEx, "cublasGemmEx"},
	} {
		if err := bind(lib, s.fptr, s.name); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return b, nil
}
