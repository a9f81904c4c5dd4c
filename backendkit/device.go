package backendkit

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
)

// Device code: a Backend whose catalog holds a CUDA absorbed-MLA kernel
// (the fa3 and flashinfer families) hands the host the device code of
// package devkernels and plans its launches: it is a core.KernelPlanner,
// and its description says so (core.Description.DeviceCode).

// maxModuleDevices bounds the devices whose modules a Backend keeps; the
// modules of any further device are built at every call.
const maxModuleDevices = 16

// moduleBuild is the device code built, or being built, for one device.
type moduleBuild struct {
	done chan struct{} // closed when mods and err are set
	mods []core.KernelModule
	err  error
}

// deviceModules caches the device code a Backend built, per device.
type deviceModules struct {
	mu    sync.Mutex
	byDev map[core.DeviceInfo]*moduleBuild
}

// Describe returns the rules' description, with DeviceCode set when a
// kernel of the catalog has device code.
func (b *Backend) Describe(ctx context.Context) (*core.Description, error) {
	d, err := b.RuleBackend.Describe(ctx)
	if err != nil {
		return nil, err
	}
	d.DeviceCode = hasDeviceCode(d)
	return d, nil
}

// hasDeviceCode reports whether a kernel of d's catalogs has device code.
func hasDeviceCode(d *core.Description) bool {
	return slices.ContainsFunc(d.Handlers, func(h core.HandlerInfo) bool {
		return slices.ContainsFunc(h.Kernels, onCUDA)
	})
}

// KernelModules returns the device code of package devkernels built for
// dev. The first call for a device builds it (NVRTC: seconds); later calls
// for the same device, concurrent ones included, share that build and its
// outcome. A build that failed is not retried: without NVRTC, or for a
// device devkernels has no code for, the error wraps core.ErrNoPlan. A
// Backend without device code answers an error wrapping core.ErrNoPlan.
// When ctx ends first, the build goes on for the next caller.
func (b *Backend) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	if !d.DeviceCode {
		return nil, fmt.Errorf("%w: %s has no device code (no CUDA MLA kernel in its catalog)", core.ErrNoPlan, d.Name)
	}
	m := &b.modules
	m.mu.Lock()
	e := m.byDev[dev]
	if e == nil {
		e = &moduleBuild{done: make(chan struct{})}
		if m.byDev == nil {
			m.byDev = map[core.DeviceInfo]*moduleBuild{}
		}
		if len(m.byDev) < maxModuleDevices {
			m.byDev[dev] = e
		}
		go func() {
			defer close(e.done)
			e.mods, e.err = devkernels.Modules(dev)
			if e.err != nil {
				e.err = fmt.Errorf("%s (compute %d): %w", dev.Name, dev.ComputeCapability, e.err)
			}
		}()
	}
	m.mu.Unlock()
	select {
	case <-e.done:
		return e.mods, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PlanKernel returns the launches of devkernels that run the catalog
// kernel of req.Method of the handler req.Backend on req's batch. The
// errors: core.ErrUnknownBackend for a name the backend does not serve;
// core.ErrNoPlan for a method whose catalog entry is missing (wrapping
// core.ErrNoKernel too) or has no device code, and for what devkernels
// does not cover; core.ErrInvalidRequest for a malformed request.
func (b *Backend) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	h, ok := d.Handler(req.Backend)
	if !ok {
		return nil, fmt.Errorf("%s: %w %q", d.Name, core.ErrUnknownBackend, req.Backend)
	}
	k, ok := h.Kernel(req.Method)
	if !ok {
		return nil, fmt.Errorf("%w: %w: %s's catalog has no kernel for %s", core.ErrNoPlan, core.ErrNoKernel, req.Backend, req.Method)
	}
	if !onCUDA(k) {
		return nil, fmt.Errorf("%w: %s's kernel %s for %s has no device code (attnplug has device code for the absorbed MLA kernels of the CUDA libraries only)",
			core.ErrNoPlan, req.Backend, k.Name, req.Method)
	}
	p, err := devkernels.Plan(k, req)
	if err != nil {
		return nil, fmt.Errorf("%s: plan of %s: %w", req.Backend, k.Name, err)
	}
	return p, nil
}
