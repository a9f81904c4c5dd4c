// Package backendkit turns a core.RuleBackend into a backend that also runs
// its kernels: the kernel catalog of each rule (core.Rule.Kernels) is run by
// the reference kernels of package kernels on tensors in shared memory
// (package shm), as a core.KernelRunner. Every in-tree plugin is built with
// it, and the host uses it to run the triton fallback's kernels in its own
// process and to run a kernel itself when a plugin dies during the call.
//
// There is no device code here: every kernel is emulated, the math of the
// kernel it stands for computed on the CPU in float32 with float64
// accumulation, and the result says so (core.KernelResult.Emulated, Note).
package backendkit
