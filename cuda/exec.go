package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Ctx gives direct access to the driver on the Device's own thread, where
// its context is current. It is valid only inside the function passed to
// Device.Do; a host that launches many kernels does them all in one Do, so
// a launch costs the driver call and nothing else.
type Ctx struct {
	d *Device
}

// Do runs f on the Device's thread with the device's context current and
// returns its error. Calls are serialised with the Device's other methods.
// After a sticky fault (see ErrFault) every call returns an error wrapping
// ErrFault without running f.
func (d *Device) Do(f func(c *Ctx) error) error {
	return d.do(func() error {
		if d.fault != nil {
			return d.fault
		}
		return d.sticky(f(&Ctx{d: d}))
	})
}

// ErrFault marks a sticky error: a kernel faulted (an illegal address, an
// illegal instruction, a trap), which corrupts the CUDA context. The driver
// then fails every call in that context; the process lives on, and the
// Device refuses all further work. Only a new process (or a reset of the
// primary context once no one else in the process uses it) gets a working
// context back.
var ErrFault = errors.New("cuda: the device context is corrupted by a kernel fault")

// stickyCodes are the CUresult values after which the context is unusable.
var stickyCodes = map[int]bool{
	700: true, // CUDA_ERROR_ILLEGAL_ADDRESS
	710: true, // CUDA_ERROR_ASSERT
	714: true, // CUDA_ERROR_HARDWARE_STACK_ERROR
	715: true, // CUDA_ERROR_ILLEGAL_INSTRUCTION
	716: true, // CUDA_ERROR_MISALIGNED_ADDRESS
	717: true, // CUDA_ERROR_INVALID_ADDRESS_SPACE
	718: true, // CUDA_ERROR_INVALID_PC
	719: true, // CUDA_ERROR_LAUNCH_FAILED
}

// sticky records a sticky error in d and wraps it with ErrFault.
func (d *Device) sticky(err error) error {
	var e *Error
	if errors.As(err, &e) && stickyCodes[e.Code] {
		d.fault = fmt.Errorf("%w: %w", ErrFault, err)
		return d.fault
	}
	return err
}

// Faulted returns the sticky error that ended the Device's usefulness, or
// nil.
func (d *Device) Faulted() error {
	var f error
	_ = d.do(func() error { f = d.fault; return nil })
	return f
}

func (c *Ctx) drv() *driver { return c.d.drv }

// Info returns the device's description.
func (c *Ctx) Info() Info { return c.d.info }

// Alloc allocates n bytes of device memory.
func (c *Ctx) Alloc(n int64) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: allocation of %d bytes", n)
	}
	var p uint64
	if err := c.drv().check("cuMemAlloc_v2", c.drv().cuMemAlloc(&p, uintptr(n))); err != nil {
		return 0, fmt.Errorf("%w (%d bytes)", err, n)
	}
	return p, nil
}

// Free frees device memory from Alloc; 0 is ignored.
func (c *Ctx) Free(p uint64) error {
	if p == 0 {
		return nil
	}
	return c.drv().check("cuMemFree_v2", c.drv().cuMemFree(p))
}

// MemInfo returns the device memory free and in all, in bytes, as the
// driver counts it (cuMemGetInfo): for a test that memory is given back,
// or a host sizing its buffers.
func (c *Ctx) MemInfo() (free, total int64, err error) {
	var f, t uint64
	if err := c.drv().check("cuMemGetInfo_v2", c.drv().cuMemGetInfo(&f, &t)); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// CopyIn copies src to device address dst (synchronous).
func (c *Ctx) CopyIn(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.drv().check("cuMemcpyHtoD_v2", c.drv().cuMemcpyHtoD(dst, unsafe.Pointer(&src[0]), uintptr(len(src))))
}

// CopyInAsync copies src to dst on stream s; src must stay unchanged until
// the stream reaches the copy.
func (c *Ctx) CopyInAsync(dst uint64, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return c.drv().check("cuMemcpyHtoDAsync_v2", c.drv().cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), uintptr(s)))
}

// CopyOut copies device memory at src into dst (synchronous).
func (c *Ctx) CopyOut(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return c.drv().check("cuMemcpyDtoH_v2", c.drv().cuMemcpyDtoH(unsafe.Pointer(&dst[0]), src, uintptr(len(dst))))
}

