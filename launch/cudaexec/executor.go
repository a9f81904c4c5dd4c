package cudaexec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch"
)

// Buffer is device memory the host owns: a tensor it binds to a plan.
type Buffer struct {
	// Ptr is the device address.
	Ptr uint64
	// Bytes is the size of the allocation from Ptr on.
	Bytes int64
}

// Executor loads kernel modules into a CUDA device's primary context (the
// one a framework in the same process shares) and prepares checked plans
// for launch. It is safe for concurrent use; the launches themselves run
// inside Device.Do, on the device's thread.
//
// An image is loaded once, whoever loads it, and stays loaded while a Load
// holds it (until Drop) or an open Prepared launches it. Images of one
// module name may be loaded side by side: each plugin serving a backend
// hands its own (a swapped plugin, fa3 and dsa of other builds), and a plan
// checked against images names them (core.Plan.ModuleSHA256).
type Executor struct {
	dev device

	mu      sync.Mutex
	images  map[image]*loaded  // every image loaded, by module name and hash
	current map[string]*loaded // by module name: the image loaded or held last
	seq     int                // loads and holds so far: which image of a name is the last
	failed  []error            // unloads that failed, for Close to report
}

// image names one image of a module.
type image struct{ name, sha string }

type loaded struct {
	mod    core.KernelModule
	handle cuda.Module
	funcs  map[string]cuda.Function
	shared map[string]int // dynamic shared memory granted per entry
	holds  int            // Load calls holding it, less the Drop calls
	users  int            // the open Prepareds launching its entries
	seq    int            // when it was last loaded or held
}

// NewExecutor returns an Executor for dev. Close unloads its modules; dev
// stays open.
func NewExecutor(dev *cuda.Device) *Executor { return newExecutor(cudaDevice{dev}) }

func newExecutor(dev device) *Executor {
	return &Executor{dev: dev, images: map[image]*loaded{}, current: map[string]*loaded{}}
}

// device is what an Executor asks of a GPU outside the launches: its
// description, and work on its thread with its context current. It is a
// *cuda.Device (cudaDevice); the package's tests put a stand-in there that
// keeps the books of what is allocated, copied and freed.
type device interface {
	Info() cuda.Info
	Do(f func(c deviceCtx) error) error
}

// deviceCtx is the part of *cuda.Ctx that loads modules and prepares,
// updates and frees plans.
type deviceCtx interface {
	Alloc(n int64) (uint64, error)
	Free(p uint64) error
	CopyIn(dst uint64, src []byte) error
	CopyInAsync(dst uint64, src []byte, s cuda.Stream) error
	LoadModule(image []byte) (cuda.Module, error)
	UnloadModule(m cuda.Module) error
	Function(m cuda.Module, name string) (cuda.Function, error)
	SetMaxDynamicShared(f cuda.Function, n int) error
}

// cudaDevice is a *cuda.Device as a device.
type cudaDevice struct{ d *cuda.Device }

func (c cudaDevice) Info() cuda.Info { return c.d.Info() }

func (c cudaDevice) Do(f func(c deviceCtx) error) error {
	return c.d.Do(func(x *cuda.Ctx) error { return f(x) })
}

// Device returns the device as plans describe it.
func (e *Executor) Device() core.DeviceInfo { return DeviceInfo(e.dev.Info()) }

// DeviceInfo converts the cuda package's description of a device.
func DeviceInfo(i cuda.Info) core.DeviceInfo {
	shared := i.MaxSharedPerBlockOptin
	if shared == 0 {
		shared = i.MaxSharedPerBlock
	}
	return core.DeviceInfo{
		Platform: core.PlatformCUDA, Name: i.Name, ComputeCapability: i.Major*10 + i.Minor,
		SMs: i.SMs, MaxThreadsPerBlock: i.MaxThreadsPerBlock, MaxSharedPerBlock: shared, MaxGrid: i.MaxGrid,
	}
}

