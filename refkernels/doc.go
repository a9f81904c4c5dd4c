// Package refkernels runs a backend's kernel catalog with the reference
// kernels of package kernels, in pure Go: a plugin that imports it (and
// core and wire) builds as a static binary with CGO_ENABLED=0, and passes
// attnplug conform's kernels check with no emulation of its own.
//
// It is a reference, not the device kernel: Run computes the math of the
// kernel a catalog entry names on the CPU, in float32 with float64
// accumulation, and says so (core.KernelResult.Emulated, Note). A vendor's
// bf16 device kernel is not what runs here; it runs in the host's process
// as device code (core.KernelPlanner, docs/device.md), and its numerics
// are the vendor's to test on the GPU against the same reference.
//
// Where to start: New wraps a core.RuleBackend into a core.KernelRunner
// whose RunKernel runs the catalog kernel of the request's name and
// method; Run runs one catalog entry. Views, Batch and Refs cut a kernel
// call's shared memory into tensors, for a RunKernel of one's own.
//
// Package backendkit does the same for the project's plugins, and also
// runs the absorbed MLA on a CUDA device and hands the project's device
// code: it links the CUDA driver through purego, so a binary that imports
// it is dynamically linked. This package links neither.
package refkernels
