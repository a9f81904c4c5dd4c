// Package launch holds the host's rules for device execution: the tensor
// layout a plan binds (Tensors), the limits on a plan request
// (CheckRequest) and the checks every plan a plugin answers must pass
// before the host launches it (Check).
//
// This package is pure Go and builds everywhere: Check and Tensors. The
// CUDA executor is package launch/cudaexec. docs/device.md describes the
// model.
package launch