// Load checks each module (its SHA-256 matches its image, its format is one
// CUDA loads, the driver is not older than its image needs:
// launch.CheckDriver, its entries exist), loads each image not loaded
// yet, and holds every one until a Drop of it: the images of a plugin,
// held while it serves a backend. The last image loaded or held under a
// name is the one Prepare checks plans against. On an error, what this
// call loaded or held is given back, and the error is the first problem.
// A module whose image needs a newer driver (a PTX ISA newer than the
// driver reads) is refused before loading, the error naming the module,
// its PTX ISA or cubin architecture, the CUDA release and driver it needs
// and the driver found; when the driver refuses a PTX image anyway
// (cuda.ErrUnsupportedPTX), the error says the same.
func (e *Executor) Load(mods []core.KernelModule) error {
	var held []core.KernelModule
	for _, m := range mods {
		if err := e.loadOne(m); err != nil {
			e.Drop(held)
			return err
		}
		held = append(held, m)
	}
	return nil
}

// loadOne checks module m, and holds its image, loading it first when it
// is not loaded. The driver compiles a PTX image outside e.mu, so that
// Prepareds close meanwhile.
func (e *Executor) loadOne(m core.KernelModule) error {
	if got := core.ImageSHA256(m.Image); got != m.SHA256 {
		return fmt.Errorf("launch: module %s: image hash %s, declared %s", m.Name, got, m.SHA256)
	}
	if m.Platform != core.PlatformCUDA || (m.Format != core.FormatPTX && m.Format != core.FormatCUBIN) {
		return fmt.Errorf("launch: module %s is %s %s; this host loads CUDA ptx or cubin", m.Name, m.Platform, m.Format)
	}
	if err := launch.CheckDriver(m, e.dev.Info().DriverVersion); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	key := image{m.Name, m.SHA256}
	if e.hold(key, nil) {
		return nil
	}
	l := &loaded{mod: m, funcs: map[string]cuda.Function{}, shared: map[string]int{}}
	err := e.dev.Do(func(c deviceCtx) error {
		h, err := c.LoadModule(m.Image)
		if err != nil {
			return err
		}
		l.handle = h
		for _, en := range m.Entries {
			f, err := c.Function(h, en.Name)
			if err != nil {
				c.UnloadModule(h)
				return err
			}
			l.funcs[en.Name] = f
		}
		return nil
	})
	if err != nil {
		return loadError(m, err)
	}
	if e.hold(key, l) { // loaded meanwhile by another call, and held: ours goes
		if err := e.dev.Do(func(c deviceCtx) error { return c.UnloadModule(l.handle) }); err != nil {
			e.mu.Lock()
			e.failed = append(e.failed, fmt.Errorf("launch: unloading a second copy of module %s: %w", m.Name, err))
			e.mu.Unlock()
		}
	}
	return nil
}

// hold holds the image of key when it is loaded, and says so; else it
// installs l, held, when l is not nil.
func (e *Executor) hold(key image, l *loaded) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	if have := e.images[key]; have != nil {
		have.holds++
		have.seq = e.seq
		e.current[key.name] = have
		return true
	}
	if l != nil {
		l.holds, l.seq = 1, e.seq
		e.images[key] = l
		e.current[key.name] = l
	}
	return false
}

// Drop gives back a hold of each module's image that a Load took: an image
// no Load holds any more is unloaded once no Prepared launches it. An
// unload that fails is reported by Close.
func (e *Executor) Drop(mods []core.KernelModule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range mods {
		if l := e.images[image{m.Name, m.SHA256}]; l != nil && l.holds > 0 {
			l.holds--
			e.unloadIfUnused(l)
		}
	}
}

// unloadIfUnused unloads l when nothing holds or uses it, making the last
// other image of its name the current one. e.mu is held.
func (e *Executor) unloadIfUnused(l *loaded) {
	key := image{l.mod.Name, l.mod.SHA256}
	if l.holds > 0 || l.users > 0 || e.images[key] != l { // (not there: Close unloaded it)
		return
	}
	delete(e.images, key)
	if e.current[l.mod.Name] == l {
		delete(e.current, l.mod.Name)
		for k, o := range e.images {
			if k.name == l.mod.Name && (e.current[k.name] == nil || o.seq > e.current[k.name].seq) {
				e.current[k.name] = o
			}
		}
	}
	if err := e.dev.Do(func(c deviceCtx) error { return c.UnloadModule(l.handle) }); err != nil {
		e.failed = append(e.failed, fmt.Errorf("launch: unloading module %s (image %s): %w", l.mod.Name, l.mod.SHA256, err))
	}
}

