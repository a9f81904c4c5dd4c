package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/attnplug/attnplug/wire"
)

// Options configures Run. Only Binary is required.
type Options struct {
	// Binary is the path of the plugin binary to check.
	Binary string
	// Env holds extra "KEY=value" environment variables for the plugin
	// process, over the caller's own environment.
	Env []string
	// CallTimeout is the deadline of each call to the plugin. Default: 2s.
	CallTimeout time.Duration
	// StartTimeout bounds the start and handshake, and the run by hand.
	// Default: 10s.
	StartTimeout time.Duration
	// MaxRequests, when positive, caps the generated requests asked of each
	// name to a fixed sample of that many.
	MaxRequests int
	// MaxP99, when positive, fails the latency check when the 99th
	// percentile of a Dispatch call is above it.
	MaxP99 time.Duration
	// Device is the device the device-code check asks a plugin's modules
	// and plans for. Default: ExampleDevice(DefaultArch).
	Device *core.DeviceInfo
	// LatencyBudget bounds the time the rules take in a Dispatch call: the
	// median call less the median round trip, measured in the same run by
	// calls for a name the plugin does not serve, so that a loaded machine
	// does not count against the plugin. The latency check fails above it,
	// and a plugin found over it after its first calls is asked a sample of
	// each name's requests only, so that the suite stays fast. A correct
	// plugin's rules take well under a tenth of it. Default:
	// DefaultLatencyBudget; negative: no budget.
	LatencyBudget time.Duration
	// Seed seeds the random probes of every name. Zero picks a seed, which
	// the report gives (Report.Seed): a run with that seed asks the same
	// requests again.
	Seed uint64
	// Probes is how many random base requests of each name the suite
	// varies one quantity at a time. Default 24; negative: none (the fixed
	// requests and the random ones are still asked).
	Probes int
	// Launch, when set (a host with a GPU: attnplug conform sets it where
	// one is present), runs the device code the device-code check checked:
	// for a plan request, it allocates and fills the request's tensors on
	// the GPU, asks kp for its modules (those the check passed) and for
	// the plan of the batch it allocated (checked as the check checks every
	// plan), poisons the outputs, launches the plan, and compares the
	// outputs with a float64 reference within the catalog's tolerance
	// (devicecheck.Env.RunPlan). It returns ErrLaunchNotCovered for a
	// request it has no reference for; any other error fails the check,
	// naming the batch. Nil: plans are checked, not run, and the
	// device-run check is NotRun.
	Launch LaunchFunc
	// NoLaunch says why Launch is nil, for the report: the device-run
	// check's detail and Report.DeviceCode.NotRun ("no GPU here", say).
	// Default: "no GPU to run them on (Options.Launch is not set)".
	NoLaunch string
}

// LaunchFunc runs the plans of a plan request on a GPU (Options.Launch):
// kp is the plugin under test as a host sees it, its modules and plans
// checked by the host's checks.
type LaunchFunc func(ctx context.Context, kp core.KernelPlanner, req *core.PlanRequest) error

// ErrLaunchNotCovered is what a LaunchFunc returns for a request it has no
// reference for (a method or layout it does not cover).
var ErrLaunchNotCovered = errors.New("no reference for this request")

// DefaultLatencyBudget is the default Options.LatencyBudget.
const DefaultLatencyBudget = time.Millisecond

func (o *Options) setDefaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.Device == nil {
		d, _ := ExampleDevice(DefaultArch)
		o.Device = &d
	}
	if o.LatencyBudget == 0 {
		o.LatencyBudget = DefaultLatencyBudget
	}
	if o.Probes == 0 {
		o.Probes = defaultProbes
	}
	for o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
}

// batchChunk is how many requests one DispatchBatch call of the batch check
// carries.
const batchChunk = 512

