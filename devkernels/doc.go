// Package devkernels is the device code of attnplug's CUDA backends and the
// rules that launch it: CUDA C sources, compiled by NVRTC for the device
// the host reports, and the planners that turn a batch into launches
// (core.KernelPlanner's two halves). Plugins link it through backendkit;
// the host never does: it only loads the modules and launches the plans
// (package launch).
package devkernels
