package cuda

import (
	"fmt"
	"runtime"
	"sync"
)

// Info describes the GPU a Device drives.
type Info struct {
	// Ordinal is the CUDA device ordinal (after CUDA_VISIBLE_DEVICES).
	Ordinal int
	// Name is the device name, for example "NVIDIA H200".
	Name string
	// Major and Minor are the compute capability (9 and 0 for Hopper).
	Major, Minor int
	// SMs is the number of multiprocessors.
	SMs int
	// MaxSharedPerBlock is the shared memory a block may use without opting in, in bytes.
	MaxSharedPerBlock int
	// MaxSharedPerBlockOptin is the dynamic shared memory a block may use
	// after opting in (cuFuncSetAttribute), in bytes.
	MaxSharedPerBlockOptin int
	// MaxGrid is the largest grid, per dimension.
	MaxGrid [3]int
	// MaxThreadsPerBlock is the largest block size.
	MaxThreadsPerBlock int
	// DriverVersion is cuDriverGetVersion's value (12040 for CUDA 12.4).
	DriverVersion int
	// Library is the driver library that was opened.
	Library string
}

// Device is one GPU with its primary context, driven by a goroutine locked to one OS
// thread. Its methods may be called from any goroutine; they are serialised.
type Device struct {
	info Info

	mu       sync.RWMutex // write-held by Close; read-held while a call is queued
	closed   bool
	jobs     chan func()
	exited   chan struct{}
	closeErr error

	// Owned by the worker goroutine.
	drv   *driver
	dev   int32
	ctx   uintptr
	fault error // the sticky error that corrupted the context
}

// Open opens CUDA device 0; see OpenOrdinal.
func Open() (*Device, error) { return OpenOrdinal(0) }

// OpenOrdinal loads libcuda (once per process), retains the primary context of device
// ordinal and starts the goroutine that runs the Device's CUDA calls. The error wraps
// ErrUnavailable when libcuda cannot be loaded or initialised or the device does not
// exist.
func OpenOrdinal(ordinal int) (*Device, error) {
	drv, err := getDriver()
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, jobs: make(chan func()), exited: make(chan struct{})}
	ready := make(chan error, 1)
	go d.loop(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

// loop is the Device's goroutine: it stays on one OS thread (the thread exits with it,
// never unlocked), makes the context current there and runs jobs until Close.
func (d *Device) loop(ordinal int, ready chan<- error) {
	runtime.LockOSThread()
	defer close(d.exited)
	if err := d.setup(ordinal); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for job := range d.jobs {
		job()
	}
	d.closeErr = d.teardown()
}

// setup reads the device's attributes and makes its primary context current.
func (d *Device) setup(ordinal int) error {
	drv := d.drv
	var n int32
	if err := drv.check("cuDeviceGetCount", drv.cuDeviceGetCount(&n)); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if ordinal < 0 || ordinal >= int(n) {
		return fmt.Errorf("%w: device ordinal %d, %d CUDA device(s) visible", ErrUnavailable, ordinal, n)
	}
	if err := drv.check("cuDeviceGet", drv.cuDeviceGet(&d.dev, int32(ordinal))); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	attr := func(a int32) (int, error) {
		var v int32
		err := drv.check(fmt.Sprintf("cuDeviceGetAttribute(%d)", a), drv.cuDeviceGetAttribute(&v, a, d.dev))
		return int(v), err
	}
	var err error
	info := Info{Ordinal: ordinal, Library: drv.path}
	for _, f := range []struct {
		dst  *int
		attr int32
	}{
		{&info.Major, attrComputeCapabilityMajor},
		{&info.Minor, attrComputeCapabilityMinor},
		{&info.SMs, attrMultiprocessorCount},
		{&info.MaxSharedPerBlock, attrMaxSharedPerBlock},
		{&info.MaxThreadsPerBlock, attrMaxThreadsPerBlock},
		{&info.MaxSharedPerBlockOptin, attrMaxSharedPerBlockOptin},
		{&info.MaxGrid[0], attrMaxGridDimX},
		{&info.MaxGrid[1], attrMaxGridDimY},
		{&info.MaxGrid[2], attrMaxGridDimZ},
	} {
		if *f.dst, err = attr(f.attr); err != nil {
			return err
		}
	}
	name := make([]byte, 256)
	if drv.cuDeviceGetName(&name[0], int32(len(name)), d.dev) == cudaSuccess {
		info.Name = cString(name)
	}
	var v int32
	if drv.cuDriverGetVersion(&v) == cudaSuccess {
		info.DriverVersion = int(v)
	}
	d.info = info
	if err := drv.check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return err
	}
	if err := drv.check("cuCtxSetCurrent", drv.cuCtxSetCurrent(d.ctx)); err != nil {
		drv.cuDevicePrimaryCtxRelease(d.dev)
		return err
	}
	return nil
}

// teardown frees what the Device allocated and releases the primary context.
func (d *Device) teardown() error {
	drv := d.drv
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(drv.check("cuDevicePrimaryCtxRelease", drv.cuDevicePrimaryCtxRelease(d.dev)))
	return first
}

// do runs f on the Device's goroutine and returns its error.
func (d *Device) do(f func() error) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	res := make(chan error, 1)
	d.jobs <- func() {
		defer func() {
			if p := recover(); p != nil {
				res <- fmt.Errorf("cuda: panic in device call: %v", p)
			}
		}()
		res <- f()
	}
	return <-res
}

// Info returns the device's description.
func (d *Device) Info() Info { return d.info }

// Close waits for calls in progress, frees the device memory and the module, releases
// the primary context and ends the Device's goroutine. Later calls return ErrClosed;
// closing twice returns nil.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.jobs)
	d.mu.Unlock()
	<-d.exited
	return d.closeErr
}
