package devicehost

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch/cudaexec"
)

// Source hands a host device code and checked plans: a
// *registry.Registry (each image hashed and pinned by the lock file, each
// plan checked with registry.CheckPlan against those modules and the
// device), or a *client.Client of attnplug serve (whose registry did the
// same). A Host checks nothing a Source checked.
type Source interface {
	KernelModules(ctx context.Context, backend string, dev core.DeviceInfo) ([]core.KernelModule, error)
	PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error)
}

// Host is the device side of a Go host, FlashInfer's plan-then-run
// object on one device: it asks its Source for a backend's modules once
// (and again after the Source moved the backend to another plugin) and
// loads them (Load), asks for a batch's plan and prepares it, checked
// once, by the Source (Plan), and the Prepared it returns launches a
// layer with no RPC, no host copy and no allocation. It is safe for
// concurrent use; a Prepared is not.
type Host struct {
	dev  *cuda.Device
	exec *cudaexec.Executor
	src  Source

	mu     sync.Mutex
	loaded map[string]error               // by backend: nil when its modules are loaded
	held   map[string][]core.KernelModule // by backend: the modules loaded for it last
}

// OpenHost opens CUDA device 0 as a Host whose device code and plans come
// from src. The error wraps cuda.ErrUnavailable on a machine without a
// usable GPU. The caller closes the Host.
func OpenHost(src Source) (*Host, error) {
	dev, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	return NewHost(dev, src), nil
}

// NewHost returns a Host on dev, an open device it then owns (Close
// closes it), whose device code and plans come from src (nil: none; the
// caller loads modules and prepares plans it made itself).
func NewHost(dev *cuda.Device, src Source) *Host {
	return &Host{dev: dev, exec: cudaexec.NewExecutor(dev), src: src, loaded: map[string]error{}, held: map[string][]core.KernelModule{}}
}

// CUDA is the Host's device, for the launches and the memory of its
// caller (Device.Do).
func (h *Host) CUDA() *cuda.Device { return h.dev }

// Executor is the Host's executor: the modules loaded into the device's
// primary context.
func (h *Host) Executor() *cudaexec.Executor { return h.exec }

// Device describes the device as plan requests name it.
func (h *Host) Device() core.DeviceInfo { return h.exec.Device() }

// Load asks the Source for the modules of the plugin serving backend, for
// this device, and loads them, once per backend: a later call returns
// the first call's outcome. "No device code" is an error wrapping
// core.ErrNoPlan. After the Source moves backend to another plugin (a
// registry's Reload, a hot swap of attnplug serve), Plan loads the new
// plugin's modules when a plan names images other than those loaded.
func (h *Host) Load(ctx context.Context, backend string) error {
	if h.src == nil {
		return fmt.Errorf("%w: this host has no source of device code", core.ErrNoPlan)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err, ok := h.loaded[backend]; ok {
		return err
	}
	err := h.load(ctx, backend)
	h.loaded[backend] = err
	return err
}

// load asks the Source for backend's modules, loads them, and gives back
// those loaded for it before (the executor unloads an image no backend
// holds and no plan runs). h.mu is held.
func (h *Host) load(ctx context.Context, backend string) error {
	mods, err := h.src.KernelModules(ctx, backend, h.Device())
	if err != nil {
		return err
	}
	if err := h.exec.Load(mods); err != nil {
		return err
	}
	h.exec.Drop(h.held[backend])
	h.held[backend] = mods
	return nil
}

// routeTries bounds how often Plan asks again for a plan it could not
// prepare on the modules it then loaded: each try saw the Source move the
// backend to another plugin between its answers.
const routeTries = 3

// Plan loads the modules of req.Backend (Load), asks the Source for the
// plan of req, which it checks, and prepares it on this device without
// checking it again: its metadata uploaded, its workspace allocated.
// A plan checked against images that are not loaded (the Source's route
// for the backend changed since Load; core.Plan.ModuleSHA256, which the
// registry stamps; a plan that names none runs on the images its backend
// holds) has the Source's modules for the backend loaded again,
// those of before given back, and is prepared on them; the plan is asked
// again only when they are not its images either. The Prepareds made
// before keep running the images they were made on. req.Device must be
// this device (Device). "No device plan" is an error wrapping
// core.ErrNoPlan. The caller closes the Prepared.
func (h *Host) Plan(ctx context.Context, req *core.PlanRequest) (*cudaexec.Prepared, error) {
	if req.Device != h.Device() {
		return nil, fmt.Errorf("%w: the plan request is for %s, this host's device is %s", core.ErrInvalidRequest, req.Device.Name, h.Device().Name)
	}
	if err := h.Load(ctx, req.Backend); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		p, err := h.src.PlanKernel(ctx, req)
		if err != nil {
			return nil, err
		}
		if p.ModuleSHA256 == nil {
			h.mu.Lock()
			p = stamped(p, h.held[req.Backend])
			h.mu.Unlock()
		}
		if !h.exec.Holds(p.ModuleSHA256) {
			h.mu.Lock()
			err = h.load(ctx, req.Backend)
			h.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
		pr, err := h.exec.PrepareChecked(req, p)
		if err == nil || try == routeTries || !errors.Is(err, cudaexec.ErrOtherImages) {
			return pr, err
		}
	}
}

// stamped is p naming the images of mods its launches run, for a plan
// from a Source that names none (core.Plan.ModuleSHA256): the images the
// plan's backend holds, not the last of each name another backend loaded.
// p itself is not changed.
func stamped(p *core.Plan, mods []core.KernelModule) *core.Plan {
	images := map[string]string{}
	for _, l := range p.Launches {
		for _, m := range mods {
			if m.Name == l.Module {
				images[m.Name] = m.SHA256
			}
		}
	}
	if len(images) == 0 {
		return p
	}
	q := *p
	q.ModuleSHA256 = images
	return &q
}

// Close unloads the modules and closes the device.
func (h *Host) Close() error {
	return errors.Join(h.exec.Close(), h.dev.Close())
}
