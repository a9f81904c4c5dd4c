// Package devkernels is the device code of attnplug's CUDA backends and the
// rules that launch it: CUDA C sources (mla_decode and mha_prefill on
// mma.sync for sm_80 and newer, mla_decode_sm90 and mha_prefill_sm90 on
// wgmma for sm_90a alone), built ahead of time into images/ and compiled
// by NVRTC for the device the host reports only where those are stale or
// missing, and the planners that turn a batch into launches, picking the
// variant by the device's architecture and shared memory
// (core.KernelPlanner's two halves). Plugins link it through backendkit;
// the host never does: it only loads the modules and launches the plans
// (package launch).
package devkernels
