// Package backendkit turns a core.RuleBackend into a backend that also runs
// its kernels: the kernel catalog of each rule (core.Rule.Kernels) is run by
// the reference kernels of package kernels on tensors in shared memory
// (package shm), as a core.KernelRunner. Every in-tree plugin is built with
// it, and the host uses it to run the triton fallback's kernels in its own
// process and to run a kernel itself when a plugin dies during the call.
//
// Those kernels are emulated, the math of the kernel they stand for
// computed on the CPU in float32 with float64 accumulation, and the result
// says so (core.KernelResult.Emulated, Note); the absorbed MLA kernel runs
// on a CUDA device when one opens (package cuda).
//
// A Backend whose catalog holds a CUDA absorbed-MLA kernel also hands the
// host device code (device.go): it is a core.KernelPlanner over package
// devkernels, whose modules the host loads and whose plans it launches in
// its own process (package launch), and its description sets DeviceCode.
package backendkit
