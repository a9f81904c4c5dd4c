// Package core is the contract of attnplug: the facts a dispatch request
// carries, the forward methods a backend may answer, the Backend interface a
// plugin implements, and the triton rules that decide whenever no plugin
// does.
//
// core imports no transport. The wire package carries these types between a
// host and a plugin process; the registry package resolves backend names to
// Backends and applies the fallback.
//
// Where to start:
//
//   - Request, with its Layer, Batch and Runtime facts, is one question:
//     which forward method does this attention layer run for this batch.
//   - Method is the answer (sglang's AttnForwardMethod).
//   - Backend is what a plugin implements: Describe and Dispatch.
//   - Triton is the fallback backend, always present, in process.
//   - MLASubtype and ChunkedPrefixRule are the rules several backends share.
//   - Reads declares what a backend's rules read: quantities of a fixed
//     vocabulary (Quantity, Read), each number with the thresholds it is
//     compared to, or facts (Fact), shorthands for such declarations. A
//     host keys its cache of answers by the side of each threshold a
//     request falls on (KeyPlan), so it may cache answers exactly.
//     Conditions (ReadsCondition) narrow the reads where a fact holds.
//   - Hardware declares what a backend's kernels run on, by platform or by
//     PCI device (PCIDevice) for an accelerator of a platform of its own.
//
// Every fact that sglang reads from global state (server arguments, the
// CUDA-graph context, the ROCm platform, the DSA backend's per-batch choice)
// is an explicit field of the Request: nothing in this package reads global
// state.
package core