// Run checks the plugin binary opts.Binary and returns the report: the
// binary layer (run by hand, handshake, protocol version), then the
// backend layer (RunBackend's checks) over the connection, then the
// process checks (stdout, process). The binary is started with the host's
// launcher (wire.Launch), and one plugin process serves the whole suite.
// The error is for a run that could not be made at all (no binary, ctx
// ended); a plugin that fails a check is a Report with Passed false and a
// nil error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.setDefaults()
	if opts.Binary == "" {
		return nil, errors.New("conformance: no plugin binary given")
	}
	st, err := os.Stat(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("conformance: %s is not a regular file", opts.Binary)
	}
	s := &suite{opts: opts, report: &Report{Binary: opts.Binary, Seed: opts.Seed}}
	s.bin = &binary{s: s, stdout: newTail()}
	defer s.bin.close()
	return s.finish(ctx, time.Now(), s.bin.run)
}

// RunBackend runs the backend layer of the suite on b in this process:
// every check that needs no process (BackendCheckNames), with the same
// requests, probes and report as Run. It is how a Go host checks a backend
// it links in (core.Triton's rules, a plugin's rules package, its own),
// and what Run runs over a plugin's connection. Options.Binary, Env and
// StartTimeout are not used.
//
// Each call runs with its deadline in a goroutine of its own, so that a
// backend that does not return fails its check instead of hanging the
// suite; a panic is caught and fails the check that made the call, and
// the suite stops asking (a panic ends a host). The suite compares every
// request before and after each call (the mutation check), as the SDK's
// server does for a plugin. Invalid requests (bad-requests) never reach
// an in-process backend in a host, which validates them first: in process
// the check asks that the backend survives them, and that a refusal is an
// invalid-request error.
func RunBackend(ctx context.Context, b core.Backend, opts Options) (*Report, error) {
	opts.setDefaults()
	if b == nil {
		return nil, errors.New("conformance: no backend given")
	}
	s := &suite{opts: opts, report: &Report{Seed: opts.Seed}}
	s.connectLocal(b)
	return s.finish(ctx, time.Now(), func(ctx context.Context) {
		if !s.runBackend(ctx) {
			s.skipRest(BackendCheckNames(), CheckDescription, "no usable description")
		}
	})
}

// finish runs the layers of run and completes the report.
func (s *suite) finish(ctx context.Context, start time.Time, run func(context.Context)) (*Report, error) {
	run(ctx)
	s.report.Duration = time.Since(start)
	s.report.Passed = len(s.report.Failed()) == 0
	if err := ctx.Err(); err != nil {
		return s.report, fmt.Errorf("conformance: %w", err)
	}
	return s.report, nil
}

// suite is one run: the options, the report, the backend the checks ask,
// what has been learnt of it, and the binary layer when there is one.
type suite struct {
	opts   Options
	report *Report
	bin    *binary // the binary layer; nil in process

	// backend is what the checks ask: the plugin's connection, or the
	// in-process backend behind local's guard. batcher, runner and planner
	// are its batch, kernel and device-code sides, nil when it has none.
	backend core.Backend
	batcher core.BatchBackend
	runner  core.KernelRunner
	planner core.KernelPlanner

	desc      *core.Description
	runs      []planRun // the plans the device-code check passed, for the device-run check
	dead      error     // set once the backend cannot answer any more
	timeout   int       // calls in a row that passed their deadline
	cov       coverage  // what the coverage check asked and was answered
	mutations []string  // calls whose request the rules changed
}

// coverage is what the coverage check asked and was answered, which the
// later checks of the backend layer read.
type coverage struct {
	// answers[i][j] is the coverage answer of name i to request j, which
	// came from origins[i][j]; plans[i] keys name i's requests (nil when
	// its reads cannot be cached).
	names    []core.HandlerInfo
	plans    []*core.KeyPlan
	requests [][]core.Request
	origins  [][]origin
	answers  [][]answer
	latency  []time.Duration
	baseline []time.Duration // calls for an unserved name: the round trip
	started  time.Time       // when coverage began
	slow     bool            // the backend is over its latency budget: ask samples only
}

// check is one check of the suite, a value with its own name.
type check struct {
	// name is the check's name, one of CheckNames.
	name string
	// asks says the check asks the backend: once the backend has stopped
	// answering it is skipped, saying why. A check that does not ask
	// reads what earlier checks learnt, or says itself what it lacks.
	asks bool
	// listedBefore, when set, is the check the report lists this one
	// before, though it runs after it (it reads what that one learnt).
	listedBefore string
	run          func(context.Context, *Check)
}