// loadError is the error of module m's failed load: when the driver
// refused its PTX's ISA, it says what the image is and what it needs.
func loadError(m core.KernelModule, err error) error {
	if !errors.Is(err, cuda.ErrUnsupportedPTX) {
		return fmt.Errorf("launch: loading module %s (%s): %w", m.Name, m.Arch, err)
	}
	f, ferr := launch.DriverFloor(m)
	if ferr != nil {
		return fmt.Errorf("launch: loading module %s (%s for %s): %w; %v", m.Name, m.Format, m.Arch, err, ferr)
	}
	return fmt.Errorf("launch: loading module %s (%s for %s), %s, which needs %s: %w", m.Name, m.Format, m.Arch, f.Describe(), f.Needs(), err)
}

// Modules returns the modules Prepare checks plans against: the last
// image loaded or held under each name.
func (e *Executor) Modules() []core.KernelModule {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]core.KernelModule, 0, len(e.current))
	for _, l := range e.current {
		out = append(out, l.mod)
	}
	return out
}

// Close unloads every image, and reports the unloads that failed before.
// Close the Prepareds first: their launches run the images' code.
func (e *Executor) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := e.failed
	for key, l := range e.images {
		errs = append(errs, e.dev.Do(func(c deviceCtx) error { return c.UnloadModule(l.handle) }))
		delete(e.images, key)
	}
	clear(e.current)
	e.failed = nil
	return errors.Join(errs...)
}

// Holds reports whether the images a plan was checked against
// (core.Plan.ModuleSHA256: module name to image hash) are loaded, so that
// PrepareChecked takes it. A plan that names none (a Source that stamps no
// hashes) is taken on the last image of each name.
func (e *Executor) Holds(images map[string]string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, sha := range images {
		if e.images[image{name, sha}] == nil {
			return false
		}
	}
	return true
}

// ErrOtherImages marks a plan refused because it was checked against images
// other than those loaded under its modules' names: the plugin serving its
// backend changed since they were loaded (load the Source's modules again).
var ErrOtherImages = errors.New("launch: the plan was checked against other images than those loaded")

// Prepared is a checked plan with its metadata on the device and its
// workspace allocated: launch it once per layer with that layer's tensors.
// Launch is not safe for concurrent use of one Prepared, and its launches
// must not overlap on the device (queue them on one stream): they share its
// workspace and metadata, which a kernel may write (the Hopper prefill's
// work counters).
type Prepared struct {
	e      *Executor
	req    core.PlanRequest
	plan   *core.Plan
	specs  []core.TensorSpec
	need   []int64 // bytes per tensor
	meta   map[string]Buffer
	ws     Buffer
	steps  []step
	pinner runtime.Pinner
	mods   []*loaded // the modules its launches run, kept loaded until Close
}

type step struct {
	fn      cuda.Function
	l       core.Launch
	args    []byte           // the parameters' values (args.go), 64-byte aligned
	ptrs    []unsafe.Pointer // cuLaunchKernel's kernelParams, into args
	tensors []tensorArg      // addresses of the layer's tensors, written at each launch
	maps    []mapArg         // TMA descriptors over the layer's tensors, encoded at each launch
	ex      *cuda.ExConfig   // the cluster and programmatic launch attributes, pinned; nil: none
}

// tensorArg is a tensor's address at byte off of a step's args.
type tensorArg struct {
	off, tensor int
}

