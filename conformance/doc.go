// Package conformance is the suite a backend plugin must pass before an
// attnplug host can rely on it: the checks that `attnplug conform
// PLUGIN_BINARY` runs, and that a vendor runs in CI.
//
// The suite has two layers, as containerd's snapshotter suite has. The
// backend layer (BackendCheckNames) asks any core.Backend what a host asks
// it, and needs no process: RunBackend runs it in process, on a rules
// package, the triton rules or a Go host's own backend, with every call in
// a goroutine of its own under its deadline, so that a backend that hangs
// or panics fails a check instead of the run. The binary layer (run by
// hand, handshake, protocol version, stdout, process) is what only a
// plugin binary can do wrong: Run starts the binary with the host's own
// launcher (wire.Launch: go-plugin, gRPC only, the attnplug handshake and
// protocol versions, the host's message-size limit, the parent-death pipe,
// automatic mutual TLS), with wire.EnvCheckRequests so that the SDK's
// server checks every request, keeps that one process for the whole suite,
// and runs the backend layer over its connection. Where a check means
// something else in process it says so in core's terms: an invalid
// request is refused with core.ErrInvalidRequest over the wire (the SDK's
// server validates it) but may be answered in process (a host validates
// requests before an in-process backend sees them); the suite compares
// requests before and after each call itself in process.
//
// Each check is a value with its own name (check: the name, whether it
// asks the backend, its function), listed by its layer in order
// (backendChecks, binary.checks); a check that asks the backend is
// skipped, saying why, once the backend has stopped answering. The
// description check applies the registry's own rule
// (registry/backend.Problems) and adds what only conform asks.
//
// Each name is asked a fixed set of requests (GenerateRequests) and random
// probes: random requests over core's whole vocabulary of quantities, and
// random base requests varied one quantity at a time, around every
// declared threshold and along a ladder over the quantity's range. Everything random comes from
// Options.Seed, which the report gives (Report.Seed). The checks, in Run's
// order:
//
//   - run-by-hand: started without the host's magic cookie, the binary exits
//     with a non-zero status within Options.StartTimeout, writes nothing to
//     stdout and leaves nothing running (its process group is killed
//     either way);
//   - handshake: go-plugin's handshake succeeds and a protocol version this
//     host speaks is negotiated;
//   - protocol-version: the description's protocol version is the
//     negotiated one;
//   - description: the description is well-formed (names, version, methods,
//     aliases, reads a host can cache by) and stable from one call to the
//     next;
//   - kernel-catalog: kernels named, for declared methods, with dtypes that
//     exist and positive dimensions; every hardware entry names a platform;
//   - unknown-name: a name the plugin does not serve is refused as unknown;
//   - coverage: every declared name answers every fixed request and probe;
//   - catalog: every method answered is among the name's declared Methods;
//   - determinism: the same request gets the same answer again, in rounds
//     spread over time;
//   - batch: DispatchBatch agrees with Dispatch (skipped in process for a
//     backend that is no core.BatchBackend);
//   - reads: two requests with the same key under the declared Reads get
//     the same answer, since a host caches answers by that key (a request
//     where a read condition holds is keyed by that condition's reads, and
//     probes are made to meet each condition); when they do not, the suite
//     walks from one to the other and bisects to the quantity and
//     threshold the rules read, naming the condition they break;
//   - bad-requests: invalid requests are refused with an invalid-request
//     error (InvalidArgument over gRPC), one at a time and inside a batch,
//     and the plugin answers afterwards; in process they may be answered,
//     but a refusal must be an invalid-request error;
//   - mutation: no call changed its request;
//   - latency: the rules' time in a Dispatch call, the median call less
//     the median round trip (calls for a name the plugin does not serve,
//     measured in the same run), is within the latency budget (default
//     1ms); the p99 within MaxP99 when set; a plugin over the budget is
//     asked samples only, so that the suite stays fast;
//   - kernels: kernel outputs against the CPU reference, when kernels are
//     declared (skipped for a plugin without a kernel catalog, and in
//     process for a backend that is no core.KernelRunner: a host runs its
//     kernels itself); a catalog may cover a subset of the declared
//     methods, whose others the host runs with its reference kernels;
//   - device-code: when the plugin declares device code, its kernel modules
//     for an example device (Options.Device, default sm_90) and its launch
//     plans for generated batches of every catalog method with a device
//     layout (MLA decode and target verify on page sizes 1 and 64; MHA,
//     MHA_ONE_SHOT and MHA_CHUNKED_KV prefills; 16 and 128 heads, ragged
//     lengths up to 16k, with and without CUDA graphs) pass the checks the
//     host applies before it trusts them
//     (registry.CheckModules, registry.CheckPlan: hashes, PTX entry
//     signatures against the declared Entries, known entries, grids and
//     shared memory within the device's limits, every tensor bound, shapes,
//     schedule items inside their requests, a plan made for its request:
//     kv_scale of an FP8 cache and topk_indices of a sparse layer bound),
//     each plan lets its kernels know every request's keys and query rows
//     (seq_lens, qo_indptr or metadata), every MLA planner's probes
//     (planProbes: FP8 caches, sparse and dense layers, unusual page
//     sizes, heads, head dims and batches, whatever its catalog lists) get
//     no plan or a plan that passes the same checks, and impossible or
//     malformed plan requests get no plan;
//     not checked, with the plugin's reason, when it has no device code for
//     the example device;
//   - device-run: the plans that passed device-code, run on a GPU
//     (Options.Launch: attnplug conform on a machine with one) on generated
//     tensors, outputs poisoned first, against the float64 reference; a
//     batch whose outputs are wrong fails, named. Without a GPU it is
//     NotRun, saying why (Options.NoLaunch), which is no failure; it is
//     not checked where device-code is not. Report.DeviceCode counts the
//     plans checked and run, and names the GPU or why none ran;
//   - stdout: nothing was written to stdout after the handshake;
//   - process: one process, never restarted, served the whole suite.
//
// Every call has a deadline (Options.CallTimeout), so a plugin that hangs
// fails its check quickly; once a plugin has stopped answering or exited,
// the checks that need it are skipped and the report says why.
//
// The Report lists each check with pass, fail, skip, not checked or not
// run and a detail; it prints as text (WriteText) or JSON (its fields
// carry JSON tags).
package conformance
