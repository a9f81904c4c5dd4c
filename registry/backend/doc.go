// Package backend is what package registry routes a backend name to: the
// one Backend interface, the closed set of outcomes of a call to it
// (Outcome), the reasons a request falls back (reason.go), and InProcess,
// the Backend of a core.Backend linked into the host.
//
// Two kinds of backend implement it, as Nomad's plugin loader serves
// internal and external plugins behind one instance interface: the
// supervised process of a plugin binary (package pluginproc) and a
// core.Backend in the host's process (InProcess: the triton rules, which
// are the registry's default route and its fallback, and the backends a
// Go host links). The registry routes, caches, calls and falls back the
// same way for both: it never asks which kind it holds.
//
// Where to start: Backend.Call runs one call and returns an Outcome, one
// of Answered, Declined (the backend's own "no": an invalid request, no
// kernel, no plan), Unavailable (no process could be had, with its
// Reason), Failed (the call failed, with its Reason) or Canceled (the
// caller's context ended). OutcomeOf sorts the error of a call into one of
// them, for every implementation alike.
//
// The package is separate from registry so that pluginproc, which
// implements Backend, need not import the registry that uses it.
package backend