// Copy copies n bytes between device addresses.
func (c *Ctx) Copy(dst, src uint64, n int64) error {
	return c.drv().check("cuMemcpyDtoD_v2", c.drv().cuMemcpyDtoD(dst, src, uintptr(n)))
}

// CopyAsync copies n bytes between device addresses on stream s.
func (c *Ctx) CopyAsync(dst, src uint64, n int64, s Stream) error {
	return c.drv().check("cuMemcpyDtoDAsync_v2", c.drv().cuMemcpyDtoDAsync(dst, src, uintptr(n), uintptr(s)))
}

// Fill16 sets n 16-bit words at dst to v (a bf16 NaN is 0x7fc0).
func (c *Ctx) Fill16(dst uint64, v uint16, n int64) error {
	return c.drv().check("cuMemsetD16_v2", c.drv().cuMemsetD16(dst, v, uintptr(n)))
}

// Fill32 sets n 32-bit words at dst to v.
func (c *Ctx) Fill32(dst uint64, v uint32, n int64) error {
	return c.drv().check("cuMemsetD32_v2", c.drv().cuMemsetD32(dst, v, uintptr(n)))
}

// Synchronize waits for all work in the context.
func (c *Ctx) Synchronize() error {
	return c.drv().check("cuCtxSynchronize", c.drv().cuCtxSynchronize())
}

// Module is a loaded device code module.
type Module uintptr

// Function is a kernel entry point of a Module.
type Function uintptr

// LoadModule loads a PTX (NUL-terminated on the way in) or cubin image.
// A PTX image of an ISA newer than the driver reads is refused with an
// error wrapping ErrUnsupportedPTX that names the driver's CUDA version.
func (c *Ctx) LoadModule(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: empty module image")
	}
	img := image
	if img[len(img)-1] != 0 {
		img = append(append(make([]byte, 0, len(image)+1), image...), 0)
	}
	var m uintptr
	if err := c.drv().check("cuModuleLoadData", c.drv().cuModuleLoadData(&m, &img[0])); err != nil {
		return 0, loadError(err, c.d.info.DriverVersion)
	}
	return Module(m), nil
}

// ErrUnsupportedPTX is wrapped by the error of Ctx.LoadModule when the
// driver refuses a PTX image for its ISA version
// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): a driver reads PTX up to the ISA
// of its own CUDA release, and the image was built by a newer one.
var ErrUnsupportedPTX = errors.New("cuda: the PTX image's ISA is newer than this driver reads")

// loadError is err, a failed cuModuleLoadData, with what the driver's
// version (driver, as cuDriverGetVersion reports it; 0 when not known)
// says of it: an unsupported PTX version wraps ErrUnsupportedPTX and
// names the driver's CUDA release.
func loadError(err error, driver int) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != cudaErrorUnsupportedPTXVersion {
		return err
	}
	if driver == 0 {
		return fmt.Errorf("%w: %w", ErrUnsupportedPTX, err)
	}
	return fmt.Errorf("%w (this driver is CUDA %d.%d, cuDriverGetVersion %d): %w", ErrUnsupportedPTX, driver/1000, driver%1000/10, driver, err)
}

// UnloadModule unloads m.
func (c *Ctx) UnloadModule(m Module) error {
	return c.drv().check("cuModuleUnload", c.drv().cuModuleUnload(uintptr(m)))
}

// Function looks up the entry point name of m.
func (c *Ctx) Function(m Module, name string) (Function, error) {
	var f uintptr
	if err := c.drv().check("cuModuleGetFunction("+name+")", c.drv().cuModuleGetFunction(&f, uintptr(m), name)); err != nil {
		return 0, err
	}
	return Function(f), nil
}

// Global looks up the module-scope variable name of m (a __device__ or
// __constant__ one): its device address and size in bytes.
func (c *Ctx) Global(m Module, name string) (uint64, int64, error) {
	var p uint64
	var n uintptr
	if err := c.drv().check("cuModuleGetGlobal("+name+")", c.drv().cuModuleGetGlobal(&p, &n, uintptr(m), name)); err != nil {
		return 0, 0, err
	}
	return p, int64(n), nil
}

