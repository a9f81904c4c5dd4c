package devkernels

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch"
)

// Set is device code built ahead of time from CUDA C sources: the images
// `make device-code` (devkernels/gen) compiled and wrote with a manifest
// into a package's images/ directory, embedded by that package, and, where
// no image serves a device (stale sources, an architecture none was built
// for, $ATTNPLUG_DEVICE_CODE=nvrtc), NVRTC's build of the same sources.
// The plugins' kernels are one set (Kernels), the fills of the
// verification layer another (package devkernels/fill), so that a binary
// embeds only the sets it links.
type Set struct {
	// Name names the set, for gen's -set and in messages.
	Name string
	// FS holds images/manifest.json and the images it lists.
	FS fs.FS
	// Sources returns each module's CUDA C source as it is compiled.
	Sources func() map[string]string
	// Archs returns the architectures a module is built for ahead of time.
	Archs func(module string) []string
	// Spec returns the modules a device of compute capability cc runs,
	// without their images: names, entries, the catalog kernels they run.
	Spec func(cc int) []core.KernelModule
	// Virtual returns the architecture NVRTC compiles a module for on a
	// device of compute capability cc.
	Virtual func(module string, cc int) string

	mu       sync.Mutex
	compiled map[int]result       // NVRTC's builds, by compute capability
	sharedBy map[int]sharedResult // the entries' shared memory, by compute capability
}

// Stale returns why the images the plugins' kernels embed cannot serve
// their current sources, or "" when they can (Kernels.Stale).
func Stale() string { return Kernels.Stale() }

// Stale returns why the embedded images cannot serve the current sources,
// or "" when they can: the check `make test` runs, so that images are
// rebuilt with every change of the sources.
func (s *Set) Stale() string {
	_, why := s.embedded()
	return why
}

// embedded returns the manifest of the embedded images, and why they
// cannot be used for the current sources: none built, or built from other
// sources (stale). why is "" when they can.
func (s *Set) embedded() (m Manifest, why string) {
	data, err := fs.ReadFile(s.FS, "images/manifest.json")
	if err != nil {
		return m, fmt.Sprintf("no device code of the %s set was built ahead of time (make device-code)", s.Name)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Sprintf("the %s set's images/manifest.json: %v", s.Name, err)
	}
	for name, src := range s.Sources() {
		if got := m.Sources[name]; got != SourceSHA256(src) {
			return m, fmt.Sprintf("the images of %s were built from other sources than these (make device-code)", name)
		}
	}
	return m, ""
}

// aheadOfTime returns the modules for a device of compute capability cc
// from the embedded images: for each module, the cubin of the same major
// architecture and the highest minor up to cc's (a cubin runs on any GPU
// of its major revision and as new a minor), else the PTX of the highest
// virtual architecture up to cc (the driver JIT-compiles it). why says
// why the images cannot serve cc, "" when they can.
func (s *Set) aheadOfTime(cc int) (mods []core.KernelModule, why string) {
	if os.Getenv(EnvDeviceCode) == "nvrtc" {
		return nil, "$" + EnvDeviceCode + " is nvrtc"
	}
	m, why := s.embedded()
	if why != "" {
		return nil, why
	}
	mods = s.Spec(cc)
	for i := range mods {
		best := bestImage(m.Images, mods[i].Name, cc)
		if best == nil {
			return nil, fmt.Sprintf("no image of %s built ahead of time runs on compute capability %d.%d", mods[i].Name, cc/10, cc%10)
		}
		image, err := fs.ReadFile(s.FS, "images/"+best.File)
		if err != nil {
			return nil, fmt.Sprintf("images/%s: %v", best.File, err)
		}
		if sum := core.ImageSHA256(image); sum != best.SHA256 {
			return nil, fmt.Sprintf("images/%s hashes to %s, the manifest says %s", best.File, sum, best.SHA256)
		}
		mods[i].Arch, mods[i].Format, mods[i].Image, mods[i].SHA256 = best.Arch, best.Format, image, best.SHA256
	}
	return mods, ""
}

// bestImage is the image of module that serves compute capability cc
// best: a cubin it runs before any PTX, the newest architecture first;
// nil when none runs (the host's own rule, launch.ArchRuns).
func bestImage(images []ManifestImage, module string, cc int) *ManifestImage {
	score := func(im *ManifestImage) int { // higher is better; 0 unusable
		n := archNumber(im.Arch)
		if n == 0 || launch.ArchRuns(core.KernelModule{Name: im.Module, Arch: im.Arch, Format: im.Format}, cc) != nil {
			return 0
		}
		if im.Format == core.FormatCUBIN {
			return 1000 + n
		}
		return n
	}
	var best *ManifestImage
	for j := range images {
		im := &images[j]
		if im.Module == module && score(im) > 0 && (best == nil || score(im) > score(best)) {
			best = im
		}
	}
	return best
}

