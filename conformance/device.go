package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry"
)

// DefaultArch is the architecture of the example device that the
// device-code check asks plugins for, when Options.Device is not set.
const DefaultArch = "sm_90"

// ModulesTimeout bounds the KernelModules call of the device-code check:
// a plugin may compile its modules then (NVRTC: seconds).
const ModulesTimeout = 2 * time.Minute

// ExampleDevice returns an example CUDA device of architecture arch
// ("sm_90", "sm_90a", "compute_100" or "100"), with the limits of a
// typical GPU of that generation: the device plugins are asked for device
// code for when no GPU is at hand. The error names the value.
func ExampleDevice(arch string) (core.DeviceInfo, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(arch, "sm_"), "compute_"), "a")
	cc, err := strconv.Atoi(s)
	if err != nil || cc < 50 || cc > 199 {
		return core.DeviceInfo{}, fmt.Errorf("architecture %q: want sm_XY with XY a compute capability from 50 to 199, such as sm_90", arch)
	}
	d := core.DeviceInfo{
		Platform: core.PlatformCUDA, Name: fmt.Sprintf("example sm_%d device", cc), ComputeCapability: cc,
		SMs: 80, MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 96 << 10, MaxGrid: [3]int{1<<31 - 1, 65535, 65535},
	}
	switch {
	case cc >= 100 && cc < 110: // B200
		d.SMs, d.MaxSharedPerBlock = 148, 227<<10
	case cc >= 90 && cc < 100: // H100, H200
		d.SMs, d.MaxSharedPerBlock = 132, 227<<10
	case cc == 80: // A100
		d.SMs, d.MaxSharedPerBlock = 108, 163<<10
	case cc > 80: // the sm_86, sm_89 and sm_120 cards
		d.SMs, d.MaxSharedPerBlock = 84, 99<<10
	}
	return d, nil
}

// planMethods are the methods with a device layout (launch.Tensors): the
// paged MLA decode and the ragged MHA prefills.
func planMethods() []core.Method {
	return []core.Method{core.MLA, core.MHA, core.MHAOneShot, core.MHAChunkedKV}
}

