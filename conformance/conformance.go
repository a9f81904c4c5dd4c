package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
	"github.com/hashicorp/go-hclog"
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
	// the GPU, asks plan for the plan of the batch it allocated, poisons
	// the outputs, launches the plan with mods loaded, and compares the
	// outputs with a float64 reference within the catalog's tolerance. It
	// returns ErrLaunchNotCovered for a request it has no reference for;
	// any other error fails the check, naming the batch. Nil: plans are
	// checked, not run.
	Launch LaunchFunc
}

// LaunchFunc runs the plans of a plan request on a GPU (Options.Launch).
type LaunchFunc func(ctx context.Context, mods []core.KernelModule, req *core.PlanRequest, plan func(*core.PlanRequest) (*core.Plan, error)) error

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
	s := &suite{opts: opts, report: &Report{Binary: opts.Binary, Seed: opts.Seed}, stdout: newTail()}
	defer s.close()
	return s.finish(ctx, time.Now(), s.runBinary)
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

// suite is one run: the backend, the plugin process when there is one,
// and what has been learnt of them.
type suite struct {
	opts   Options
	report *Report

	// backend is what the checks ask: the plugin's connection, or the
	// in-process backend behind local's guard. batcher, runner and planner
	// are its batch, kernel and device-code sides, nil when it has none.
	backend core.Backend
	batcher core.BatchBackend
	runner  core.KernelRunner
	planner core.KernelPlanner

	proc   *wire.Process // the plugin process; nil in process
	stderr *tail         // the plugin's own stderr
	log    *tail         // go-plugin's log of the process

	desc    *core.Description
	dead    error // set once the backend cannot answer any more
	timeout int   // calls in a row that passed their deadline

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

	slow      bool     // the backend is over its latency budget: ask samples only
	stdout    *tail    // what reached stdout after the handshake
	mutations []string // calls whose request the rules changed
}

// connect makes the plugin's connection the backend the checks ask.
func (s *suite) connect(c *wire.Client) {
	s.backend, s.batcher, s.runner, s.planner = c, c, c, c
}

// inProcess reports whether the suite checks a backend in this process.
func (s *suite) inProcess() bool { return s.report.Binary == "" }

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
	for _, as := range s.answers {
		for _, a := range as {
			if a.err == nil {
				n++
			}
		}
	}
	return n
}

// runBinary is the binary layer around the backend layer: run by hand and
// the handshake first, the protocol version once the description is known,
// then what the process did during the suite.
func (s *suite) runBinary(ctx context.Context) {
	s.check(CheckRunByHand, func(c *Check) { s.runByHand(ctx, c) })
	if !s.check(CheckHandshake, func(c *Check) { s.handshake(ctx, c) }) {
		s.skipRest(CheckNames(), CheckHandshake, "the handshake failed")
		return
	}
	usable := s.runBackend(ctx)
	// The protocol check reads the description; it is listed before it.
	s.check(CheckProtocolVersion, func(c *Check) { s.protocolVersion(c) })
	s.reorder(CheckProtocolVersion, CheckDescription)
	if !usable {
		s.skipRest(CheckNames(), CheckDescription, "no usable description")
		return
	}
	s.check(CheckStdout, func(c *Check) { s.stdoutCheck(c) })
	s.check(CheckProcess, func(c *Check) { s.process(c) })
}

// runBackend is the backend layer, the checks of BackendCheckNames, in
// order. It reports false, after the description check, when the
// description is not usable: the caller skips the rest.
func (s *suite) runBackend(ctx context.Context) bool {
	described := s.check(CheckDescription, func(c *Check) { s.description(ctx, c) })
	if !described || s.desc == nil || len(s.desc.Handlers) == 0 {
		return false
	}
	s.check(CheckKernelCatalog, func(c *Check) { s.kernelCatalog(c) })
	s.check(CheckUnknownName, func(c *Check) { s.unknownName(ctx, c) })
	s.check(CheckCoverage, func(c *Check) { s.coverage(ctx, c) })
	s.check(CheckCatalog, func(c *Check) { s.catalog(c) })
	s.check(CheckDeterminism, func(c *Check) { s.determinism(ctx, c) })
	s.check(CheckBatch, func(c *Check) { s.batch(ctx, c) })
	s.check(CheckReads, func(c *Check) { s.reads(ctx, c) })
	s.check(CheckBadRequests, func(c *Check) { s.badRequests(ctx, c) })
	s.check(CheckMutation, func(c *Check) { s.mutation(c) })
	s.check(CheckLatency, func(c *Check) { s.latencyCheck(c) })
	s.check(CheckKernels, func(c *Check) { s.kernels(ctx, c) })
	s.check(CheckDeviceCode, func(c *Check) { s.deviceCode(ctx, c) })
	return true
}