// build compiles every module a device of compute capability cc runs with
// NVRTC, each for its virtual architecture, once for each cc.
func (s *Set) build(cc int) ([]core.KernelModule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.compiled[cc]; ok {
		return r.mods, r.err
	}
	mods, err := s.compile(cc)
	if s.compiled == nil {
		s.compiled = map[int]result{}
	}
	s.compiled[cc] = result{mods, err}
	return mods, err
}

// compile is build's work, uncached.
func (s *Set) compile(cc int) ([]core.KernelModule, error) {
	mods := s.Spec(cc)
	sources := s.Sources()
	for i := range mods {
		arch := s.Virtual(mods[i].Name, cc)
		ptx, err := cuda.CompilePTX(sources[mods[i].Name], mods[i].Name+".cu", append([]string{"--gpu-architecture=" + arch}, Flags...)...)
		if err != nil {
			return nil, fmt.Errorf("%w: compiling %s for %s: %w", core.ErrNoPlan, mods[i].Name, arch, err)
		}
		mods[i].Arch = arch
		mods[i].Format = core.FormatPTX
		mods[i].Image = []byte(ptx)
		mods[i].SHA256 = core.ImageSHA256(mods[i].Image)
	}
	return mods, nil
}

// Builder hands out the device code of a Set (default Kernels) for a
// device, once per compute capability: the images built ahead of time for
// its architecture, or NVRTC's build. It is safe for concurrent use.
type Builder struct {
	// Set is the device code built (nil: Kernels).
	Set *Set
	// Log, when set, is told when NVRTC compiles because no image built
	// ahead of time serves the device, and why.
	Log func(msg string)

	mu    sync.Mutex
	built map[string]result
}

type result struct {
	mods []core.KernelModule
	err  error
}

// Modules returns the device code for dev: the images built ahead of time
// for its architecture, or, where none serves it, PTX that NVRTC compiles
// for its compute capability on the first call for that capability. It
// wraps core.ErrNoPlan for a device that is not CUDA sm_80 or newer, and
// when NVRTC is needed and cannot be loaded.
func (b *Builder) Modules(dev core.DeviceInfo) ([]core.KernelModule, error) {
	if dev.Platform != core.PlatformCUDA {
		return nil, fmt.Errorf("%w: device code is CUDA, the device is %s", core.ErrNoPlan, dev.Platform)
	}
	if dev.ComputeCapability < 80 {
		return nil, fmt.Errorf("%w: the kernels need compute capability 8.0 or newer, the device has %d.%d",
			core.ErrNoPlan, dev.ComputeCapability/10, dev.ComputeCapability%10)
	}
	set := b.Set
	if set == nil {
		set = Kernels
	}
	arch := fmt.Sprintf("compute_%d", dev.ComputeCapability)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.built[arch]; ok {
		return r.mods, r.err
	}
	if b.built == nil {
		b.built = map[string]result{}
	}
	mods, why := set.aheadOfTime(dev.ComputeCapability)
	if why == "" {
		b.built[arch] = result{mods: mods}
		return mods, nil
	}
	if b.Log != nil {
		b.Log(fmt.Sprintf("compiling the device code for %s with NVRTC: %s", arch, why))
	}
	mods, err := set.build(dev.ComputeCapability)
	if err != nil {
		err = fmt.Errorf("%w (and %s)", err, why)
	}
	b.built[arch] = result{mods, err}
	return mods, err
}

// Code is the device code of the CUDA plugins (fa3, flashinfer, dsa) for
// their backends (backendkit.Backend.WithDeviceCode): the modules of
// Kernels, built once per architecture, and Plan. Its zero value is ready;
// it is safe for concurrent use.
type Code struct{ build Builder }

// Runs reports whether a module of Kernels runs catalog kernel k, a kernel
// of a CUDA platform.
func (c *Code) Runs(k core.Kernel) bool {
	cuda := slices.ContainsFunc(k.Hardware, func(h core.Hardware) bool { return slices.Contains(h.Platforms, core.PlatformCUDA) })
	return cuda && slices.ContainsFunc(Spec(), func(m core.KernelModule) bool { return slices.Contains(m.Kernels, k.Name) })
}

// Modules returns the modules for dev (Builder.Modules).
func (c *Code) Modules(dev core.DeviceInfo) ([]core.KernelModule, error) { return c.build.Modules(dev) }

// Plan returns the launches that run k on req's batch (the package's Plan).
func (c *Code) Plan(k core.Kernel, req *core.PlanRequest) (*core.Plan, error) { return Plan(k, req) }