// planBatches returns the batches the device-code check plans for method m
// of name, whose catalog kernel is k: for MLA, decode and target verify (1
// to 4 query tokens), page sizes 1 and 64 (a sparse kernel's: DeepSeek
// sparse attention over a top-2048, the pages its catalog lists); for the
// MHA methods, prefills of fresh requests (MHA) or with prefixes; 16 and
// 128 heads, batch sizes 1 to 64 with ragged lengths up to 16k, with and
// without CUDA graphs; where the kernel takes an FP8 cache, every other
// batch over one; and, where it takes split queries (QuerySplit), half of
// them split, across the FP8 ones.
func planBatches(name string, m core.Method, k core.Kernel, dev core.DeviceInfo) []core.PlanRequest {
	rng := rand.New(rand.NewPCG(23, 29))
	dims := core.PlanDims{HeadDimQK: 576, HeadDimV: 512, SoftmaxScale: 0.1352}
	pages, variants := []int{1, 64}, []bool{false, true} // MLA: target verify or decode
	if m != core.MLA {
		dims = core.PlanDims{HeadDimQK: 192, HeadDimV: 128, SoftmaxScale: 0.0722}
		pages, variants = []int{0}, []bool{false}
	}
	if k.Sparse && m == core.MLA {
		dims.TopK = 2048
		if len(k.PageSizes) > 0 {
			pages = k.PageSizes
		}
	}
	fp8 := m == core.MLA && slices.Contains(k.DTypes, "fp8_e4m3")
	split := m == core.MLA && k.QuerySplit
	var out []core.PlanRequest
	for _, page := range pages {
		for _, heads := range []int{16, 128} {
			for _, batch := range []int{1, 7, 64} {
				for _, verify := range variants {
					s := core.PlanShape{PageSize: page}
					var used int64
					for i := 0; i < batch; i++ {
						// Within core's bounds of a plan: a request past
						// them is refused before any planning.
						n := 1 + rng.Int64N(min(16384, core.MaxPlanTokens/int64(batch)))
						var q int64
						switch {
						case m == core.MHA:
							q = n // no prefix
						case m != core.MLA:
							q = 1 + rng.Int64N(n)
						case verify:
							q = min(n, 1+rng.Int64N(4))
						default:
							q = 1
						}
						s.SeqLens, s.QLens = append(s.SeqLens, n), append(s.QLens, q)
						if page > 0 {
							used += (n + int64(page) - 1) / int64(page)
						}
					}
					graph := batch == 7 && m == core.MLA
					if graph && verify {
						// A serving loop's request: a bound on the lengths,
						// so that a plan may hold for the batch size.
						s.MaxSeqLen = 16384
					}
					if page > 0 {
						s.NumPages = int(max(used, (s.MaxSeqLen+int64(page)-1)/int64(page)) + 16)
					}
					if m == core.MHAChunkedKV {
						s.ChunkCapacity = 8192
					}
					d := dims
					d.Heads = heads
					r := core.PlanRequest{Backend: name, Method: m, DType: "bf16", Dims: d, Shape: s, Device: dev, Graph: graph}
					if fp8 && len(out)%2 == 1 {
						r.KVDType = "fp8_e4m3"
					}
					r.QuerySplit = split && len(out)%4 >= 2
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// deviceCode checks a plugin that declares device code the way a host
// uses it: the modules for an example device pass the host's check
// (registry.CheckModules), every plan for the generated batches of each
// method of a name's catalog with a device layout passes it too
// (registry.CheckPlan: known entries, limits, every tensor bound, shapes,
// schedule), and a plan request for a method a name does not run, or a
// malformed one, gets no plan rather than a plan or a crash. A plugin
// that declares no device code, or answers that it has none for the
// device (an architecture it does not cover, no NVRTC to build it), is
// NotChecked, with the plugin's reason. The plans that pass are kept for
// the device-run check (deviceRun), which runs them.
func (s *suite) deviceCode(ctx context.Context, c *Check) {
	if s.desc == nil || !s.desc.DeviceCode {
		c.Status, c.Detail = NotChecked, "not checked: the plugin declares no device code"
		return
	}
	dev := *s.opts.Device
	rep := &DeviceCodeReport{Device: dev.Name, ComputeCapability: dev.ComputeCapability}
	s.report.DeviceCode = rep
	if s.dead != nil {
		c.Status, c.Detail = Skip, "not run: "+s.dead.Error()
		return
	}
	kp := s.planner
	if kp == nil {
		c.problem("the backend declares device code but is not a core.KernelPlanner")
		return
	}
	mctx, cancel := context.WithTimeout(ctx, ModulesTimeout)
	mods, err := kp.KernelModules(mctx, dev)
	cancel()
	s.observe(ctx, err)
	switch {
	case errors.Is(err, core.ErrNoPlan):
		c.Status = NotChecked
		c.Detail = fmt.Sprintf("not checked: no device code for %s (compute %d): the plugin says: %v", dev.Name, dev.ComputeCapability, err)
		return
	case err != nil:
		c.problem("KernelModules for %s (compute %d): %v", dev.Name, dev.ComputeCapability, err)
		return
	}
	for _, m := range mods {
		rep.Modules = append(rep.Modules, deviceModule(m))
	}
	if err := registry.CheckModules(mods, dev); err != nil {
		c.problem("the host refuses the modules: %v", err)
		c.Detail = "a host refuses these modules"
		return
	}
	var t planTally
	stopped := false
	for _, h := range s.cov.names {
		if h.Deprecated != "" {
			continue
		}
		if !s.handlerPlans(ctx, c, kp, h, mods, &t) {
			stopped = true
			break
		}
	}
	rep.PlansChecked, rep.NoPlan = t.plans, t.none
	rep.Probes, rep.ProbePlans = t.probes, t.probePlans
	if stopped {
		return
	}
	if c.Status == Fail {
		c.Detail = "a host refuses these plans"
		return
	}
	names := make([]string, len(rep.Modules))
	for i, m := range rep.Modules {
		names[i] = m.String()
	}
	c.Detail = fmt.Sprintf("modules %s for %s pass the host's check; %d plans pass it, %d batches got no plan", strings.Join(names, ", "), dev.Name, t.plans, t.none)
	if t.probes > 0 {
		c.Detail += fmt.Sprintf("; of %d probes (FP8 caches, sparse and dense layers, unusual shapes), %d got plans that pass it, the others no plan", t.probes, t.probePlans)
	}
}

// planTally counts what the device-code check asked.
type planTally struct {
	plans, none        int // plans that came, batches that got none
	probes, probePlans int // probes asked (planProbes), plans that came
}

// planRun is a plan request whose plan passed the device-code check: the
// device-run check runs it.
type planRun struct {
	h    core.HandlerInfo
	mods []core.KernelModule
	req  core.PlanRequest
}

// handlerPlans asks the plans of every batch of h's catalog methods with a
// device layout and checks each as a host does, keeping those that pass
// for the device-run check, then the plan requests h must refuse; it
// reports false when the plugin stopped.
func (s *suite) handlerPlans(ctx context.Context, c *Check, kp core.KernelPlanner, h core.HandlerInfo, mods []core.KernelModule, t *planTally) bool {
	type layoutIssue struct {
		first string
		more  int
	}
	dev := *s.opts.Device
	layout, order := map[string]*layoutIssue{}, []string(nil)
	for _, m := range planMethods() {
		k, ok := h.Kernel(m)
		if !ok {
			continue
		}
		for _, req := range planBatches(h.Name, m, k, dev) {
			if s.dead != nil {
				c.problem("the plugin stopped: %v", s.dead)
				return false
			}
			p, err := s.plan(ctx, kp, &req)
			switch {
			case errors.Is(err, core.ErrNoPlan):
				t.none++
			case err != nil:
				c.problem("%s: %s plan for %s: %v", h.Name, m, batchString(&req), err)
			default:
				t.plans++
				if err := registry.CheckPlan(p, &req, h, mods); err != nil {
					c.problem("%s: %s plan for %s: %v", h.Name, m, batchString(&req), err)
					continue
				}
				if why := layoutProblem(p, &req); why != "" {
					// Each kind of layout problem once per method, with
					// the first batch that shows it and how many more do.
					key := m.String() + ": " + why[:strings.IndexByte(why, ':')]
					if l := layout[key]; l != nil {
						l.more++
					} else {
						layout[key] = &layoutIssue{fmt.Sprintf("%s: %s plan for %s: %s", h.Name, m, batchString(&req), why), 0}
						order = append(order, key)
					}
				}
				if why := s.planHolds(ctx, kp, &req, p); why != "" {
					c.problem("%s: %s plan for %s: %s", h.Name, m, batchString(&req), why)
					continue
				}
				s.runs = append(s.runs, planRun{h: h, mods: mods, req: req})
			}
		}
	}
	for _, key := range order {
		l := layout[key]
		switch {
		case l.more == 1:
			l.first += " (and 1 more batch alike)"
		case l.more > 1:
			l.first += fmt.Sprintf(" (and %d more batches alike)", l.more)
		}
		c.problem("%s", l.first)
	}
	s.probePlans(ctx, c, kp, h, mods, t)
	s.badPlanRequests(ctx, c, kp, h, dev)
	return true
}

// deviceRun runs the plans that passed the device-code check on a GPU
// (Options.Launch), each against the float64 reference with its outputs
// poisoned first, and fails naming a batch whose outputs are wrong or
// whose launch fails. Without a GPU (Launch nil) it is NotRun, saying why
// (Options.NoLaunch); where the device-code check was not checked, it is
// not checked either; where no plan passed that check, it is skipped.
// Report.DeviceCode counts what ran.
func (s *suite) deviceRun(ctx context.Context, c *Check) {
	rep := s.report.DeviceCode
	dc, _ := s.report.Check(CheckDeviceCode)
	switch {
	case rep == nil || dc.Status == NotChecked:
		c.Status, c.Detail = NotChecked, dc.Detail
		if c.Detail == "" {
			c.Detail = "not checked: the plugin declares no device code"
		}
		return
	case s.dead != nil:
		rep.NotRun = s.dead.Error()
		c.Status, c.Detail = Skip, "not run: "+rep.NotRun
		return
	case len(s.runs) == 0:
		why := "no plan passed the host's checks (device-code)"
		if dc.Status != Fail && rep.PlansChecked == 0 {
			why = "no plan to run: every batch got no plan"
		}
		if dc.Status == Skip {
			why = dc.Detail
		}
		rep.NotRun = why
		c.Status, c.Detail = Skip, "not run: "+why
		return
	case s.opts.Launch == nil:
		rep.NotRun = s.opts.NoLaunch
		if rep.NotRun == "" {
			rep.NotRun = "no GPU to run them on (Options.Launch is not set)"
		}
		c.Status = NotRun
		c.Detail = fmt.Sprintf("not run: %s: %d plans checked, none run against the float64 reference", rep.NotRun, len(s.runs))
		return
	}
	dev := s.opts.Device.Name
	for _, r := range s.runs {
		if s.dead != nil {
			c.problem("the plugin stopped: %v", s.dead)
			break
		}
		s.launchPlan(ctx, c, checkedPlanner{s, s.planner, r.h, r.mods}, &r.req, rep)
	}
	switch {
	case rep.PlansRun > 0:
		rep.RanOn = dev
	case rep.PlansWithoutReference > 0:
		rep.NotRun = fmt.Sprintf("no reference on %s for any of the %d plans", dev, rep.PlansWithoutReference)
	}
	detail := fmt.Sprintf("%d plans ran on %s against the float64 reference (outputs poisoned first), %d had no reference here", rep.PlansRun, dev, rep.PlansWithoutReference)
	switch {
	case c.Status == Fail:
		c.Detail = fmt.Sprintf("%d of %d plans run on %s differ from the float64 reference or failed", rep.PlansFailed, rep.PlansRun, dev)
	case rep.PlansRun == 0:
		c.Status, c.Detail = NotRun, fmt.Sprintf("not run: %s (%s)", rep.NotRun, detail)
	default:
		c.Detail = strings.Replace(detail, "reference (", "reference within the tolerance (", 1)
	}
}

// launchPlan runs the plans of req on the GPU (Options.Launch), through
// kp, the plugin as a host sees it, counts it in rep, and records a
// problem naming the batch when the outputs are wrong or the launch fails.
func (s *suite) launchPlan(ctx context.Context, c *Check, kp checkedPlanner, req *core.PlanRequest, rep *DeviceCodeReport) {
	err := s.opts.Launch(ctx, kp, req)
	switch {
	case err == nil:
		rep.PlansRun++
	case errors.Is(err, ErrLaunchNotCovered):
		rep.PlansWithoutReference++
	default:
		rep.PlansRun++
		rep.PlansFailed++
		c.problem("%s: %s plan for %s, run on the GPU: %v", kp.h.Name, req.Method, batchString(req), err)
	}
}

// checkedPlanner is the plugin under test as a host sees it: the modules
// the device-code check passed, and plans that pass the host's check
// (registry.CheckPlan) for the handler h.
type checkedPlanner struct {
	s    *suite
	kp   core.KernelPlanner
	h    core.HandlerInfo
	mods []core.KernelModule
}

func (p checkedPlanner) KernelModules(context.Context, core.DeviceInfo) ([]core.KernelModule, error) {
	return p.mods, nil
}

func (p checkedPlanner) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	plan, err := p.s.plan(ctx, p.kp, req)
	if err == nil {
		err = registry.CheckPlan(plan, req, p.h, p.mods)
	}
	return plan, err
}

// layoutProblem returns why plan p cannot run req's batch right whatever
// its kernels do, or "": where the kernels cannot learn what they need
// of each request from what the plan binds. Every launch of a batch of
// more than one request needs each request's keys and query rows; the
// checks are sound (a correct plan never fails them), so they look only
// at where that knowledge can come from, never at how a kernel uses it:
//
//   - MLA, page size above 1: kv_indptr gives a request's pages, not its
//     keys, so some launch must bind the seq_lens tensor, or metadata (a
//     schedule, per-request data), or, where every request has the same
//     length (a single request, say), an integer equal to it;
//   - MLA, a request with more than one query token (target verify):
//     request i's rows of q, out and lse start at qo_indptr[i], so some
//     launch must bind qo_indptr, or metadata, or, where every request has
//     the same query length, an integer equal to it or to the batch's
//     tokens;
//   - the MHA methods: their layout has no per-request tensor, so a batch
//     of requests of different lengths needs metadata.
//
// A grid is not checked: a kernel may loop over requests, rows or work
// items (a persistent kernel), so no grid size is wrong by itself.
func layoutProblem(p *core.Plan, req *core.PlanRequest) string {
	s := req.Shape
	tensors := map[string]bool{}
	ints := map[int64]bool{}
	meta := false
	for _, l := range p.Launches {
		for _, a := range l.Args {
			switch a.Kind {
			case core.ArgTensor:
				tensors[a.Name] = true
			case core.ArgMeta:
				meta = true
			case core.ArgInt:
				ints[a.Int] = true
			}
		}
	}
	if meta {
		return ""
	}
	uniform := func(xs []int64) bool { return slices.Min(xs) == slices.Max(xs) }
	var tokens int64
	for _, q := range s.QLens {
		tokens += q
	}
	if req.Method != core.MLA {
		if len(s.SeqLens) > 1 && !(uniform(s.SeqLens) && uniform(s.QLens)) {
			return "no launch binds metadata, and the MHA layout has no per-request tensor: the kernels cannot know where each request's queries and keys start (cumulative lengths go in Metadata, bound with ArgMeta)"
		}
		return ""
	}
	if s.PageSize > 1 && !tensors["seq_lens"] && !(uniform(s.SeqLens) && ints[s.SeqLens[0]]) {
		return fmt.Sprintf("no launch binds seq_lens (nor metadata): with page size %d the kernels cannot know a request's keys, since kv_indptr gives its pages, not its tokens (bind the host's seq_lens tensor)", s.PageSize)
	}
	if slices.Max(s.QLens) > 1 && !tensors["qo_indptr"] && !(uniform(s.QLens) && (ints[s.QLens[0]] || ints[tokens])) {
		return fmt.Sprintf("no launch binds qo_indptr (nor metadata): with %d query tokens for %d requests the kernels cannot know which rows of q, out and lse are each request's (bind the host's qo_indptr tensor)", tokens, len(s.SeqLens))
	}
	return ""
}

// planHolds checks that plan p, kp's answer to req, is the answer to
// every request that agrees with req on what p declares it reads
// (core.Plan.Reads): a host keeps it for all of them. It plans req again
// with what p does not read changed (other lengths under the declared
// bound, another chunk capacity) and returns why the plans differ, or "".
func (s *suite) planHolds(ctx context.Context, kp core.KernelPlanner, req *core.PlanRequest, p *core.Plan) string {
	r := p.Reads.Effective()
	if r == core.PlanReadsAll {
		return ""
	}
	other := *req
	other.Shape.SeqLens = slices.Clone(req.Shape.SeqLens)
	other.Shape.QLens = slices.Clone(req.Shape.QLens)
	rng := rand.New(rand.NewPCG(uint64(len(req.Shape.SeqLens)), 41))
	var changed []string
	if r&core.PlanReadsSeqLens == 0 {
		hi := req.Shape.MaxSeqLen
		if hi == 0 {
			hi = slices.Max(req.Shape.SeqLens)
		}
		for i, q := range other.Shape.QLens {
			other.Shape.SeqLens[i] = q + rng.Int64N(max(hi-q+1, 1))
		}
		changed = append(changed, "seq_lens")
	}
	if r&core.PlanReadsChunkCapacity == 0 {
		other.Shape.ChunkCapacity = req.Shape.ChunkCapacity*2 + 4096
		changed = append(changed, "chunk_capacity")
	}
	if launch.CheckRequest(&other) != nil {
		return ""
	}
	p2, err := s.plan(ctx, kp, &other)
	switch {
	case err != nil:
		return fmt.Sprintf("the plan declares it reads %s, but with other %s the plugin answers %v", r, strings.Join(changed, " and "), err)
	case !reflect.DeepEqual(p, p2):
		return fmt.Sprintf("the plan declares it reads %s, but another plan answers the same request with other %s (a host would keep the first for both)", r, strings.Join(changed, " and "))
	}
	return ""
}

// plan asks kp for req's plan under the call deadline.
func (s *suite) plan(ctx context.Context, kp core.KernelPlanner, req *core.PlanRequest) (*core.Plan, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	p, err := kp.PlanKernel(cctx, req)
	cancel()
	s.observe(ctx, err)
	return p, err
}

// badPlanRequests asks h for plans it cannot give: a method its catalog
// does not run on the device, and a malformed request. Either must get
// "no plan" or "invalid request".
func (s *suite) badPlanRequests(ctx context.Context, c *Check, kp core.KernelPlanner, h core.HandlerInfo, dev core.DeviceInfo) {
	k, _ := h.Kernel(core.MLA)
	good := planBatches(h.Name, core.MLA, k, dev)[0]
	noKernel := good
	noKernel.Method = core.DSANPU
	malformed := good
	malformed.Dims.Heads = 0
	for _, tc := range []struct {
		what string
		req  core.PlanRequest
	}{{"a method it does not run (DSA_NPU)", noKernel}, {"a malformed request (0 heads)", malformed}} {
		if s.dead != nil {
			return
		}
		p, err := s.plan(ctx, kp, &tc.req)
		switch {
		case err == nil:
			c.problem("%s: planned %s: %d launches, want no plan", h.Name, tc.what, len(p.Launches))
		case !errors.Is(err, core.ErrNoPlan) && !errors.Is(err, core.ErrInvalidRequest):
			c.problem("%s: %s: %v, want no plan (Unimplemented) or an invalid request (InvalidArgument)", h.Name, tc.what, err)
		}
	}
}

// batchString names a plan request's batch in a problem.
func batchString(r *core.PlanRequest) string {
	s := fmt.Sprintf("%d requests (seq_lens %s, q_lens %s), page size %d, %d heads, head dims %d/%d, graph %v",
		len(r.Shape.SeqLens), lensString(r.Shape.SeqLens), lensString(r.Shape.QLens), r.Shape.PageSize, r.Dims.Heads,
		r.Dims.HeadDimQK, r.Dims.HeadDimV, r.Graph)
	if r.Shape.MaxSeqLen > 0 {
		s += fmt.Sprintf(", max_seq_len %d", r.Shape.MaxSeqLen)
	}
	if r.KVDType != "" {
		s += ", kv_dtype " + r.KVDType
	}
	if r.Dims.TopK > 0 {
		s += fmt.Sprintf(", top_k %d", r.Dims.TopK)
	}
	if r.QuerySplit {
		s += ", query_split"
	}
	return s
}

func lensString(xs []int64) string {
	if len(xs) <= 4 {
		return fmt.Sprint(xs)
	}
	return fmt.Sprintf("%v...", xs[:4])
}