// check runs f as the check called name, unless the plugin is already
// dead, and records it; it reports whether the check did not fail.
func (s *suite) check(name string, f func(*Check)) bool {
	c := Check{Name: name, Status: Pass}
	start := time.Now()
	needsPlugin := name != CheckRunByHand && name != CheckKernels && name != CheckDeviceCode && name != CheckProcess &&
		name != CheckCatalog && name != CheckReads && name != CheckLatency && name != CheckProtocolVersion &&
		name != CheckKernelCatalog && name != CheckMutation && name != CheckStdout
	if needsPlugin && s.dead != nil {
		c.Status, c.Detail = Skip, "not run: "+s.dead.Error()
	} else {
		f(&c)
	}
	c.Duration = time.Since(start)
	if c.Status == Fail && c.Detail == "" {
		c.Detail = "failed"
	}
	s.report.Checks = append(s.report.Checks, c)
	return c.Status != Fail
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

func (s *suite) close() {
	if s.proc != nil {
		s.proc.Kill()
	}
}

// environ is the caller's environment without the magic cookie, plus
// opts.Env.
func (s *suite) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, wire.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	return append(env, s.opts.Env...)
}

// runByHand starts the binary without the cookie, as a person would.
func (s *suite) runByHand(ctx context.Context, c *Check) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.opts.Binary)
	cmd.Env = s.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		c.problem("did not exit within %s (it must print what it is and exit)", s.opts.StartTimeout)
	case err == nil:
		c.problem("exited with status 0; it must exit non-zero when the host did not start it")
	case !errors.As(err, &ee):
		c.problem("could not run: %v", err)
	}
	if stdout.Len() > 0 {
		c.problem("wrote %d bytes to stdout (only go-plugin's handshake line may ever go there): %q", stdout.Len(), firstLine(stdout.String()))
	}
	if c.Status == Fail {
		c.Detail = "the binary misbehaves when run by hand"
		return
	}
	c.Detail = fmt.Sprintf("exit status %d, nothing on stdout", ee.ExitCode())
	if line := firstLine(stderr.String()); line != "" {
		c.Detail += "; stderr: " + line
	}
}

// handshake starts the plugin with the host's launcher.
func (s *suite) handshake(ctx context.Context, c *Check) {
	s.stderr, s.log = newTail(), newTail()
	proc, err := wire.Launch(ctx, wire.LaunchConfig{
		Path: s.opts.Binary,
		Env:  append(s.environ(), "ATTNPLUG_PLUGIN_LOG_LEVEL=warn", wire.EnvCheckRequests+"=1"),
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: "plugin", Level: hclog.Debug, Output: s.log,
		}),
		StartTimeout: s.opts.StartTimeout,
		Stdout:       s.stdout,
		Stderr:       s.stderr,
	})
	switch {
	case err != nil && ctx.Err() != nil:
		c.problem("interrupted: %v", ctx.Err())
		return
	case err != nil:
		c.Detail = handshakeError(err)
		c.Status = Fail
		if text := oneLine(s.stderr.String()); text != "" {
			c.problem("plugin stderr: %s", text)
		}
		return
	}
	s.proc = proc
	s.connect(proc.Client())
	s.report.PID = proc.PID()
	v := proc.ProtocolVersion()
	s.report.ProtocolVersion = v
	c.Detail = fmt.Sprintf("go-plugin handshake over gRPC with mutual TLS; protocol version %d negotiated (host speaks %s)", v, hostVersions())
}

var pluginVersionRE = regexp.MustCompile(`Plugin version: (\d+)`)

// handshakeError explains a failed start, naming both protocol versions
// when they do not match.
func handshakeError(err error) string {
	msg := err.Error()
	if m := pluginVersionRE.FindStringSubmatch(msg); m != nil && strings.Contains(msg, "incompatible API version") {
		return fmt.Sprintf("protocol version mismatch: the plugin speaks protocol version %s, this host speaks %s (go-plugin: %s)", m[1], hostVersions(), firstLine(msg))
	}
	return "go-plugin could not start the plugin: " + oneLine(msg)
}