// backendChecks are the checks of the backend layer (RunBackend), in
// order: what a host asks any core.Backend, in process or over a
// plugin's connection.
func (s *suite) backendChecks() []check {
	return []check{
		{name: CheckDescription, asks: true, run: s.description},
		{name: CheckKernelCatalog, run: s.kernelCatalog},
		{name: CheckUnknownName, asks: true, run: s.unknownName},
		{name: CheckCoverage, asks: true, run: s.coverage},
		{name: CheckCatalog, run: s.catalog},
		{name: CheckDeterminism, asks: true, run: s.determinism},
		{name: CheckBatch, asks: true, run: s.batch},
		{name: CheckReads, run: s.reads},
		{name: CheckBadRequests, asks: true, run: s.badRequests},
		{name: CheckMutation, run: s.mutation},
		{name: CheckLatency, run: s.latencyCheck},
		{name: CheckKernels, run: s.kernels},
		{name: CheckDeviceCode, run: s.deviceCode},
		{name: CheckDeviceRun, run: s.deviceRun},
	}
}

// runBackend is the backend layer, in order. It reports false, after the
// description check, when the description is not usable: the caller
// skips the rest.
func (s *suite) runBackend(ctx context.Context) bool {
	for _, ch := range s.backendChecks() {
		passed := s.run(ctx, ch)
		if ch.name == CheckDescription && (!passed || s.desc == nil || len(s.desc.Handlers) == 0) {
			return false
		}
	}
	return true
}

// run runs ch, unless it asks a backend that is already dead, and records
// it; it reports whether the check did not fail.
func (s *suite) run(ctx context.Context, ch check) bool {
	c := Check{Name: ch.name, Status: Pass}
	start := time.Now()
	if ch.asks && s.dead != nil {
		c.Status, c.Detail = Skip, "not run: "+s.dead.Error()
	} else {
		ch.run(ctx, &c)
	}
	c.Duration = time.Since(start)
	if c.Status == Fail && c.Detail == "" {
		c.Detail = "failed"
	}
	s.report.Checks = append(s.report.Checks, c)
	if ch.listedBefore != "" {
		s.reorder(ch.name, ch.listedBefore)
	}
	return c.Status != Fail
}

// connect makes the plugin's connection the backend the checks ask.
func (s *suite) connect(c *wire.Client) {
	s.backend, s.batcher, s.runner, s.planner = c, c, c, c
}

// inProcess reports whether the suite checks a backend in this process.
func (s *suite) inProcess() bool { return s.bin == nil }

type answer struct {
	method core.Method
	err    error
	at     time.Duration // since coverage began
}

// errNotAsked is the answer of a request the coverage check did not get to.
var errNotAsked = errors.New("not asked")

// answered counts the coverage answers that are methods.
func (s *suite) answered() int {
	n := 0
	for _, as := range s.cov.answers {
		for _, a := range as {
			if a.err == nil {
				n++
			}
		}
	}
	return n
}

// skipRest records every check of names after after as skipped, because
// of why.
func (s *suite) skipRest(names []string, after, why string) {
	i := slices.Index(names, after)
	for _, n := range names[i+1:] {
		if _, done := s.report.Check(n); done {
			continue
		}
		detail := "not run: " + why
		if n == CheckDeviceCode {
			detail = "no device code declared: skipped"
		}
		s.report.Checks = append(s.report.Checks, Check{Name: n, Status: Skip, Detail: detail})
	}
}

// reorder moves the check called first just before the one called before.
func (s *suite) reorder(first, before string) {
	cs := s.report.Checks
	i := slices.IndexFunc(cs, func(c Check) bool { return c.Name == first })
	j := slices.IndexFunc(cs, func(c Check) bool { return c.Name == before })
	if i < 0 || j < 0 || i < j {
		return
	}
	c := cs[i]
	cs = slices.Delete(cs, i, i+1)
	s.report.Checks = slices.Insert(cs, j, c)
}