// Prepare checks plan p (answered for req) against the loaded modules and
// the device, uploads its metadata and allocates its workspace: the work
// done once per batch. On an error nothing stays allocated.
func (e *Executor) Prepare(req *core.PlanRequest, p *core.Plan) (*Prepared, error) {
	if req == nil || p == nil {
		return nil, errNoPlan
	}
	mods, loadedBy, used := e.snapshot(p, false)
	if err := launch.Check(p, req, mods, e.Device()); err != nil {
		e.release(used)
		return nil, err
	}
	return e.prepare(req, p, loadedBy, used)
}

// PrepareChecked is Prepare for a plan already checked by launch.Check
// against the modules this Executor loaded and its device, as
// registry.PlanKernel checks every plan it hands: the plan is not checked
// a second time; only its modules and entries are looked up: the images
// its ModuleSHA256 names (the registry's: the images it checked the plan
// against), or without it the last image of each name. A module that is
// not loaded is an error, and one of which the plan's image is not loaded
// an error wrapping ErrOtherImages (Holds says whether they are loaded).
// On an error nothing stays allocated.
func (e *Executor) PrepareChecked(req *core.PlanRequest, p *core.Plan) (*Prepared, error) {
	if req == nil || p == nil {
		return nil, errNoPlan
	}
	_, loadedBy, used := e.snapshot(p, true)
	if err := checkLoaded(p, loadedBy); err != nil {
		e.release(used)
		return nil, err
	}
	return e.prepare(req, p, loadedBy, used)
}

// checkLoaded checks that the modules and entries of a checked plan's
// launches are among those loaded, with the images it was checked against.
func checkLoaded(p *core.Plan, loadedBy map[string]*loaded) error {
	for i, l := range p.Launches {
		ld := loadedBy[l.Module]
		if ld == nil {
			return fmt.Errorf("launch: launch %d: module %s is not loaded", i, l.Module)
		}
		if _, ok := ld.funcs[l.Entry]; !ok {
			return fmt.Errorf("launch: launch %d: module %s has no entry %s loaded", i, l.Module, l.Entry)
		}
		if _, ok := ld.mod.Entry(l.Entry); !ok {
			return fmt.Errorf("launch: launch %d: module %s declares no entry %s", i, l.Module, l.Entry)
		}
		if want, ok := p.ModuleSHA256[l.Module]; p.ModuleSHA256 != nil && (!ok || want != ld.mod.SHA256) {
			return fmt.Errorf("%w: launch %d: module %s is loaded with image %s, the plan was checked against %q: the plugin serving it changed since its modules were loaded",
				ErrOtherImages, i, l.Module, ld.mod.SHA256, want)
		}
	}
	return nil
}

// errNoPlan is the error of a call given no plan request or no plan.
var errNoPlan = errors.New("launch: no plan request or no plan")

// snapshot returns the modules Prepare checks plans against (the last
// image of each name), and by name the images the launches of p run: with
// byHash, those its ModuleSHA256 names where they are loaded (else the
// last image, which checkLoaded refuses), without it the last image of
// each name. The images p runs are taken for a Prepared (release gives
// them back), so that none is unloaded while it launches them.
func (e *Executor) snapshot(p *core.Plan, byHash bool) ([]core.KernelModule, map[string]*loaded, []*loaded) {
	e.mu.Lock()
	defer e.mu.Unlock()
	mods := make([]core.KernelModule, 0, len(e.current))
	loadedBy := map[string]*loaded{}
	for n, l := range e.current {
		mods = append(mods, l.mod)
		loadedBy[n] = l
	}
	var used []*loaded
	for _, l := range p.Launches {
		if sha, ok := p.ModuleSHA256[l.Module]; byHash && ok {
			if ld := e.images[image{l.Module, sha}]; ld != nil {
				loadedBy[l.Module] = ld
			}
		}
		if ld := loadedBy[l.Module]; ld != nil && !slices.Contains(used, ld) {
			ld.users++
			used = append(used, ld)
		}
	}
	return mods, loadedBy, used
}

// release gives back the images snapshot took, unloading those no Load
// holds and no Prepared uses any more.
func (e *Executor) release(used []*loaded) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range used {
		l.users--
		e.unloadIfUnused(l)
	}
}

