package backendkit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
)

// Device code: a Backend given a plugin's DeviceCode (WithDeviceCode: the
// CUDA plugins give package devkernels', devkernels.Code) hands the host
// that device code and plans its launches for the catalog kernels it runs:
// it is a core.KernelPlanner, and its description says so
// (core.Description.DeviceCode). A Backend without device code (the ROCm,
// NPU and XPU plugins) links none: its binary embeds no device image.

// DeviceCode is a plugin's device code: the modules its kernels run in,
// built or chosen for a device, and the plans of the catalog kernels it
// runs. It is safe for concurrent use.
type DeviceCode interface {
	// Runs reports whether the device code runs catalog kernel k.
	Runs(k core.Kernel) bool
	// Modules returns the modules for dev; the error wraps core.ErrNoPlan
	// when there is none for it. It may take seconds (a compiler).
	Modules(dev core.DeviceInfo) ([]core.KernelModule, error)
	// Plan returns the launches that run k on req's batch; the error wraps
	// core.ErrNoPlan for a batch k's device code does not cover, and
	// core.ErrInvalidRequest for a malformed request.
	Plan(k core.Kernel, req *core.PlanRequest) (*core.Plan, error)
}

// WithDeviceCode gives b the device code dc and returns b. Call it before
// b serves.
func (b *Backend) WithDeviceCode(dc DeviceCode) *Backend {
	b.device = dc
	return b
}

// hasDeviceCode reports whether b's device code runs catalog kernel k.
func (b *Backend) hasDeviceCode(k core.Kernel) bool { return b.device != nil && b.device.Runs(k) }

// Describe returns the rules' description, with DeviceCode set when b's
// device code runs a kernel of the catalog.
func (b *Backend) Describe(ctx context.Context) (*core.Description, error) {
	d, err := b.RuleBackend.Describe(ctx)
	if err != nil {
		return nil, err
	}
	d.DeviceCode = slices.ContainsFunc(d.Handlers, func(h core.HandlerInfo) bool {
		return slices.ContainsFunc(h.Kernels, b.hasDeviceCode)
	})
	return d, nil
}

// KernelModules returns b's device code for dev (DeviceCode.Modules).
// When ctx ends first, the build goes on for the next caller. A Backend
// without device code, or whose device code has none for dev, answers an
// error wrapping core.ErrNoPlan.
func (b *Backend) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	if !d.DeviceCode {
		return nil, fmt.Errorf("%w: %s has no device code (no kernel of its catalog has any)", core.ErrNoPlan, d.Name)
	}
	type built struct {
		mods []core.KernelModule
		err  error
	}
	done := make(chan built, 1)
	go func() {
		mods, err := b.device.Modules(dev)
		done <- built{mods, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%s (compute %d): %w", dev.Name, dev.ComputeCapability, r.err)
		}
		return r.mods, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PlanKernel returns the launches of b's device code that run the catalog
// kernel of req.Method of the handler req.Backend on req's batch. The
// errors: core.ErrUnknownBackend for a name the backend does not serve;
// core.ErrNoPlan for a method whose catalog entry is missing (wrapping
// core.ErrNoKernel too) or has no device code, and for a dtype, shape or
// device the device code does not cover; core.ErrInvalidRequest for a
// malformed request.
func (b *Backend) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := b.catalogKernel(ctx, req.Backend, req.Method)
	if errors.Is(err, core.ErrNoKernel) {
		return nil, fmt.Errorf("%w: %w", core.ErrNoPlan, err)
	}
	if err != nil {
		return nil, err
	}
	if !b.hasDeviceCode(k) {
		return nil, fmt.Errorf("%w: %s's kernel %s for %s has no device code", core.ErrNoPlan, req.Backend, k.Name, req.Method)
	}
	p, err := b.device.Plan(k, req)
	if err != nil {
		return nil, fmt.Errorf("%s: plan of %s: %w", req.Backend, k.Name, err)
	}
	return p, nil
}
