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
//   - Facts and FactSet describe which request facts a backend's rules read,
//     so that a host may cache answers exactly.
//
// Every fact that sglang reads from global state (server arguments, the
// CUDA-graph context, the ROCm platform, the DSA backend's per-batch choice)
// is an explicit field of the Request: nothing in this package reads global
// state.
package core