// prepare uploads the metadata of a checked plan, allocates its workspace
// and binds its launches' arguments. Whatever fails after the first
// allocation frees what was allocated and unpins what was pinned.
func (e *Executor) prepare(req *core.PlanRequest, p *core.Plan, loadedBy map[string]*loaded, used []*loaded) (*Prepared, error) {
	pr := &Prepared{e: e, req: *req, plan: p, specs: p.Tensors, meta: map[string]Buffer{}, mods: used}
	index := map[string]int{}
	for i, t := range p.Tensors {
		index[t.Name] = i
		pr.need = append(pr.need, t.Bytes())
	}
	fail := func(err error) (*Prepared, error) {
		if cerr := pr.Close(); cerr != nil {
			err = fmt.Errorf("%w (and freeing the plan's buffers: %w)", err, cerr)
		}
		return nil, err
	}
	if err := e.dev.Do(func(c deviceCtx) error { return pr.upload(c, loadedBy) }); err != nil {
		return fail(fmt.Errorf("launch: preparing the plan: %w", err))
	}
	for _, l := range p.Launches {
		st, err := pr.bind(l, loadedBy[l.Module], index)
		if err != nil {
			return fail(err)
		}
		pr.steps = append(pr.steps, st)
	}
	return pr, nil
}

// upload puts the plan's metadata on the device, allocates its workspace
// and grants its entries the dynamic shared memory they launch with.
func (pr *Prepared) upload(c deviceCtx, loadedBy map[string]*loaded) error {
	for _, m := range pr.plan.Metadata {
		if _, dup := pr.meta[m.Name]; dup {
			return fmt.Errorf("metadata buffer %q declared twice", m.Name)
		}
		n := int64(4 * max(len(m.Int32s), 1))
		ptr, err := c.Alloc(n)
		if err != nil {
			return err
		}
		pr.meta[m.Name] = Buffer{ptr, n}
		if err := c.CopyIn(ptr, int32Bytes(m.Int32s)); err != nil {
			return err
		}
	}
	if pr.plan.WorkspaceBytes > 0 {
		ptr, err := c.Alloc(pr.plan.WorkspaceBytes)
		if err != nil {
			return err
		}
		pr.ws = Buffer{ptr, pr.plan.WorkspaceBytes}
	}
	for _, l := range pr.plan.Launches {
		ld := loadedBy[l.Module]
		fn := ld.funcs[l.Entry]
		if int(l.SharedBytes) > 48<<10 && ld.shared[l.Entry] < int(l.SharedBytes) {
			if err := c.SetMaxDynamicShared(fn, int(l.SharedBytes)); err != nil {
				return err
			}
			ld.shared[l.Entry] = int(l.SharedBytes)
		}
	}
	return nil
}

// bind makes the step of launch l of module ld: its argument slots, with
// the metadata and workspace addresses written and the tensors' left to
// each Launch, pinned for cuLaunchKernel.
func (pr *Prepared) bind(l core.Launch, ld *loaded, index map[string]int) (step, error) {
	en, _ := ld.mod.Entry(l.Entry)
	if len(en.Params) == 0 {
		return step{}, fmt.Errorf("launch: entry %s has no parameters", l.Entry)
	}
	st := step{fn: ld.funcs[l.Entry], l: l, ptrs: make([]unsafe.Pointer, len(en.Params))}
	offs, size := layout(en.Params)
	st.args = aligned(size)
	for i, par := range en.Params {
		var a core.Arg
		for _, x := range l.Args {
			if x.Param == par.Name {
				a = x
			}
		}
		if err := pr.put(&st, offs[i], par.Bytes(), a, index); err != nil {
			return step{}, fmt.Errorf("launch: %s.%s: parameter %q: %w", l.Module, l.Entry, par.Name, err)
		}
	}
	pr.pinner.Pin(&st.args[0])
	for i := range st.ptrs {
		st.ptrs[i] = unsafe.Pointer(&st.args[offs[i]])
	}
	pr.pinner.Pin(&st.ptrs[0])
	if l.Cluster != ([3]uint32{}) || l.Programmatic {
		st.ex = cuda.NewExConfig(cuda.LaunchConfig{Grid: l.Grid, Block: l.Block, Shared: l.SharedBytes,
			Cluster: l.Cluster, Programmatic: l.Programmatic})
		pr.pinner.Pin(st.ex)
	}
	return st, nil
}

