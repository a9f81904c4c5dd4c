package registry

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/launch"
	"github.com/attnplug/attnplug/registry/backend"
)

// Device code. A plugin that declares it (core.Description.DeviceCode)
// hands the host kernel modules and launch plans; the host loads and
// launches them in its own process (package launch). The registry:
//
//  1. asks a plugin for its modules once per device (KernelModules), checks
//     that every image hashes to its declared SHA-256, and keeps them for
//     the life of the plugin's binary, across restarts of its process;
//  2. checks the images against the lock file's module pins at every call,
//     so that a lock file reread by Reload applies at once;
//  3. asks for a plan once per distinct request (PlanKernel), checks it
//     against the modules and the device (launch.Check), and keeps the
//     outcome: the same request again costs no call to the plugin;
//  4. answers every refusal with an error wrapping core.ErrNoPlan, so that
//     the caller runs the kernel another way; a refusal that is not the
//     plugin's expected "no plan" is logged and counted as a fallback.
//
// Calls go through Registry.call, as dispatches and kernel calls do: a
// plugin that dies during one is restarted after the backoff. A backend in
// process hands device code the same way.

// maxModuleDevices bounds the devices whose modules a plugin's state
// keeps; planCapacity bounds its plans, and planBudget their bytes (a
// plan may hold tens of MiB within core's bounds of a plan: 1024 of them
// would hold tens of GiB of the host's memory).
const (
	maxModuleDevices = 16
	planCapacity     = 1024
	planBudget       = 256 << 20
)

// deviceState is the device code learnt from one backend (one plugin
// binary), kept by the registry (Registry.devices) for the backend's life.
type deviceState struct {
	mu      sync.Mutex
	modules map[core.DeviceInfo]*moduleFetch // at most maxModuleDevices, the least recently used evicted
	tick    uint64
	plans   planCache
	gate    chan struct{} // the plan calls running (call, admit); made by planGate
}

// planGate returns the semaphore of the backend's plan calls, of
// backend.MaxPlanCalls.
func (s *deviceState) planGate() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{}, backend.MaxPlanCalls)
	}
	return s.gate
}

// moduleFetch is the modules of one device, fetched or being fetched.
type moduleFetch struct {
	done chan struct{} // closed when the fields below are set
	mods []core.KernelModule
	err  error
	keep bool   // the outcome stands for the binary; else fetch again
	used uint64 // deviceState.tick at its last use: the least recent goes first
}

// KernelModules returns the device code of the plugin serving backend,
// for dev: asked of the plugin at the first call for dev, concurrent
// callers sharing that call, and kept for later ones. Every image hashes
// to its declared SHA-256, and, when the lock file pins modules for the
// plugin, every hash is pinned. The modules are shared: callers must not
// modify them.
//
// The error wraps core.ErrNoPlan whenever there is no device code to use:
// the triton rules (in this process) and names nobody serves, a plugin
// that does not run on this host, declares no device code, has none for
// dev, hands images that fail their checks, or failed during the call
// (which retires its process, as a failed dispatch does). It wraps
// ErrNotPinned too for an image the lock file does not pin. A device
// described out of core's bounds (DeviceInfo.Check) is an invalid request.
func (r *Registry) KernelModules(ctx context.Context, backend string, dev core.DeviceInfo) ([]core.KernelModule, error) {
	if err := dev.Check(); err != nil {
		return nil, err
	}
	rt, err := r.deviceBackend(backend)
	if err != nil {
		return nil, err
	}
	return r.modules(ctx, rt, dev)
}

// deviceBackend returns the route of name when its backend, a plugin or
// a backend in process, may have device code; otherwise an error wrapping
// core.ErrNoPlan says why not.
func (r *Registry) deviceBackend(name string) (*route, error) {
	rt := r.table.Load().route(name)
	if why := r.usable(rt, name); why != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrNoPlan, why)
	}
	if !rt.be.Description().DeviceCode {
		if path, _ := rt.be.Binary(); path != "" {
			return nil, fmt.Errorf("%w: plugin %s declares no device code", core.ErrNoPlan, rt.family)
		}
		return nil, fmt.Errorf("%w: %q is decided by the %s rules in this process, which have no device code", core.ErrNoPlan, name, rt.handler.Name)
	}
	return rt, nil
}

// device returns the device code learnt from be.
func (r *Registry) device(be backend.Backend) *deviceState {
	if s, ok := r.devices.Load(be); ok {
		return s.(*deviceState)
	}
	s, _ := r.devices.LoadOrStore(be, &deviceState{})
	return s.(*deviceState)
}

