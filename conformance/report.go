package conformance

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
)

// Status is the outcome of one check.
type Status string

// The outcomes of a check.
const (
	// Pass means the plugin did what the check asks.
	Pass Status = "pass"
	// Fail means it did not; Detail says how.
	Fail Status = "fail"
	// Skip means the check did not run; Detail says why.
	Skip Status = "skip"
	// NotChecked means the check could not run here, though nothing
	// failed: the device-code check without a GPU or NVRTC to build the
	// device code for, or on a plugin that declares none. Detail says
	// why. It is neither a pass nor a failure: Report.Passed holds, and
	// the summary names it.
	NotChecked Status = "not-checked"
	// NotRun means a check that runs device code on a GPU ran nothing
	// here, though the code it would run passed its other checks: the
	// device-run check without a GPU (Options.Launch nil), its Detail and
	// Report.DeviceCode.NotRun saying why. It is neither a pass nor a
	// failure: Report.Passed holds, and the summary names it.
	NotRun Status = "not-run"
)

// The names of the checks, in the order Run runs them. RunBackend runs
// those of the backend layer (BackendCheckNames) alone.
const (
	// CheckRunByHand: run without the magic cookie, the binary exits
	// non-zero and writes nothing to stdout.
	CheckRunByHand = "run-by-hand"
	// CheckHandshake: go-plugin's handshake succeeds on a protocol version
	// the host speaks.
	CheckHandshake = "handshake"
	// CheckProtocolVersion: the description's protocol version is the
	// negotiated one.
	CheckProtocolVersion = "protocol-version"
	// CheckDescription: the description is well-formed and stable.
	CheckDescription = "description"
	// CheckKernelCatalog: the kernel catalog and the hardware declared are
	// well-formed: known dtypes, positive dimensions, a platform for every
	// hardware entry, kernels only for declared methods.
	CheckKernelCatalog = "kernel-catalog"
	// CheckUnknownName: a name the plugin does not serve is refused as
	// unknown.
	CheckUnknownName = "unknown-name"
	// CheckCoverage: every declared name answers every generated request.
	CheckCoverage = "coverage"
	// CheckCatalog: every answer is among the name's declared methods.
	CheckCatalog = "catalog"
	// CheckDeterminism: a request asked again gets the same answer.
	CheckDeterminism = "determinism"
	// CheckBatch: DispatchBatch agrees with Dispatch.
	CheckBatch = "batch"
	// CheckReads: requests with the same Reads.Key get the same answer;
	// an undeclared read is bisected to the quantity and threshold read.
	CheckReads = "reads"
	// CheckBadRequests: invalid requests are refused with InvalidArgument
	// and the plugin goes on answering.
	CheckBadRequests = "bad-requests"
	// CheckMutation: the rules leave every request as they were given it.
	CheckMutation = "mutation"
	// CheckLatency: the rules' time in a Dispatch call (the median call
	// less the median round trip) is within the latency budget, and the
	// p99 within Options.MaxP99 when set.
	CheckLatency = "latency"
	// CheckKernels: kernel outputs against the reference, when declared.
	CheckKernels = "kernels"
	// CheckDeviceCode: kernel modules and launch plans pass the host's
	// checks, when device code is declared; NotChecked when none is
	// declared or none can be built here.
	CheckDeviceCode = "device-code"
	// CheckDeviceRun: the plans the device-code check checked, run on a
	// GPU (Options.Launch) against the float64 reference; NotRun when
	// there is no GPU to run them on, NotChecked when no device code is
	// declared or none can be built here.
	CheckDeviceRun = "device-run"
	// CheckStdout: nothing was written to stdout after the handshake.
	CheckStdout = "stdout"
	// CheckProcess: one process served the whole suite.
	CheckProcess = "process"
)

// CheckNames returns the name of every check, in the order Run lists
// them: the binary layer's around the backend layer's.
func CheckNames() []string {
	s := &suite{}
	before, after := (&binary{s: s}).checks()
	var names []string
	for _, ch := range before {
		names = append(names, ch.name)
	}
	names = append(names, BackendCheckNames()...)
	for _, ch := range after {
		if i := slices.Index(names, ch.listedBefore); i >= 0 {
			names = slices.Insert(names, i, ch.name)
		} else {
			names = append(names, ch.name)
		}
	}
	return names
}

// BackendCheckNames returns the names of the checks of the backend layer,
// those RunBackend runs, in order: the checks that need no process. Run
// runs them too, over the plugin's connection, among the binary's checks.
func BackendCheckNames() []string {
	var names []string
	for _, ch := range (&suite{}).backendChecks() {
		names = append(names, ch.name)
	}
	return names
}

// maxProblems is how many problems a check lists before it only counts.
const maxProblems = 5

