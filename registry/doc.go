// Package registry resolves backend names to the backends that serve them,
// discovers and supervises plugin processes, and falls back to the triton
// rules of package core when a backend cannot answer.
//
// Where to start: New builds a Registry from a Config; Registry.Dispatch
// answers one core.Request with a core.Answer, and Registry.DispatchBatch
// many (a BatchAnswer each), with one call per backend; Registry.Close ends
// every plugin process the registry started. A Go serving engine resolves
// a backend once with Registry.Resolve and answers each forward pass with
// Dispatcher.BeginInto and Pass.Dispatch per layer: no RPC and no
// allocation once warm. Dispatcher.Dispatch is Registry.Dispatch for the
// one name it resolved. None of them modifies the caller's requests.
//
// One backend abstraction: a name routes to a backend.Backend
// (route.go's route), either a plugin binary's supervised process
// (package pluginproc: discovery, description cache, lock, start, restart,
// quarantine) or a core.Backend in the host's process (backend.InProcess:
// the triton rules, the default route's backend and the fallback of every
// name, and the backends a Go host links, Config.Backends). The registry
// routes, caches, calls and falls back the same way for both, and no
// route asks which kind it holds (pluginproc.Load's plugins are listed,
// started, reloaded and ended as plugins): every call to a backend, for a dispatch, a batch, a
// kernel, modules, a plan or a reload's self-test, goes through
// Registry.call (call.go), the one switch over the closed set of a call's
// outcomes (backend.Outcome: answered, declined, unavailable, failed,
// canceled). dispatch.go takes a request through its steps, route.go
// holds a name's route and its answer cache, call.go decides and asks,
// batch.go groups a batch by backend, unserved.go says why a name has no
// backend, fallback.go asks
// the triton rules through the same call and records why (the one
// recorder of fallbacks), kernel.go and device.go serve kernels, modules
// and plans, reload.go swaps plugins. The reasons are declared once, in
// package backend (reason.go), and exported here under the same names.
//
// The life of a plugin in a registry:
//
//  1. Discovery (pluginproc.Load): every executable file named
//     attnplug-backend-<name> in the plugin directories is a candidate,
//     unless other users can write it or its directory, or a lock file
//     (Config.Lock) does not pin its SHA-256.
//     Its description (the names it serves, the facts they read, the
//     hardware they need) comes from a cache keyed by the binary's SHA-256,
//     or from starting the binary once and asking (and running the kernel
//     self-check, whose pass is cached too). The hash itself is cached by
//     the file's identity (device, inode, size, modification and change
//     times), so a start reads no binary it hashed before.
//  2. Resolution: a name maps to the first plugin, in directory order, that
//     serves it, else to the in-process backend of Config.Backends that
//     serves it. A name nobody serves is decided by the triton rules, as in
//     the reference; Answer.Handler is then "triton". A name sglang
//     registers that no plugin serves falls back with ReasonPluginMissing,
//     the name of a broken binary with ReasonPluginBroken, and a name a
//     plugin served before a reload with ReasonPluginMissing. Under
//     Config.Strict there is no silent fallback: every such request is
//     refused, a name never seen with ReasonUnknownBackend; only "triton"
//     is answered in process. The default route's backend is asked for
//     "triton", the one name core.Triton serves. Staged binaries (attnplug-backend-fa3.new,
//     wire.StagingSuffixes) are skipped.
//  3. Start: a plugin process starts when the first request for one of its
//     names arrives (or at Registry.Start), and keeps running. With
//     Config.Host set, a plugin whose hardware the host lacks is never
//     started, and each plugin started may refuse the host.
//  4. Answers: each handler declares the quantities its rules read, with
//     the thresholds they compare them to (core.Reads); the registry keys
//     the plugin's answers by them (core.KeyPlan), so most requests never
//     reach the plugin. The cache answers only while the plugin serves:
//     from a failure until the plugin answers again, every request of its
//     names falls back, cached or not, and so do the cached lines of a
//     batch whose call to it failed.
//  5. Supervision: a call that fails (crash, deadline, protocol violation)
//     falls back to the triton rules with a named Reason, logged as a
//     warning; the plugin is restarted with exponential backoff, and a
//     plugin that keeps failing is quarantined, until a reload gives it a
//     fresh start. Only the plugin's own faults count: a request it
//     refuses is its answer, and one the host judges invalid or too large
//     (a plan past core's bounds) never reaches it.
//  6. Device code: a plugin whose description declares it hands kernel
//     modules (Registry.KernelModules, once per device, hash-checked and
//     pinned by the lock file) and launch plans (Registry.PlanKernel,
//     asked only where the handler's catalog kernel covers the request,
//     core.Kernel.Covers; checked by launch.Check and kept by request);
//     every refusal is an error wrapping core.ErrNoPlan, and the caller
//     runs the kernel another way (device.go).
//  7. Reload: Registry.Reload swaps every plugin whose binary changed,
//     after a self-test, without failing a request in flight, and gives
//     the plugins it keeps a fresh start. A name a plugin serves stays
//     with it unless a plugin of another family that comes first passes
//     the same self-test for it. A reload while a plugin
//     directory that held plugins is gone, open to other users or empty
//     is refused (ReloadRefusal): the plugins keep serving.
//  8. End: Close kills every process the registry started; plugin
//     processes also die with the host (a parent-death signal and a pipe
//     that reads EOF when the host is gone), so none outlives it.
//
// A Registry is safe for concurrent use.
package registry