// SetMaxDynamicShared lets f use up to n bytes of dynamic shared memory
// (needed above 48 KiB).
func (c *Ctx) SetMaxDynamicShared(f Function, n int) error {
	const attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	return c.drv().check("cuFuncSetAttribute", c.drv().cuFuncSetAttribute(uintptr(f), attrMaxDynamicShared, int32(n)))
}

// Stream is a CUDA stream; 0 is the legacy default stream.
type Stream uintptr

// NewStream creates a non-blocking stream.
func (c *Ctx) NewStream() (Stream, error) {
	var s uintptr
	const nonBlocking = 1
	if err := c.drv().check("cuStreamCreate", c.drv().cuStreamCreate(&s, nonBlocking)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// DestroyStream destroys s.
func (c *Ctx) DestroyStream(s Stream) error {
	return c.drv().check("cuStreamDestroy_v2", c.drv().cuStreamDestroy(uintptr(s)))
}

// SyncStream waits for the work queued on s.
func (c *Ctx) SyncStream(s Stream) error {
	return c.drv().check("cuStreamSynchronize", c.drv().cuStreamSynchronize(uintptr(s)))
}

// Launch launches f with the given grid, block and dynamic shared memory
// on stream s; params points to an array of pointers to each argument
// (cuLaunchKernel's kernelParams), which the caller keeps pinned.
func (c *Ctx) Launch(f Function, grid, block [3]uint32, shared uint32, s Stream, params *unsafe.Pointer) error {
	if rc := c.drv().launch(uintptr(f), grid, block, shared, uintptr(s), params); rc != cudaSuccess {
		return c.drv().check("cuLaunchKernel", rc)
	}
	return nil
}

// Graph is an executable CUDA graph.
type Graph uintptr

// Capture records the work f queues on s (which must not be the legacy
// default stream) into a graph and instantiates it; nothing runs until
// LaunchGraph.
func (c *Ctx) Capture(s Stream, f func() error) (Graph, error) {
	const global = 0 // CU_STREAM_CAPTURE_MODE_GLOBAL
	if err := c.drv().check("cuStreamBeginCapture", c.drv().cuStreamBeginCapture(uintptr(s), global)); err != nil {
		return 0, err
	}
	ferr := f()
	var g uintptr
	eerr := c.drv().check("cuStreamEndCapture", c.drv().cuStreamEndCapture(uintptr(s), &g))
	if ferr != nil || eerr != nil {
		if g != 0 {
			c.drv().cuGraphDestroy(g)
		}
		return 0, errors.Join(ferr, eerr)
	}
	defer c.drv().cuGraphDestroy(g)
	var exec uintptr
	if err := c.drv().check("cuGraphInstantiateWithFlags", c.drv().cuGraphInstantiateWithFlags(&exec, g, 0)); err != nil {
		return 0, err
	}
	return Graph(exec), nil
}

// LaunchGraph replays g on s.
func (c *Ctx) LaunchGraph(g Graph, s Stream) error {
	return c.drv().check("cuGraphLaunch", c.drv().cuGraphLaunch(uintptr(g), uintptr(s)))
}

// DestroyGraph frees g.
func (c *Ctx) DestroyGraph(g Graph) error {
	return c.drv().check("cuGraphExecDestroy", c.drv().cuGraphExecDestroy(uintptr(g)))
}

// Event is a CUDA event, for timing.
type Event uintptr

// NewEvent creates an event that records time.
func (c *Ctx) NewEvent() (Event, error) {
	var e uintptr
	if err := c.drv().check("cuEventCreate", c.drv().cuEventCreate(&e, 0)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// Record records e on s.
func (c *Ctx) Record(e Event, s Stream) error {
	return c.drv().check("cuEventRecord", c.drv().cuEventRecord(uintptr(e), uintptr(s)))
}

// Elapsed waits for end and returns the milliseconds between start and end.
func (c *Ctx) Elapsed(start, end Event) (float32, error) {
	if err := c.drv().check("cuEventSynchronize", c.drv().cuEventSynchronize(uintptr(end))); err != nil {
		return 0, err
	}
	var ms float32
	err := c.drv().check("cuEventElapsedTime", c.drv().cuEventElapsedTime(&ms, uintptr(start), uintptr(end)))
	return ms, err
}

// DestroyEvent frees e.
func (c *Ctx) DestroyEvent(e Event) error {
	return c.drv().check("cuEventDestroy", c.drv().cuEventDestroy(uintptr(e)))
}
