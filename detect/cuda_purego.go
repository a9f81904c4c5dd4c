//go:build linux && (amd64 || arm64)

package detect

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/attnplug/attnplug/cuda/dynlib"
	"github.com/ebitengine/purego"
)

// CUDA driver API device attributes.
const (
	cuAttrComputeCapabilityMajor = 75
	cuAttrComputeCapabilityMinor = 76
)

// errNoLibcuda means libcuda could not be opened or lacks a symbol.
var errNoLibcuda = errors.New("libcuda unavailable")

// queryCUDA asks libcuda for each device's PCI bus ID, name and compute
// capability. It gives up when ctx is done (cuInit can be slow).
func queryCUDA(ctx context.Context) ([]cudaDevice, error) {
	type result struct {
		devs []cudaDevice
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		devs, err := queryCUDASync()
		ch <- result{devs, err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("libcuda: %w", ctx.Err())
	case r := <-ch:
		return r.devs, r.err
	}
}

// queryCUDASync loads libcuda and reads the devices. The library stays
// loaded: unloading the driver after cuInit is not safe.
func queryCUDASync() (devs []cudaDevice, err error) {
	defer func() {
		if p := recover(); p != nil {
			devs, err = nil, fmt.Errorf("libcuda: %v", p)
		}
	}()
	var lib uintptr
	for _, name := range []string{"libcuda.so.1", "libcuda.so"} {
		if lib, err = dynlib.Open(name, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoLibcuda, err)
	}
	var (
		cuInit               func(flags uint32) int32
		cuDeviceGetCount     func(count *int32) int32
		cuDeviceGet          func(dev *int32, ordinal int32) int32
		cuDeviceGetAttribute func(v *int32, attr int32, dev int32) int32
		cuDeviceGetPCIBusId  func(buf *byte, n int32, dev int32) int32
		cuDeviceGetName      func(buf *byte, n int32, dev int32) int32
	)
	for name, fptr := range map[string]any{
		"cuInit":               &cuInit,
		"cuDeviceGetCount":     &cuDeviceGetCount,
		"cuDeviceGet":          &cuDeviceGet,
		"cuDeviceGetAttribute": &cuDeviceGetAttribute,
		"cuDeviceGetPCIBusId":  &cuDeviceGetPCIBusId,
		"cuDeviceGetName":      &cuDeviceGetName,
	} {
		sym, err := dynlib.Symbol(lib, name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errNoLibcuda, name, err)
		}
		purego.RegisterFunc(fptr, sym)
	}
	if rc := cuInit(0); rc != 0 {
		return nil, fmt.Errorf("libcuda: cuInit: CUresult %d", rc)
	}
	var n int32
	if rc := cuDeviceGetCount(&n); rc != 0 {
		return nil, fmt.Errorf("libcuda: cuDeviceGetCount: CUresult %d", rc)
	}
	for i := int32(0); i < n; i++ {
		var dev, major, minor int32
		if rc := cuDeviceGet(&dev, i); rc != 0 {
			return nil, fmt.Errorf("libcuda: cuDeviceGet(%d): CUresult %d", i, rc)
		}
		if rc := cuDeviceGetAttribute(&major, cuAttrComputeCapabilityMajor, dev); rc != 0 {
			return nil, fmt.Errorf("libcuda: compute capability major of %d: CUresult %d", i, rc)
		}
		if rc := cuDeviceGetAttribute(&minor, cuAttrComputeCapabilityMinor, dev); rc != 0 {
			return nil, fmt.Errorf("libcuda: compute capability minor of %d: CUresult %d", i, rc)
		}
		bus := make([]byte, 64)
		if rc := cuDeviceGetPCIBusId(&bus[0], int32(len(bus)), dev); rc != 0 {
			return nil, fmt.Errorf("libcuda: PCI bus id of %d: CUresult %d", i, rc)
		}
		name := make([]byte, 256)
		if rc := cuDeviceGetName(&name[0], int32(len(name)), dev); rc != 0 {
			name[0] = 0
		}
		devs = append(devs, cudaDevice{
			pciAddress: cString(bus),
			major:      int(major),
			minor:      int(minor),
			name:       cString(name),
		})
	}
	return devs, nil
}

// cString returns the bytes before the first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