// modules returns the modules of rt's backend for dev, fetched once,
// checked against the lock file in force; after a reload moved rt's name
// to another backend during the fetch, the modules of the route in force.
func (r *Registry) modules(ctx context.Context, rt *route, dev core.DeviceInfo) ([]core.KernelModule, error) {
	s := r.device(rt.be)
	for {
		s.mu.Lock()
		s.tick++
		f := s.modules[dev]
		if f == nil {
			f = &moduleFetch{done: make(chan struct{}), used: s.tick}
			if s.modules == nil {
				s.modules = map[core.DeviceInfo]*moduleFetch{}
			}
			if len(s.modules) >= maxModuleDevices {
				s.evictModules()
			}
			s.modules[dev] = f
			s.mu.Unlock()
			var now *route
			f.mods, f.keep, now, f.err = r.fetchModules(ctx, rt, dev)
			if !f.keep {
				s.mu.Lock()
				if s.modules[dev] == f {
					delete(s.modules, dev)
				}
				s.mu.Unlock()
			}
			close(f.done)
			switch {
			case now != nil:
				return r.modules(ctx, now, dev)
			case f.err != nil:
				return nil, f.err
			}
			return r.pinnedModules(rt, f.mods)
		}
		f.used = s.tick
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !f.keep {
			continue // that fetch failed for its caller; ask again
		}
		if f.err != nil {
			return nil, f.err
		}
		return r.pinnedModules(rt, f.mods)
	}
}

// evictModules drops the least recently used device's modules; s.mu
// held. A fetch in flight is dropped too (its callers keep waiting on it;
// the next caller for its device fetches again).
func (s *deviceState) evictModules() {
	var oldest core.DeviceInfo
	var least *moduleFetch
	for d, f := range s.modules {
		if least == nil || f.used < least.used {
			oldest, least = d, f
		}
	}
	delete(s.modules, oldest)
}

// fetchModules asks rt's backend for its modules for dev and checks them;
// keep says whether the outcome stands for the backend (modules, or its
// own refusal) rather than for this call (no process, a failure, ctx, a
// move: now, the route in force, is then set).
func (r *Registry) fetchModules(ctx context.Context, rt *route, dev core.DeviceInfo) (mods []core.KernelModule, keep bool, now *route, err error) {
	s, err := r.call(ctx, rt.be, rt.name, backend.LongCall, "the kernel modules request", func(ctx context.Context, c backend.Conn) (err error) {
		mods, err = c.KernelModules(ctx, dev)
		return err
	})
	switch {
	case err != nil:
		return nil, false, nil, err
	case s.verdict == refused:
		// The backend has no device code for dev: an expected answer.
		rt.be.Log().Info("no device code for this device", "device", dev.Name, "compute_capability", dev.ComputeCapability, "error", s.o.Err)
		return nil, true, nil, noPlanAnswer(s.o)
	case s.verdict == moved:
		return nil, false, s.now, nil
	case s.verdict == failed:
		return nil, false, nil, r.noPlan(rt, *s.o)
	}
	if err := CheckModules(mods, dev); err != nil {
		return nil, true, nil, r.noPlan(rt, ReasonBadModules.Unavailable(fmt.Errorf("%s: %w", rt.family, err)))
	}
	rt.be.Log().Info("kernel modules received", "device", dev.Name, "compute_capability", dev.ComputeCapability, "modules", len(mods))
	return mods, true, nil, nil
}

// CheckModules is the host's check of the kernel modules a plugin hands
// it for dev: it refuses a module without a name or with a name given
// twice, an empty image, an image that does not hash to its declared
// SHA-256, a PTX image whose entry signatures differ from the declared
// Entries (launch.CheckEntries: a missing entry, a parameter count, size
// or order the kernel does not take; cubins are not parsed), and, for a
// CUDA device, an image built for an architecture dev does not run
// (launch.ArchRuns: a cubin of another major revision or a newer minor,
// PTX for a newer architecture, an sm_90a image on anything but 9.0). The
// error wraps core.ErrProtocol. attnplug conform applies it too.
func CheckModules(mods []core.KernelModule, dev core.DeviceInfo) error {
	seen := map[string]bool{}
	for i, m := range mods {
		switch {
		case m.Name == "":
			return fmt.Errorf("%w: kernel module %d has no name", core.ErrProtocol, i)
		case seen[m.Name]:
			return fmt.Errorf("%w: kernel module %q given twice", core.ErrProtocol, m.Name)
		case len(m.Image) == 0:
			return fmt.Errorf("%w: kernel module %q has an empty image", core.ErrProtocol, m.Name)
		}
		seen[m.Name] = true
		if sum := core.ImageSHA256(m.Image); sum != m.SHA256 {
			return fmt.Errorf("%w: kernel module %q declares sha256 %q, but its image of %d bytes hashes to %s", core.ErrProtocol, m.Name, m.SHA256, len(m.Image), sum)
		}
		if err := launch.CheckEntries(m); err != nil {
			return fmt.Errorf("%w: %w", core.ErrProtocol, err)
		}
		if dev.Platform == core.PlatformCUDA {
			if err := launch.ArchRuns(m, dev.ComputeCapability); err != nil {
				return fmt.Errorf("%w: %w (asked for %s)", core.ErrProtocol, err, dev.Name)
			}
		}
	}
	return nil
}