// description asks for the description twice and checks it.
func (s *suite) description(ctx context.Context, c *Check) {
	d, err := s.describe(ctx)
	if err != nil {
		c.Status, c.Detail = Fail, "Describe failed: "+err.Error()
		return
	}
	s.desc = d
	s.report.Plugin, s.report.Version, s.report.Vendor = d.Name, d.Version, d.Vendor
	for _, h := range d.Handlers {
		s.report.Names = append(s.report.Names, h.Name)
	}
	for _, p := range backend.Problems(d) {
		c.problem("%s", p)
	}
	if family, _, ok := wire.FamilyOf(filepath.Base(s.opts.Binary)); ok && family != d.Name {
		c.problem("the binary is named for %q but the plugin calls itself %q; the host refuses it", family, d.Name)
	}
	if slices.ContainsFunc(d.Handlers, func(h core.HandlerInfo) bool { return h.Name == core.TritonName }) && !(s.inProcess() && d.Name == core.PluginCore) {
		// Only the core rules, in the host's process, serve it; a host
		// keeps the name and serves the others.
		c.problem("name %q is the in-process fallback's; the host keeps it", core.TritonName)
	}
	d2, err := s.describe(ctx)
	switch {
	case err != nil:
		c.problem("a second Describe failed: %v", err)
	case !reflect.DeepEqual(d, d2):
		c.problem("a second Describe answered differently; the host caches the description by the binary's hash")
	}
	if c.Status == Fail {
		c.Detail = "the description is not well-formed"
		return
	}
	by := ""
	if d.Vendor != "" {
		by = " by " + d.Vendor
	}
	c.Detail = fmt.Sprintf("%s %s%s serves %s: %s; stable across calls", d.Name, d.Version, by, plural(len(d.Handlers), "name"), strings.Join(s.report.Names, ", "))
}

func (s *suite) describe(ctx context.Context) (*core.Description, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	d, err := s.backend.Describe(cctx)
	s.observe(ctx, err)
	return d, err
}

// noSuchName is a backend name no plugin serves.
const noSuchName = "attnplug-conformance-no-such-name"

func (s *suite) unknownName(ctx context.Context, c *Check) {
	req := core.NewRequest(noSuchName, core.ModeDecode)
	req.Runtime.Platform = core.PlatformCUDA
	m, _, err := s.dispatch(ctx, &req)
	switch {
	case err == nil:
		c.problem("%q was answered %s; a name %s does not serve must be refused as unknown (core.ErrUnknownBackend; NotFound over gRPC)", noSuchName, m, s.subject())
	case !errors.Is(err, core.ErrUnknownBackend):
		c.problem("%q was refused with %v; want an unknown-backend error (core.ErrUnknownBackend; NotFound over gRPC)", noSuchName, err)
	}
	if c.Status == Fail {
		c.Detail = "an unserved name is not refused as unknown"
		return
	}
	c.Detail = fmt.Sprintf("%q refused as unknown (core.ErrUnknownBackend; NotFound over gRPC)", noSuchName)
}

// catalog checks every coverage answer against the declared methods.
func (s *suite) catalog(_ context.Context, c *Check) {
	if s.answered() == 0 {
		c.Status, c.Detail = Skip, "not run: no answers"
		return
	}
	n := 0
	var unused []string
	for i, h := range s.cov.names {
		seen := map[core.Method]bool{}
		reported := map[core.Method]bool{}
		for j, a := range s.cov.answers[i] {
			if a.err != nil || a.method == 0 {
				continue
			}
			n++
			seen[a.method] = true
			if !slices.Contains(h.Methods, a.method) && !reported[a.method] {
				reported[a.method] = true
				c.problem("%s answered %s, which it does not declare (declared: %s), to %s", h.Name, a.method, methodList(h.Methods), describe(&s.cov.requests[i][j]))
			}
		}
		for _, m := range h.Methods {
			if !seen[m] {
				unused = append(unused, h.Name+":"+m.String())
			}
		}
	}
	if c.Status == Fail {
		c.Detail = "answers outside the declared methods (the host treats them as protocol violations)"
		return
	}
	c.Detail = fmt.Sprintf("all %d answers among the declared methods", n)
	if len(unused) > 0 && s.opts.MaxRequests <= 0 {
		c.Detail += "; declared but never answered: " + strings.Join(unused, ", ")
	}
}

