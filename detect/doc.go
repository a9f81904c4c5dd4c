// Package detect finds the accelerators and CPU features of a host from
// files alone and picks the attention backends sglang would use by default
// for DeepSeek models on that hardware.
//
// Start with [Detect]: it reads sysfs, procfs and /dev under a root
// directory (default "/", so tests can point it at a fixture tree) and
// returns a [Report] listing every GPU or NPU it saw with a usability
// verdict, the CPU's architecture and AMX support, the platform the host
// will serve on ("cuda", "hip", "npu", "xpu" or "cpu") and the default
// backends for MLA (DeepSeek-V3/R1) and DSA (DeepSeek-V3.2) models.
//
// No vendor library is linked. On the real root, and only there, Detect
// also asks the NVIDIA driver (libcuda, opened at run time through purego,
// without cgo) for compute capabilities, and the kernel (arch_prctl) whether
// it supports AMX tile data.
//
// [Select] applies user overrides (flags, the ATTNPLUG_BACKEND environment
// value, a config file read by [LoadConfig]) on top of the detected default
// and checks each chosen backend against its hardware [Requirement].
// [WriteTable] prints a report for people, [Doctor] and [WriteDoctor]
// explain what to do about unusable devices, and the Report marshals to
// JSON as is.
//
// docs/hardware.md describes the checks and the selection table, with
// citations of the sglang source they follow.
package detect