// Check is the outcome of one check of the suite.
type Check struct {
	// Name is the check's name, one of CheckNames.
	Name string `json:"name"`
	// Status is pass, fail, skip, not-checked or not-run.
	Status Status `json:"status"`
	// Detail says what was checked, or what went wrong.
	Detail string `json:"detail"`
	// Problems lists the first failures found, one per line.
	Problems []string `json:"problems,omitempty"`
	// MoreProblems counts the failures found past those listed.
	MoreProblems int `json:"more_problems,omitempty"`
	// Duration is how long the check took.
	Duration time.Duration `json:"duration_ns"`
}

// problem records one failure of c: the first few are listed.
func (c *Check) problem(format string, args ...any) {
	c.Status = Fail
	if len(c.Problems) < maxProblems {
		c.Problems = append(c.Problems, fmt.Sprintf(format, args...))
		return
	}
	c.MoreProblems++
}

// Latency is the distribution of single Dispatch calls.
type Latency struct {
	// Samples is how many calls were measured.
	Samples int `json:"samples"`
	// P50 is the median call time.
	P50 time.Duration `json:"p50_ns"`
	// P99 is the 99th percentile call time.
	P99 time.Duration `json:"p99_ns"`
	// Max is the slowest call.
	Max time.Duration `json:"max_ns"`
}

// Report is the outcome of a conformance run.
type Report struct {
	// Binary is the plugin binary checked; empty for a backend checked in
	// process (RunBackend).
	Binary string `json:"binary"`
	// Plugin is the plugin's family name, from its description.
	Plugin string `json:"plugin,omitempty"`
	// Version is the plugin's version, from its description.
	Version string `json:"version,omitempty"`
	// Vendor is who makes the plugin, from its description; empty when it
	// does not say.
	Vendor string `json:"vendor,omitempty"`
	// ProtocolVersion is the protocol version negotiated.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// PID is the plugin process that served the suite.
	PID int `json:"pid,omitempty"`
	// Names are the backend names the plugin declares.
	Names []string `json:"names,omitempty"`
	// Requests is how many dispatch requests were answered.
	Requests int `json:"requests"`
	// Latency is the distribution of single Dispatch calls.
	Latency Latency `json:"latency"`
	// Seed is the seed of the random probes: Options.Seed, or the one the
	// run picked. The same seed asks the same requests again.
	Seed uint64 `json:"seed"`
	// Checks are the checks, in the order they ran.
	Checks []Check `json:"checks"`
	// DeviceCode is what the device-code and device-run checks asked of
	// the plugin's device code, and what ran; nil when the plugin declares
	// none.
	DeviceCode *DeviceCodeReport `json:"device_code,omitempty"`
	// Passed is true when no check failed; a check not checked, or not
	// run, is no failure.
	Passed bool `json:"passed"`
	// Duration is how long the whole suite took.
	Duration time.Duration `json:"duration_ns"`
}

// DeviceCodeReport is what the device-code and device-run checks asked of
// a plugin's device code and ran (Report.DeviceCode): the device asked
// for, the plans checked, the plans run on a GPU and where, or why none
// ran. Its JSON field names are part of conform's --json.
type DeviceCodeReport struct {
	// Device is the device the modules and plans were asked for
	// (Options.Device): this machine's GPU, or an example device.
	Device string `json:"device"`
	// ComputeCapability is its compute capability, major*10+minor.
	ComputeCapability int `json:"compute_capability"`
	// Modules are the kernel modules the plugin handed for the device,
	// each with what its image needs of a driver.
	Modules []DeviceModule `json:"modules,omitempty"`
	// PlansChecked counts the plans the plugin answered for the generated
	// batches, each checked as a host checks it.
	PlansChecked int `json:"plans_checked"`
	// NoPlan counts the generated batches the plugin answered with no plan
	// (core.ErrNoPlan).
	NoPlan int `json:"no_plan"`
	// Probes counts the plan requests sent every MLA planner beyond its
	// catalog's batches, whatever its catalog lists (FP8 caches, sparse
	// and dense layers, unusual page sizes, heads, head dims and batches);
	// ProbePlans those the plugin answered with a plan, each checked as a
	// host checks it and run with the others on a GPU. The other probes
	// got no plan.
	Probes     int `json:"probes"`
	ProbePlans int `json:"probe_plans"`
	// PlansRun counts the plans run on a GPU and compared with the float64
	// reference, their outputs right or wrong.
	PlansRun int `json:"plans_run"`
	// PlansFailed counts those of PlansRun whose outputs were wrong or
	// whose launch failed.
	PlansFailed int `json:"plans_failed"`
	// PlansWithoutReference counts the plans the GPU run had no reference
	// for (ErrLaunchNotCovered), which it did not run.
	PlansWithoutReference int `json:"plans_without_reference"`
	// RanOn is the GPU the plans ran on; empty when none ran.
	RanOn string `json:"ran_on,omitempty"`
	// NotRun says why no plan ran on a GPU; empty when some did.
	NotRun string `json:"not_run,omitempty"`
}