// pinnedModules returns mods when the lock file in force pins them (or
// pins no modules of rt's backend).
func (r *Registry) pinnedModules(rt *route, mods []core.KernelModule) ([]core.KernelModule, error) {
	l := r.lock.Load()
	path, _ := rt.be.Binary()
	if l == nil || path == "" {
		return mods, nil
	}
	if err := l.VerifyModules(filepath.Base(path), mods); err != nil {
		return nil, r.noPlan(rt, ReasonBadModules.Unavailable(fmt.Errorf("plugin %s: %w", rt.family, err)))
	}
	return mods, nil
}

// noPlanAnswer is a backend's own answer o, "no plan" or "invalid
// request", as an error wrapping core.ErrNoPlan.
func noPlanAnswer(o *backend.Outcome) error {
	if errors.Is(o.Err, core.ErrNoPlan) {
		return o.Err
	}
	return fmt.Errorf("%w: %w", core.ErrNoPlan, o.Err)
}

// noDeviceCode is what a device-code fallback does, in the fallback log.
const noDeviceCode = "no device plan: the kernel runs another way"

// noPlan records a device-code fallback of rt, because of why, and
// returns it wrapping core.ErrNoPlan.
func (r *Registry) noPlan(rt *route, why backend.Outcome) error {
	r.fellBack(rt.name, rt, why, noDeviceCode, false)
	return fmt.Errorf("%w: %w", core.ErrNoPlan, why)
}

// PlanKernel returns the launches that run req.Method's kernel of the
// handler req.Backend on req's batch, checked by launch.Check against the
// plugin's modules for req.Device: known entries, grids, blocks and shared
// memory within the device's limits, every parameter bound, the tensors
// req implies, metadata, workspace and schedule in range. A plan is also
// refused when it runs another kernel than the handler's catalog names for
// the method.
//
// The plugin is asked only where the catalog kernel of the method covers
// the request (core.Kernel.Covers: its dtypes, cache dtype, head dims,
// page size and sparsity); otherwise the answer is an error wrapping
// core.ErrNoPlan that names what the kernel does not list, and the plugin
// is not called.
//
// Plans are kept by what they depend on: every field of the request but
// the per-batch quantities a plan declares it does not read
// (core.Plan.Reads), so that a plan that holds for a batch size (a graph
// request with a bound on the lengths) is asked for once per batch size
// for the life of a serving loop; a refusal is kept by the whole request.
// The plan is shared: callers must not modify it.
//
// Errors: core.ErrInvalidRequest for a malformed request
// (launch.CheckRequest); otherwise an error wrapping core.ErrNoPlan says
// why the kernel has no device plan (see KernelModules; the plugin's own
// "no plan"; a refused plan, which also wraps the *launch.PlanError).
func (r *Registry) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	rt, err := r.planRoute(req)
	if err != nil {
		return nil, err
	}
	return r.planKernel(ctx, req, rt)
}

// planRoute checks req (launch.CheckRequest) and returns the route of
// its backend, which must run device code.
func (r *Registry) planRoute(req *core.PlanRequest) (*route, error) {
	if err := launch.CheckRequest(req); err != nil {
		return nil, err
	}
	return r.deviceBackend(req.Backend)
}