// Plan returns the plan p was prepared from.
func (p *Prepared) Plan() *core.Plan { return p.plan }

// Workspace returns the plan's workspace on the device.
func (p *Prepared) Workspace() Buffer { return p.ws }

// Tensors returns the tensors Launch binds, in order, with their shapes.
func (p *Prepared) Tensors() []core.TensorSpec { return p.specs }

// Update replaces the metadata with that of plan np, answered for req,
// keeping the launches, buffers and workspace: for a captured graph, whose
// launches must not change, when a batch of the same size comes with other
// lengths (a plan asked with PlanRequest.Graph). np must have the same
// launches and metadata sizes and fit the workspace; it is checked as
// Prepare checks, against the images p runs. The new metadata is copied on stream s, so launches
// queued on s before it still read the old metadata and launches (or a
// graph replay) queued after it read the new. Call it outside Device.Do.
func (p *Prepared) Update(s cuda.Stream, req *core.PlanRequest, np *core.Plan) error {
	if req == nil || np == nil {
		return errNoPlan
	}
	if err := launch.Check(np, req, p.modules(), p.e.Device()); err != nil {
		return err
	}
	return p.UpdateChecked(s, req, np)
}

// UpdateChecked is Update for a plan already checked by launch.Check
// against the modules this Executor loaded and its device, as
// registry.PlanKernel checks every plan it hands (the plan of a
// PrepareChecked, updated): np is not checked a second time. It must still
// have the prepared plan's launches and tensors and fit its metadata
// buffers and workspace, or it is refused and nothing is copied.
func (p *Prepared) UpdateChecked(s cuda.Stream, req *core.PlanRequest, np *core.Plan) error {
	if req == nil || np == nil {
		return errNoPlan
	}
	if len(np.Launches) != len(p.plan.Launches) || np.WorkspaceBytes > p.ws.Bytes {
		return fmt.Errorf("launch: update: the plan's launches or workspace differ from the prepared plan's")
	}
	// The tensors bound at each launch are checked against the prepared
	// specs: a plan of other tensors (more query rows) would run on
	// buffers sized for the old ones.
	if !reflect.DeepEqual(np.Tensors, p.specs) {
		return fmt.Errorf("launch: update: the plan's tensors differ from the prepared plan's")
	}
	for i, l := range np.Launches {
		o := p.plan.Launches[i]
		if want, ok := np.ModuleSHA256[l.Module]; np.ModuleSHA256 != nil && (!ok || want != p.image(l.Module)) {
			return fmt.Errorf("launch: update: launch %d: the plan was checked against module %s's image %q, the prepared plan runs %s", i, l.Module, want, p.image(l.Module))
		}
		if l.Module != o.Module || l.Entry != o.Entry || l.Grid != o.Grid || l.Block != o.Block || l.SharedBytes != o.SharedBytes || l.Cluster != o.Cluster || l.Programmatic != o.Programmatic || !reflect.DeepEqual(l.Args, o.Args) {
			return fmt.Errorf("launch: update: launch %d differs from the prepared plan's", i)
		}
	}
	for _, m := range np.Metadata {
		if b, ok := p.meta[m.Name]; !ok || int64(4*len(m.Int32s)) > b.Bytes {
			return fmt.Errorf("launch: update: metadata %q does not fit the prepared buffer", m.Name)
		}
	}
	err := p.e.dev.Do(func(c deviceCtx) error {
		for _, m := range np.Metadata {
			if err := c.CopyInAsync(p.meta[m.Name].Ptr, int32Bytes(m.Int32s), s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.req, p.plan = *req, np
	return nil
}

// Launch queues the plan's launches on stream s with tensors bound in the
// order of Tensors(): LaunchBatch's and LaunchLayer's, in the plan's order.
// It must run inside the device's Do (c is its Ctx); it makes no RPC, no
// host copy and no allocation, so it may be captured in a CUDA graph. A
// buffer smaller than its tensor is refused.
func (p *Prepared) Launch(c *cuda.Ctx, s cuda.Stream, tensors []Buffer) error {
	return p.launch(c, s, tensors, func(st *step) bool { return true })
}

// LaunchBatch queues the plan's PerBatch launches (a scheduler reading the
// batch's lengths from the tensors every layer shares): the once-per-step
// half of Launch, for a host that runs one batch through many layers. Run
// it before the step's LaunchLayer calls, on the same stream, once the
// step's shared tensors are written: a layer's launches may read what
// they hold (devkernels' decode, the page table) before they wait for the
// launch before them. A plan without PerBatch launches queues nothing.
func (p *Prepared) LaunchBatch(c *cuda.Ctx, s cuda.Stream, tensors []Buffer) error {
	return p.launch(c, s, tensors, func(st *step) bool { return st.l.PerBatch })
}

// LaunchLayer queues the plan's launches that are not PerBatch: the
// per-layer half of Launch, after the step's LaunchBatch.
func (p *Prepared) LaunchLayer(c *cuda.Ctx, s cuda.Stream, tensors []Buffer) error {
	return p.launch(c, s, tensors, func(st *step) bool { return !st.l.PerBatch })
}

func (p *Prepared) launch(c *cuda.Ctx, s cuda.Stream, tensors []Buffer, which func(*step) bool) error {
	if len(tensors) != len(p.specs) {
		return fmt.Errorf("launch: %d tensors bound, the plan has %d", len(tensors), len(p.specs))
	}
	for i, t := range tensors {
		if t.Ptr == 0 || t.Bytes < p.need[i] {
			return fmt.Errorf("launch: tensor %s: %d bytes at %#x bound, the plan needs %d", p.specs[i].Name, t.Bytes, t.Ptr, p.need[i])
		}
	}
	for i := range p.steps {
		st := &p.steps[i]
		if !which(st) {
			continue
		}
		for _, ta := range st.tensors {
			binary.LittleEndian.PutUint64(st.args[ta.off:], tensors[ta.tensor].Ptr)
		}
		for k := range st.maps {
			if err := st.maps[k].encode(c, st.args, tensors); err != nil {
				return fmt.Errorf("launch: %s.%s: %w", st.l.Module, st.l.Entry, err)
			}
		}
		var err error
		if st.ex != nil {
			err = c.LaunchEx(st.fn, st.ex, s, &st.ptrs[0])
		} else {
			err = c.Launch(st.fn, st.l.Grid, st.l.Block, st.l.SharedBytes, s, &st.ptrs[0])
		}
		if err != nil {
			return fmt.Errorf("launch: %s.%s: %w", st.l.Module, st.l.Entry, err)
		}
	}
	return nil
}

// modules are the modules of the images p's launches run.
func (p *Prepared) modules() []core.KernelModule {
	out := make([]core.KernelModule, len(p.mods))
	for i, l := range p.mods {
		out[i] = l.mod
	}
	return out
}

// image is the hash of the image of module name that p's launches run.
func (p *Prepared) image(name string) string {
	for _, l := range p.mods {
		if l.mod.Name == name {
			return l.mod.SHA256
		}
	}
	return ""
}

// Close frees the metadata and the workspace, unpins the launches'
// arguments and gives back its images (one no Load holds any more is
// unloaded with the last Prepared using it); a second Close frees nothing.
func (p *Prepared) Close() error {
	p.pinner.Unpin()
	err := p.e.dev.Do(func(c deviceCtx) error {
		var errs []error
		for n, b := range p.meta {
			errs = append(errs, c.Free(b.Ptr))
			delete(p.meta, n)
		}
		errs = append(errs, c.Free(p.ws.Ptr))
		p.ws = Buffer{}
		return errors.Join(errs...)
	})
	p.e.release(p.mods)
	p.mods = nil
	return err
}

func int32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}