// DeviceModule is one kernel module of Report.DeviceCode: its name,
// architecture and format, and what its image needs of the host's driver
// (launch.DriverFloor: its PTX ISA or cubin architecture, the oldest CUDA
// release and driver that load it).
type DeviceModule struct {
	Name   string `json:"name"`
	Arch   string `json:"arch"`
	Format string `json:"format"`
	// Floor is what the image needs of a driver; nil when nothing of it
	// could be read.
	Floor *launch.Floor `json:"floor,omitempty"`
	// FloorError says what of the floor is not known, and why.
	FloorError string `json:"floor_error,omitempty"`
}

// deviceModule is m as Report.DeviceCode lists it.
func deviceModule(m core.KernelModule) DeviceModule {
	dm := DeviceModule{Name: m.Name, Arch: m.Arch, Format: string(m.Format)}
	f, err := launch.DriverFloor(m)
	if err != nil {
		dm.FloorError = err.Error()
	}
	if f.PTXISA != "" || f.ImageArch != "" {
		dm.Floor = &f
	}
	return dm
}

// String names the module and says what it needs: "mla_decode (ptx for
// compute_90, PTX ISA 9.0, driver 580.65.06 or newer)", "mla_decode
// (cubin for sm_90, built by CUDA 13.0, driver 580.65.06 or newer)".
func (m DeviceModule) String() string {
	s := m.Name + " (" + m.Format + " for " + m.Arch
	switch {
	case m.Floor != nil && m.Floor.PTXISA != "":
		s += ", PTX ISA " + m.Floor.PTXISA
	case m.Floor != nil && m.Floor.Toolkit != "":
		s += ", built by CUDA " + m.Floor.Toolkit
	}
	if m.Floor != nil && m.Floor.Driver != "" {
		return s + ", driver " + m.Floor.Driver + " or newer)"
	}
	return s + ", driver not known)"
}

// Check returns the check called name, and whether the report has it.
func (r *Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Failed returns the checks that failed.
func (r *Report) Failed() []Check { return r.withStatus(Fail) }

// withStatus returns the checks of status s.
func (r *Report) withStatus(s Status) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == s {
			out = append(out, c)
		}
	}
	return out
}

// Summary is one line: whether the plugin conforms and what failed, or
// what could not be checked here.
func (r *Report) Summary() string {
	name := r.Plugin
	if name == "" {
		name = r.Binary
	}
	checkNames := func(cs []Check) string {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.Name
		}
		return strings.Join(names, ", ")
	}
	failed := r.Failed()
	if len(failed) == 0 {
		var here string
		if nc := r.withStatus(NotChecked); len(nc) > 0 {
			here += "; not checked here: " + checkNames(nc)
		}
		if nr := r.withStatus(NotRun); len(nr) > 0 {
			here += "; not run here: " + checkNames(nr)
		}
		return fmt.Sprintf("PASS: %s conforms (%d checks, %d requests%s)", name, len(r.Checks), r.Requests, here)
	}
	return fmt.Sprintf("FAIL: %s: %d of %d checks failed: %s", name, len(failed), len(r.Checks), checkNames(failed))
}

// WriteText writes the report for a person: a header, one line per check
// with its problems indented below it, and the summary line.
func (r *Report) WriteText(w io.Writer) error {
	var sb strings.Builder
	by := ""
	if r.Vendor != "" {
		by = " by " + r.Vendor
	}
	switch {
	case r.Binary == "":
		fmt.Fprintf(&sb, "attnplug conformance: backend %s %s%s in process, names: %s\n", r.Plugin, r.Version, by, strings.Join(r.Names, ", "))
	default:
		fmt.Fprintf(&sb, "attnplug conformance: %s\n", r.Binary)
		if r.Plugin != "" {
			fmt.Fprintf(&sb, "plugin %s %s%s, protocol %d, pid %d, names: %s\n",
				r.Plugin, r.Version, by, r.ProtocolVersion, r.PID, strings.Join(r.Names, ", "))
		}
	}
	fmt.Fprintf(&sb, "seed %d (run again with --seed %d to ask the same requests)\n", r.Seed, r.Seed)
	sb.WriteString("\n")
	tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(strings.ReplaceAll(string(c.Status), "-", " ")), c.Name, c.Detail)
		for _, p := range c.Problems {
			fmt.Fprintf(tw, "\t\t  - %s\n", p)
		}
		if c.MoreProblems > 0 {
			fmt.Fprintf(tw, "\t\t  - and %d more\n", c.MoreProblems)
		}
	}
	tw.Flush()
	fmt.Fprintf(&sb, "\n%s in %s\n", r.Summary(), r.Duration.Round(time.Millisecond))
	_, err := io.WriteString(w, sb.String())
	return err
}