// planKernel is PlanKernel by rt, the route of req.Backend.
func (r *Registry) planKernel(ctx context.Context, req *core.PlanRequest, rt *route) (*core.Plan, error) {
	if err := catalogCovers(rt, req); err != nil {
		rt.be.Log().Debug("no catalog kernel for the plan request", "backend", req.Backend, "method", req.Method.String(), "error", err)
		return nil, err
	}
	plans := &r.device(rt.be).plans
	// The modules first, kept after the first call: a plan is only as good
	// as the modules the lock file in force lets the host load.
	mods, err := r.modules(ctx, rt, req.Device)
	if err != nil {
		return nil, err
	}
	// A plan is kept by what it reads; a refusal by the whole request (what
	// made the plugin refuse is not known to be what its plans read).
	whole := req.Key(core.PlanReadsAll)
	e, ok := plans.get(plans.keyOf(req))
	if !ok {
		e, ok = plans.get(whole)
	}
	if ok {
		if e.why != nil {
			r.fellBack(rt.name, rt, *e.why, noDeviceCode, false)
		}
		return e.plan, e.err
	}
	var plan *core.Plan
	s, err := r.call(ctx, rt.be, rt.name, backend.PlanCall, "the plan request", func(ctx context.Context, c backend.Conn) (err error) {
		plan, err = c.PlanKernel(ctx, req)
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case s.verdict == moved:
		return r.planKernel(ctx, req, s.now)
	case s.verdict == refused:
		// The backend has no plan for this request: an expected answer.
		rt.be.Log().Debug("no device plan", "backend", req.Backend, "method", req.Method.String(), "error", s.o.Err)
		err = noPlanAnswer(s.o)
		plans.put(whole, planOutcome{err: err})
		return nil, err
	case s.verdict == failed:
		return nil, r.noPlan(rt, *s.o)
	}
	h, _ := rt.be.Description().Handler(req.Backend)
	if err := CheckPlan(plan, req, h, mods); err != nil {
		why := ReasonBadPlan.Unavailable(fmt.Errorf("%s: %w", rt.family, err))
		rt.be.Log().Warn("launch plan refused", "backend", req.Backend, "method", req.Method.String(), "error", err)
		err := r.noPlan(rt, why)
		plans.put(whole, planOutcome{err: err, why: &why})
		return nil, err
	}
	plan.ModuleSHA256 = moduleHashes(plan, mods)
	plans.putPlan(req, plan)
	return plan, nil
}

// catalogCovers is the one place where the host decides whether a plugin
// may be asked for a plan: only where the catalog kernel of req.Method of
// the handler req.Backend lists the request's dtype, cache dtype, head
// dims, page size and sparsity (core.Kernel.Covers). A plugin is never
// asked for a plan its catalog does not claim, so that a field it does not
// read (an FP8 cache, a top-k) cannot get it a plan for a request it does
// not know. The error wraps core.ErrNoPlan and names what no kernel lists.
func catalogCovers(rt *route, req *core.PlanRequest) error {
	k, ok := rt.handler.Kernel(req.Method)
	if !ok {
		return fmt.Errorf("%w: %s's catalog has no kernel for %s", core.ErrNoPlan, req.Backend, req.Method)
	}
	if err := k.Covers(req); err != nil {
		return fmt.Errorf("%s's catalog: %w", req.Backend, err)
	}
	return nil
}

// CheckPlan is the host's check of plan, a plugin's answer to req for the
// handler h, whose modules are mods: launch.Check against the modules and
// req.Device, and the kernel h's catalog names for req.Method. The error
// is a *launch.PlanError. attnplug conform applies it too.
func CheckPlan(plan *core.Plan, req *core.PlanRequest, h core.HandlerInfo, mods []core.KernelModule) error {
	if err := launch.Check(plan, req, mods, req.Device); err != nil {
		return err
	}
	k, ok := h.Kernel(req.Method)
	switch {
	case !ok:
		return &launch.PlanError{Launch: -1, Reason: fmt.Sprintf("the plan runs kernel %q for %s, which %s's catalog lacks", plan.Kernel, req.Method, h.Name)}
	case plan.Kernel != k.Name:
		return &launch.PlanError{Launch: -1, Reason: fmt.Sprintf("the plan runs kernel %q, but %s's catalog runs %q for %s", plan.Kernel, h.Name, k.Name, req.Method)}
	}
	return nil
}

// moduleHashes are the SHA-256 of the modules plan's launches name, of
// mods (the modules it was checked against): what a host must have
// loaded to prepare it.
func moduleHashes(plan *core.Plan, mods []core.KernelModule) map[string]string {
	out := map[string]string{}
	for _, l := range plan.Launches {
		for _, m := range mods {
			if m.Name == l.Module {
				out[m.Name] = m.SHA256
			}
		}
	}
	return out
}

// planOutcome is what a plan request got: a plan, or an error; why is
// set for a refusal the registry counts as a fallback.
type planOutcome struct {
	plan *core.Plan
	err  error
	why  *backend.Outcome
}

// planCache keeps the last planCapacity plan outcomes of a plugin, of
// planBudget bytes at most (planBytes), each by what it depends on: a plan by the quantities it declares it reads
// (core.Plan.Reads), so that a plan that holds for a batch size answers
// every step of that size; a refusal by the whole request. reads keeps,
// for the part of a request every plan depends on (its base), what the
// last plan for it read, which is how a new request of that base is keyed.
type planCache struct {
	mu    sync.Mutex
	order list.List // of planKeyed, most recent first
	byKey map[core.PlanKey]*list.Element
	bytes int64                           // planBytes of the outcomes kept
	reads map[core.PlanKey]core.PlanReads // by base key; bounded with the plans
}

// keyOf is the key of req in c: by what the plans of its base read, or by
// the whole request.
func (c *planCache) keyOf(req *core.PlanRequest) core.PlanKey {
	base := req.Key(0)
	c.mu.Lock()
	r, ok := c.reads[base]
	c.mu.Unlock()
	if !ok {
		r = core.PlanReadsAll
	}
	return req.Key(r)
}

// putPlan keeps plan, answered for req, by what it reads.
func (c *planCache) putPlan(req *core.PlanRequest, plan *core.Plan) {
	r := plan.Reads.Effective()
	base := req.Key(0)
	c.mu.Lock()
	if c.reads == nil || len(c.reads) >= planCapacity {
		c.reads = map[core.PlanKey]core.PlanReads{}
	}
	c.reads[base] = r
	c.mu.Unlock()
	c.put(req.Key(r), planOutcome{plan: plan})
}

type planKeyed struct {
	key core.PlanKey
	planOutcome
}

// planBytes is about what o holds in memory: its plan's metadata,
// schedule and launches, and a little for any outcome.
func planBytes(o planOutcome) int64 {
	n := int64(256)
	if p := o.plan; p != nil {
		for _, m := range p.Metadata {
			n += 4 * int64(len(m.Int32s))
		}
		n += 16*int64(len(p.Schedule)) + 256*int64(len(p.Launches)) + 64*int64(len(p.Tensors))
	}
	return n
}

func (c *planCache) get(k core.PlanKey) (planOutcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[k]
	if !ok {
		return planOutcome{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(planKeyed).planOutcome, true
}

func (c *planCache) put(k core.PlanKey, o planOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[core.PlanKey]*list.Element{}
	}
	if e, ok := c.byKey[k]; ok {
		c.bytes -= planBytes(e.Value.(planKeyed).planOutcome)
		e.Value = planKeyed{k, o}
		c.order.MoveToFront(e)
	} else {
		c.byKey[k] = c.order.PushFront(planKeyed{k, o})
	}
	c.bytes += planBytes(o)
	for c.order.Len() > 1 && (c.order.Len() > planCapacity || c.bytes > planBudget) {
		last := c.order.Back()
		c.order.Remove(last)
		kept := last.Value.(planKeyed)
		delete(c.byKey, kept.key)
		c.bytes -= planBytes(kept.planOutcome)
	}
}

// PlanStep returns the plan of one forward batch of an engine: the plan
// request made of what the engine's attention backend knows of it
// (core.StepRequest.PlanRequest: the one place an engine's facts become a
// plan request), planned and checked as PlanKernel plans and checks, with
// the bound the plan holds for, the page table's room per request and the
// plan's key. Queries the step offers split (core.StepRequest.QuerySplit)
// are asked split of a kernel whose catalog entry takes them, and whole of
// another. The errors are PlanKernel's, and core.ErrInvalidRequest,
// naming the field, for a step no engine sends.
func (r *Registry) PlanStep(ctx context.Context, s *core.StepRequest) (*core.StepPlan, error) {
	req, bound, err := s.PlanRequest()
	if err != nil {
		return nil, err
	}
	rt, err := r.planRoute(&req)
	if err != nil {
		return nil, err
	}
	if k, ok := rt.handler.Kernel(req.Method); req.QuerySplit && (!ok || !k.QuerySplit) {
		req.QuerySplit = false // offered, and the kernel takes its queries whole
	}
	plan, err := r.planKernel(ctx, &req, rt)
	if err != nil {
		return nil, err
	}
	out := &core.StepPlan{Request: req, Plan: plan, Key: req.Key(plan.Reads.Effective())}
	if plan.Reads.Effective()&core.PlanReadsSeqLens == 0 {
		out.MaxSeqLen = bound
		if bound > 0 && req.Shape.PageSize > 0 {
			out.PagesPerRequest = (bound + int64(req.Shape.PageSize) - 1) / int64(req.Shape.PageSize)
		}
	}
	return out, nil
}
