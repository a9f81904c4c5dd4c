// Package pluginproc is the supervised process of a plugin binary: the
// part of package registry that knows plugins are processes, as Nomad's
// plugin loader keeps its external plugins' instances apart from what
// uses them. A Plugin is a backend.Backend; package registry routes names
// to it, and to the backends in its own process, through that interface
// alone. The name says what it holds: a plugin's process, found, started,
// watched, restarted and ended.
//
// Where to start: Load discovers the binaries of the plugin directories
// and describes each (Found); Plugin.Call runs one call on a plugin's
// process, starting it when needed, and returns a backend.Outcome;
// Plugin.Stop and Plugin.Retire end it.
//
// The life of a plugin:
//
//  1. Discovery (discover.go): every executable file named
//     attnplug-backend-<name> in the plugin directories is a candidate,
//     unless other users can write it or its directory, or a lock file
//     (lock.go) does not pin its SHA-256. Staged binaries
//     (attnplug-backend-fa3.new, wire.StagingSuffixes) are skipped.
//  2. Description (load.go, desccache.go): what a binary serves (the
//     names, the facts they read, the hardware they need) comes from a
//     cache keyed by its SHA-256, or from starting it once and asking (and
//     running the kernel self-check, selfcheck.go, whose pass is cached
//     too). The hash is cached by the file's identity (binary.go), so a
//     start reads no binary it hashed before; every start runs the
//     descriptor that was hashed.
//  3. Start (process.go, spawn.go): a process starts when the first call
//     needs it (or at Plugin.Start), through wire.Launch, with its socket
//     in a private directory (sockets.go), its log lines named after it
//     (pluginlog.go), its memory limited (Config.MemoryLimit: RLIMIT_DATA
//     and GOMEMLIMIT, memlimit_linux.go), and, with a host set in Config,
//     told the host's
//     hardware, which it may refuse; a plugin whose hardware the host
//     lacks is never started.
//  4. Calls (plugin.go): Plugin.Call enters the running process, runs the
//     call under its deadline, and sorts what came of it
//     (backend.OutcomeOf); a failed call retires the process, which ends
//     once its calls in flight finish; a call whose process crashed is
//     sent once more, to the restarted process.
//  5. Supervision (process.go): a failed process restarts after a backoff
//     that doubles with every failure in a row; Config.QuarantineAfter
//     failures quarantine the plugin, until a reload lifts it
//     (Plugin.Lift); a binary changed in place is broken
//     until a reload reads it.
//  6. End: Stop kills the process at once, Retire after its calls in
//     flight; plugin processes also die with the host (a parent-death
//     signal and a pipe that reads EOF when the host is gone).
//
// A Plugin is safe for concurrent use.
package pluginproc
