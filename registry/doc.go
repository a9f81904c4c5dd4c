// Package registry resolves backend names to the Backends that serve them,
// discovers and supervises plugin processes, and falls back to the triton
// rules of package core when no plugin can answer.
//
// Where to start: New builds a Registry from a Config; Registry.Dispatch
// answers one core.Request with a core.Answer; Registry.Close ends every
// plugin process the registry started.
//
// The life of a plugin in a registry:
//
//  1. Discovery: every executable file named attnplug-backend-<name> in the
//     plugin directories is a candidate. Its description (the names it
//     serves, the facts they read) comes from a cache keyed by the binary's
//     SHA-256, or from starting the binary once and asking.
//  2. Resolution: a name maps to the first plugin, in directory order, that
//     serves it. A name nobody serves is decided by the triton rules, as in
//     the reference; Answer.Handler is then "triton".
//  3. Start: a plugin process starts when the first request for one of its
//     names arrives, and keeps running.
//  4. Supervision: a call that fails (crash, deadline, protocol violation)
//     falls back to the triton rules with a named reason, logged as a
//     warning; the plugin is restarted with exponential backoff, and a
//     plugin that keeps failing is quarantined.
//  5. End: Close kills every process the registry started; plugin processes
//     also die with the host (a parent-death signal), so none outlives it.
//
// A Registry is safe for concurrent use.
package registry
