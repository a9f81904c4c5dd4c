// Package devicecheck is the verification layer of device code: it checks
// a plugin's kernels on a GPU the one way every command and test does. A
// Workload is one kind of kernel check, with one implementation per kind
// (MLA: absorbed-MLA decode, target verify and extend over a paged bf16
// cache; Quant: the same over an FP8 cache, and DeepSeek-V3.2's sparse MLA
// over each token's top-k; Prefill: the MHA methods); its Batch puts the
// tensors on the device, generated from a hash of their index by the fills
// of package devkernels/fill, so that the float64 reference recomputes any
// element without copying tensors back. Env.Run runs a workload through a
// devicehost.Host: the plan from the Host's Source (a registry, a client
// of attnplug serve, or conform's plugin under test, which checks it once),
// outputs poisoned, one launch, the comparison with the float64 reference;
// Run.Time and Run.StepTime time it in captured CUDA graphs.
//
// Its users: attnplug run --device cuda (package kernelrun), attnplug
// bench --gpu (RunBench: the floors, every shape, torch, and the targets of
// docs/bench/targets.json, LoadTargets and Judge), attnplug conform on a
// GPU (RunPlan) and the GPU tests (internal/gpucheck). Start with Open and
// Env.Run.
//
// It needs a CUDA GPU at run time only: libcuda is loaded dynamically, so
// it builds everywhere, and Open fails with cuda.ErrUnavailable where there
// is no GPU.
package devicecheck
