// Package gpucheck runs the device kernels of package devkernels on a CUDA
// device the way a host does (plan, prepare, launch on its own tensors)
// and checks them against a float64 reference: the GPU tests
// (make test-gpu) and attnplug's GPU benchmark and run --device cuda use
// it. Test tensors are generated on the device from a hash of their
// index, so the reference recomputes any element without copying the
// tensors back.
package gpucheck