// batch asks every request again through DispatchBatch.
func (s *suite) batch(ctx context.Context, c *Check) {
	switch {
	case s.answered() == 0:
		c.Status, c.Detail = Skip, "not run: no answers"
		return
	case s.batcher == nil:
		c.Status, c.Detail = Skip, "not a core.BatchBackend: a host asks it one request at a time"
		return
	}
	n, calls := 0, 0
	for i, h := range s.cov.names {
		reqs := s.cov.requests[i]
		for lo := 0; lo < len(reqs) && s.dead == nil; lo += batchChunk {
			hi := min(lo+batchChunk, len(reqs))
			out := make([]core.Result, hi-lo)
			cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
			err := s.batcher.DispatchBatch(cctx, reqs[lo:hi], out)
			cancel()
			s.observe(ctx, err)
			calls++
			if err != nil {
				c.problem("%s: DispatchBatch of %d requests failed: %v", h.Name, hi-lo, err)
				continue
			}
			for k, r := range out {
				first := s.cov.answers[i][lo+k]
				s.noteResult(&reqs[lo+k], r.Err)
				if first.err != nil {
					continue
				}
				n++
				switch {
				case r.Err != nil:
					c.problem("%s: %s: Dispatch answered %s, DispatchBatch failed: %v", h.Name, describe(&reqs[lo+k]), first.method, r.Err)
				case r.Method != first.method:
					c.problem("%s: %s: Dispatch answered %s, DispatchBatch %s", h.Name, describe(&reqs[lo+k]), first.method, r.Method)
				}
			}
		}
	}
	if s.dead != nil {
		c.problem("stopped: %v", s.dead)
	}
	if c.Status == Fail {
		c.Detail = "DispatchBatch disagrees with Dispatch"
		return
	}
	c.Detail = fmt.Sprintf("%d requests in %s: same answers as Dispatch", n, plural(calls, "DispatchBatch call"))
}

// badRequest is an invalid request the plugin must refuse.
type badRequest struct {
	what string
	req  core.Request
}

func invalidRequests(name string) []badRequest {
	base := func() core.Request {
		r := core.NewRequest(name, core.ModeExtend)
		r.Runtime.Platform = core.PlatformCUDA
		r.Batch.ExtendPrefixLens = []int64{0, 16}
		r.Batch.SeqLens = []int64{32, 64}
		r.Batch.MaxChunkCapacity = 1024
		return r
	}
	var out []badRequest
	add := func(what string, f func(*core.Request)) {
		r := base()
		f(&r)
		out = append(out, badRequest{what, r})
	}
	add("a negative prefix length", func(r *core.Request) { r.Batch.ExtendPrefixLens = []int64{-1, 16} })
	add("a negative sequence length", func(r *core.Request) { r.Batch.SeqLens = []int64{32, -64} })
	add("an unknown forward mode (99)", func(r *core.Request) { r.Batch.Mode = 99 })
	add("no forward mode (0)", func(r *core.Request) { r.Batch.Mode = 0 })
	add("an unknown platform (42)", func(r *core.Request) { r.Runtime.Platform = 42 })
	add("a prefix longer than its sequence", func(r *core.Request) { r.Batch.ExtendPrefixLens = []int64{0, 65} })
	add("length arrays of different lengths", func(r *core.Request) { r.Batch.SeqLens = []int64{32} })
	add("a length past the limit", func(r *core.Request) { r.Batch.SeqLens = []int64{32, core.MaxLength + 1} })
	return out
}