// oneLine joins the non-empty lines of s with spaces, cut to 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// hostVersions lists the protocol versions this host speaks.
func hostVersions() string {
	var vs []int
	for v := range wire.VersionedPlugins(nil) {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

func (s *suite) protocolVersion(c *Check) {
	v := s.proc.ProtocolVersion()
	if _, ok := wire.VersionedPlugins(nil)[v]; !ok {
		c.problem("negotiated protocol version %d, which this host does not speak (%s)", v, hostVersions())
	}
	if s.desc == nil {
		c.Status, c.Detail = Skip, "not run: no description"
		return
	}
	if s.desc.ProtocolVersion != v {
		c.problem("the description says protocol version %d, but version %d was negotiated", s.desc.ProtocolVersion, v)
	}
	if c.Status == Fail {
		c.Detail = "protocol versions disagree"
		return
	}
	c.Detail = fmt.Sprintf("handshake and description agree on protocol version %d", v)
}

var semverRE = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

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
	switch {
	case d.Name == "":
		c.problem("the plugin has no name")
	case !wire.ValidFamily(d.Name):
		c.problem("name %q: want letters, digits, '_' or '-', starting with a letter or digit", d.Name)
	}
	if family, _, ok := wire.FamilyOf(filepath.Base(s.opts.Binary)); ok && family != d.Name {
		c.problem("the binary is named for %q but the plugin calls itself %q; the host refuses it", family, d.Name)
	}
	if !semverRE.MatchString(d.Version) {
		c.problem("version %q is not a semantic version (want MAJOR.MINOR.PATCH)", d.Version)
	}
	if len(d.Handlers) == 0 {
		c.problem("the plugin serves no names")
	}
	seen := map[string]bool{}
	for _, h := range d.Handlers {
		seen[h.Name] = true
	}
	dup := map[string]bool{}
	for _, h := range d.Handlers {
		switch {
		case h.Name == "":
			c.problem("a name is empty")
			continue
		case len(h.Name) > core.MaxBackendNameLen:
			c.problem("name %q is longer than %d bytes", h.Name[:32]+"...", core.MaxBackendNameLen)
		case strings.ContainsFunc(h.Name, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			c.problem("name %q holds a space or control character", h.Name)
		case h.Name == core.TritonName && !(s.inProcess() && d.Name == core.PluginCore):
			// Only the core rules, in the host's process, serve it.
			c.problem("name %q is the in-process fallback's; the host keeps it", h.Name)
		}
		if dup[h.Name] {
			c.problem("name %q is declared twice", h.Name)
		}
		dup[h.Name] = true
		if len(h.Methods) == 0 {
			c.problem("%s declares no methods; the host refuses it", h.Name)
		}
		ms := map[core.Method]bool{}
		for _, m := range h.Methods {
			if !m.Valid() {
				c.problem("%s declares %s, not a method", h.Name, m)
			}
			if ms[m] {
				c.problem("%s declares %s twice", h.Name, m)
			}
			ms[m] = true
		}
		if h.AliasOf != "" {
			switch {
			case h.AliasOf == h.Name:
				c.problem("%s is declared an alias of itself", h.Name)
			case !seen[h.AliasOf]:
				c.problem("%s is an alias of %q, which the plugin does not serve", h.Name, h.AliasOf)
			}
		}
		if err := h.Reads.Validate(); err != nil {
			c.problem("%s: the declared reads are not cacheable: %v", h.Name, err)
		}
		for _, v := range append(slices.Clone(h.Reads.PrefixSumAtLeast), h.Reads.SeqSumAtMost...) {
			if v < 0 || v > core.MaxLength {
				c.problem("%s: constant %d is outside 0..%d", h.Name, v, int64(core.MaxLength))
			}
		}
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
func (s *suite) catalog(c *Check) {
	if s.answered() == 0 {
		c.Status, c.Detail = Skip, "not run: no answers"
		return
	}
	n := 0
	var unused []string
	for i, h := range s.names {
		seen := map[core.Method]bool{}
		reported := map[core.Method]bool{}
		for j, a := range s.answers[i] {
			if a.err != nil || a.method == 0 {
				continue
			}
			n++
			seen[a.method] = true
			if !slices.Contains(h.Methods, a.method) && !reported[a.method] {
				reported[a.method] = true
				c.problem("%s answered %s, which it does not declare (declared: %s), to %s", h.Name, a.method, methodList(h.Methods), describe(&s.requests[i][j]))
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
	for i, h := range s.names {
		reqs := s.requests[i]
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
				first := s.answers[i][lo+k]
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

// process checks that the process that shook hands served the suite.
func (s *suite) process(c *Check) {
	switch {
	case s.proc == nil:
		c.Status, c.Detail = Skip, "not run: no process"
	case s.proc.Exited():
		c.Status, c.Detail = Fail, "the plugin process exited during the suite"+s.exitNote()
	case s.dead != nil:
		c.Status, c.Detail = Fail, s.dead.Error()
	default:
		c.Detail = fmt.Sprintf("pid %d served the whole suite without a restart", s.proc.PID())
	}
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
	if s.proc != nil {
		if errors.Is(err, core.ErrUnavailable) || errors.Is(err, context.Canceled) {
			// A connection that broke: give the process a moment to be reaped.
			for i := 0; i < 30 && !s.proc.Exited(); i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if s.proc.Exited() {
			s.dead = errors.New("the plugin process exited" + s.exitNote())
			return
		}
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

var exitRE = regexp.MustCompile(`plugin process exited:.*?error="?([^"\n]+)`)

// exitNote says how the process ended, from go-plugin's log, and the last
// line it wrote to stderr.
func (s *suite) exitNote() string {
	var note string
	if m := exitRE.FindStringSubmatch(s.log.String()); m != nil {
		note = " (" + m[1] + ")"
	}
	if line := s.stderr.lastLine(); line != "" {
		note += "; last stderr line: " + line
	}
	return note
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

// tail keeps the last bytes written to it, and counts them all.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	total int64
}

const tailMax = 16 << 10

func newTail() *tail { return &tail{} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = t.buf[len(t.buf)-tailMax:]
	}
	return len(p), nil
}

// Total is how many bytes were written.
func (t *tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lastLine is the last non-empty line written.
func (t *tail) lastLine() string {
	lines := strings.Split(strings.TrimSpace(t.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// plural is "1 name", "2 names".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
