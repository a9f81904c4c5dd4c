// Package cuda is the CUDA driver API a host needs to launch device code it
// did not compile itself, from pure Go (no cgo).
//
// The CUDA driver library (libcuda.so.1), NVRTC (libnvrtc.so.*) and cuBLAS
// are opened at run time with github.com/ebitengine/purego, so a binary
// built with CGO_ENABLED=0 runs on machines with and without a GPU: on a
// machine without libcuda or without a device, Open returns an error
// wrapping ErrUnavailable. Every dlopen and dlsym goes through cuda/dynlib,
// which keeps the loader's message with the call that failed.
//
// # Threads
//
// A CUDA context is current per OS thread. A Device therefore owns one
// goroutine, locked to its OS thread with runtime.LockOSThread, that makes
// the context (the device's primary context, which a framework in the same
// process shares) current once and then runs every CUDA call from a work
// queue; Device.Do hands a function that work to that goroutine with a Ctx
// (modules, launches, memory, streams, events, CUDA graphs) and waits for
// it, so a Device may be used from any goroutine (calls are serialised).
// Close ends the goroutine and releases the context.
//
// A kernel fault corrupts the context: the Device turns the driver's sticky
// error into ErrFault and refuses further work (Faulted). A PTX image of
// an ISA newer than the driver reads is refused by Ctx.LoadModule with an
// error wrapping ErrUnsupportedPTX, naming the driver's CUDA release
// (Info.DriverVersion, cuDriverGetVersion).
//
// The kernels themselves are the plugins': package devkernels holds the
// project's, built ahead of time; launch/cudaexec loads and launches the
// plans of any plugin. See docs/device.md and docs/cuda.md.
package cuda