// badRequests sends invalid requests, alone and inside a batch, and checks
// that they are refused with an invalid-request error (core.ErrInvalidRequest:
// InvalidArgument over gRPC) and that the backend answers afterwards. A
// plugin's server validates every request, so over the wire each must be
// refused; a host validates requests before an in-process backend sees
// them, so in process an answer is allowed, but not a panic, another kind
// of error, or a changed answer to the valid requests after.
func (s *suite) badRequests(ctx context.Context, c *Check) {
	name := s.desc.Handlers[0].Name
	good := core.NewRequest(name, core.ModeDecode)
	good.Runtime.Platform = core.PlatformCUDA
	want, _, err := s.dispatch(ctx, &good)
	if err != nil {
		c.problem("%s: a valid request failed before any bad one was sent: %v", name, err)
		c.Detail = s.subject() + " does not answer"
		return
	}
	mustRefuse := !s.inProcess()
	bad := invalidRequests(name)
	refused := 0
	for _, b := range bad {
		if s.dead != nil {
			break
		}
		m, _, err := s.dispatch(ctx, &b.req)
		switch {
		case err == nil && mustRefuse:
			c.problem("%s: a request with %s was answered %s; want an invalid-request error (InvalidArgument)", name, b.what, m)
		case err != nil && !errors.Is(err, core.ErrInvalidRequest):
			c.problem("%s: a request with %s was refused with %v; want an invalid-request error (InvalidArgument)", name, b.what, err)
		case err != nil:
			refused++
		}
		if s.dead != nil {
			c.problem("%s died on a request with %s: %v", s.subject(), b.what, s.dead)
			break
		}
		if m, _, err := s.dispatch(ctx, &good); err != nil || m != want {
			c.problem("%s: after a request with %s, a valid request got %s, %v (want %s)", name, b.what, m, err, want)
		}
	}
	if s.dead == nil && s.batcher != nil {
		reqs := []core.Request{good, bad[0].req, good, bad[2].req, good}
		out := make([]core.Result, len(reqs))
		cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		err := s.batcher.DispatchBatch(cctx, reqs, out)
		cancel()
		s.observe(ctx, err)
		if err != nil {
			c.problem("%s: a batch holding invalid requests failed as a whole: %v; want a per-request error", name, err)
		} else {
			for i, r := range out {
				isBad := i == 1 || i == 3
				switch {
				case isBad && r.Err == nil && mustRefuse:
					c.problem("%s: batch entry %d (invalid) got %s; want an invalid-request error", name, i, r.Method)
				case isBad && r.Err != nil && !errors.Is(r.Err, core.ErrInvalidRequest):
					c.problem("%s: batch entry %d (invalid) got %v; want an invalid-request error", name, i, r.Err)
				case !isBad && (r.Err != nil || r.Method != want):
					c.problem("%s: batch entry %d (valid) got %s, %v; want %s", name, i, r.Method, r.Err, want)
				}
			}
		}
	}
	if s.dead != nil {
		c.problem("stopped: %v", s.dead)
	}
	if c.Status == Fail {
		c.Detail = "bad requests are not refused cleanly"
		return
	}
	if mustRefuse {
		c.Detail = fmt.Sprintf("%d invalid requests refused with InvalidArgument, alone and in a batch; the plugin answered after each", len(bad))
		return
	}
	c.Detail = fmt.Sprintf("%d invalid requests (a host validates them away before an in-process backend sees them): %d refused as invalid, the others answered, no panic; the backend answered the same after each", len(bad), refused)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// dispatch asks one request with the call deadline.
func (s *suite) dispatch(ctx context.Context, req *core.Request) (core.Method, time.Duration, error) {
	if s.dead != nil {
		return 0, 0, s.dead
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	start := time.Now()
	m, err := s.backend.Dispatch(cctx, req)
	d := time.Since(start)
	cancel()
	s.observe(ctx, err)
	s.noteResult(req, err)
	return m, d, err
}

// observe notes the outcome of a call: a process that exited, a backend
// that panicked, or calls that keep passing their deadline, end the
// backend's part of the suite.
func (s *suite) observe(ctx context.Context, err error) {
	if err == nil {
		s.timeout = 0
		return
	}
	if ctx.Err() != nil || s.dead != nil {
		return
	}
	if errors.Is(err, errPanicked) {
		s.dead = err
		return
	}
	if s.bin != nil && s.bin.exited(err) {
		s.dead = errors.New("the plugin process exited" + s.bin.exitNote())
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		s.timeout++
		if s.timeout >= 2 {
			s.dead = fmt.Errorf("%s stopped answering: %d calls in a row passed the %s deadline", s.subject(), s.timeout, s.opts.CallTimeout)
		}
		return
	}
	s.timeout = 0
}

// subject is what the suite checks, in a sentence: "the plugin" or "the
// backend".
func (s *suite) subject() string {
	if s.inProcess() {
		return "the backend"
	}
	return "the plugin"
}

func methodList(ms []core.Method) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, ", ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
