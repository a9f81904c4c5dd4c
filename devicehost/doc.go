// Package devicehost is the device side of a Go host: Host, the one object
// that plans and launches device code (FlashInfer's plan then run). A Host
// asks its Source (a *registry.Registry, or a client of attnplug serve)
// for a backend's kernel modules once per device and loads them
// (launch/cudaexec), asks for a batch's plan, which the Source has
// checked, and prepares it without a second check; the Prepared then
// launches each layer on the caller's stream and tensors.
//
// Start with OpenHost and Host.Plan. Env is a Host with what checks its
// kernels: tensors generated on the device from a hash of their index (so
// the float64 reference recomputes any element without copying the
// tensors back), outputs poisoned before a launch, the comparison with
// the reference (Verify, VerifyPrefill), timings, and the benchmark
// (RunBench). attnplug run --device cuda runs a line's batch through it
// (package kernelrun), attnplug bench --gpu runs RunBench, attnplug
// conform runs a plugin's plans with Env.RunPlan, and the GPU tests
// (internal/gpucheck, their harness) build on it.
//
// It needs a CUDA GPU at run time only: libcuda is loaded dynamically, so
// it builds everywhere, and OpenHost fails with cuda.ErrUnavailable where
// there is no GPU.
package devicehost
