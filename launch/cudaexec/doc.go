// Package cudaexec launches checked plans on a CUDA device: an Executor
// loads the modules a plugin handed over into the device's primary context
// (shared with any framework in the process; a module whose image needs a
// newer driver than the device's is refused before it is loaded, naming
// what it needs: launch.CheckDriver) and prepares plans once per
// batch (metadata uploaded, workspace allocated); Prepared.Launch then
// queues a layer's launches on the host's stream and tensors with no RPC,
// no host copy and no allocation, also under CUDA graph capture.
//
// A plan is checked once: Prepare and Update check a plan made in the
// host's process with launch.Check; PrepareChecked and UpdateChecked take
// one its source checked (the registry's PlanKernel) as it is. A plan that
// fails to prepare leaves nothing allocated or pinned.
//
// It is the only part of the launch path that needs the GPU; package
// launch (the plan checks) is pure Go, so the registry and the dispatch
// path never link the CUDA binding.
package cudaexec
