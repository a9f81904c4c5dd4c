package backendkit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devkernels"
)

// Device code: a Backend whose catalog holds a kernel that package
// devkernels has device code for (a CUDA kernel that one of its modules
// runs: the absorbed-MLA decode of the fa3 and flashinfer families over
// bf16 and FP8 caches, dsa's sparse MLA over the indexer's top-k, the
// varlen prefills of FlashAttention 3 and FlashInfer, dsa's dense prefill
// among them) hands the host that device code and plans its launches: it
// is a core.KernelPlanner, and its description says so
// (core.Description.DeviceCode).

// Describe returns the rules' description, with DeviceCode set when a
// kernel of the catalog has device code.
func (b *Backend) Describe(ctx context.Context) (*core.Description, error) {
	d, err := b.RuleBackend.Describe(ctx)
	if err != nil {
		return nil, err
	}
	d.DeviceCode = slices.ContainsFunc(d.Handlers, func(h core.HandlerInfo) bool {
		return slices.ContainsFunc(h.Kernels, hasDeviceCode)
	})
	return d, nil
}

// hasDeviceCode reports whether devkernels has device code for catalog
// kernel k: k runs on CUDA, and a module of devkernels.Spec names it among
// the kernels it runs.
func hasDeviceCode(k core.Kernel) bool {
	if !runsOn(k, core.PlatformCUDA) {
		return false
	}
	return slices.ContainsFunc(devkernels.Spec(), func(m core.KernelModule) bool { return slices.Contains(m.Kernels, k.Name) })
}

// KernelModules returns the device code of package devkernels built for
// dev. The first call for an architecture builds it (NVRTC: seconds);
// later calls for it, concurrent ones included, get that build and its
// outcome (devkernels.Builder). Without NVRTC, or for a device devkernels
// has no code for, the error wraps core.ErrNoPlan, as it does for a
// Backend without device code. When ctx ends first, the build goes on
// for the next caller.
func (b *Backend) KernelModules(ctx context.Context, dev core.DeviceInfo) ([]core.KernelModule, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	if !d.DeviceCode {
		return nil, fmt.Errorf("%w: %s has no device code (no kernel of its catalog is one of package devkernels)", core.ErrNoPlan, d.Name)
	}
	type built struct {
		mods []core.KernelModule
		err  error
	}
	done := make(chan built, 1)
	go func() {
		mods, err := b.builder.Modules(dev)
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

// PlanKernel returns the launches of devkernels that run the catalog
// kernel of req.Method of the handler req.Backend on req's batch. The
// errors: core.ErrUnknownBackend for a name the backend does not serve;
// core.ErrNoPlan for a method whose catalog entry is missing (wrapping
// core.ErrNoKernel too) or has no device code (hasDeviceCode), and for a
// dtype, shape or device devkernels does not cover;
// core.ErrInvalidRequest for a malformed request.
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
	if !hasDeviceCode(k) {
		return nil, fmt.Errorf("%w: %s's kernel %s for %s has no device code", core.ErrNoPlan, req.Backend, k.Name, req.Method)
	}
	p, err := devkernels.Plan(k, req)
	if err != nil {
		return nil, fmt.Errorf("%s: plan of %s: %w", req.Backend, k.Name, err)
	}
	return p, nil
}
