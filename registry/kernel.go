package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/attnplug/attnplug/core"
)

// KernelCallTimeout bounds one RunKernel call to a plugin when the caller's
// context has no deadline of its own: kernels on large tensors take far
// longer than a dispatch.
const KernelCallTimeout = 5 * time.Minute

// KernelAnswer is the outcome of Registry.RunKernel.
type KernelAnswer struct {
	core.KernelResult
	// Plugin is the plugin that ran the kernel, or core.PluginCore when the
	// host ran it in its own process.
	Plugin string
	// Fallback, when not empty, says why the host ran the kernel itself
	// although a plugin owns it (the plugin died during the call, runs no
	// kernels, or does not run on this host).
	Fallback string
}

// Kernels returns the kernel catalog of the handler name: the plugin's, or
// the triton rules' for "triton" and names no plugin serves.
func (r *Registry) Kernels(name string) []core.Kernel {
	if h, _, ok := r.Handler(name); ok {
		return h.Kernels
	}
	return core.TritonKernels()
}

// RunKernel runs req.Method's kernel of the handler req.Backend on the
// tensors of req.Buffer (whose Mem must be the caller's mapping of Path):
// in the plugin's process, through shared memory, when a plugin serves the
// name; in this process for the triton rules, and for a method the name
// declares but its catalog leaves to the host (core.HostReferenceKernel:
// Plugin core, no Fallback). When the plugin fails during
// the call (it crashed, timed out, or runs no kernels), the host runs the
// same kernel's math itself and Fallback says why; a crash also retires the
// plugin, which restarts as after a failed dispatch. An error is returned
// for a request the kernel refuses (core.ErrInvalidRequest), a method the
// catalog lacks everywhere, or when ctx ends.
func (r *Registry) RunKernel(ctx context.Context, req *core.KernelRequest) (*KernelAnswer, error) {
	rt := r.table.Load().route(req.Backend)
	if rt.down != nil || rt.unknown {
		return r.runInProcess(ctx, req, core.TritonKernels(), "")
	}
	be := rt.be
	if why := be.unsupportedWhy(); why != "" {
		return r.runInProcess(ctx, req, rt.handler.Kernels, fmt.Sprintf("plugin %s does not run on this host: %s", be.family(), why))
	}
	if _, ok := rt.handler.Kernel(req.Method); !ok && len(rt.handler.Kernels) > 0 {
		if !slices.Contains(rt.handler.Methods, req.Method) {
			return nil, fmt.Errorf("%w: %s's kernel catalog has no kernel for %s", core.ErrNoKernel, req.Backend, req.Method)
		}
		// A declared method the catalog leaves to the host.
		return r.runInProcess(ctx, req, []core.Kernel{core.HostReferenceKernel(req.Method)}, "")
	}
	var res *core.KernelResult
	err := be.call(ctx, longCall, func(ctx context.Context, c conn) (err error) {
		res, err = c.RunKernel(ctx, req)
		return err
	})
	var f *failure
	switch {
	case err == nil:
		r.succeeded(be)
		return &KernelAnswer{KernelResult: *res, Plugin: be.family()}, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, core.ErrInvalidRequest):
		return nil, fmt.Errorf("plugin %s refused the kernel call: %w", be.family(), err)
	case isAnswer(err): // no kernel: the host runs it
		return r.runInProcess(ctx, req, rt.handler.Kernels, fmt.Sprintf("plugin %s: %v", be.family(), err))
	case errors.As(err, &f) && f.retired:
		r.log.Warn("plugin failed during a kernel call; the host runs the kernel itself", "plugin", be.family(), "reason", string(f.reason), "error", f.err)
	}
	return r.runInProcess(ctx, req, rt.handler.Kernels, err.Error())
}

// runInProcess runs the catalog's kernel for req.Method with the reference
// kernels in this process; a catalog without one falls back to the triton
// rules' catalog, then to the plain reference kernel of the method.
func (r *Registry) runInProcess(ctx context.Context, req *core.KernelRequest, catalog []core.Kernel, fallback string) (*KernelAnswer, error) {
	k, ok := findKernel(catalog, req.Method)
	if !ok {
		k, ok = findKernel(core.TritonKernels(), req.Method)
	}
	if !ok {
		k = core.Kernel{Name: "reference", Library: "attnplug kernels", Method: req.Method}
	}
	res, err := r.cfg.runKernel(ctx, k, req)
	if err != nil {
		return nil, err
	}
	return &KernelAnswer{KernelResult: *res, Plugin: core.PluginCore, Fallback: fallback}, nil
}

// runKernel runs kernel k of a catalog on req's tensors in this process
// (Config.Kernels), for the host's own fallback and for in-process
// backends without a KernelRunner alike.
func (c *Config) runKernel(ctx context.Context, k core.Kernel, req *core.KernelRequest) (*core.KernelResult, error) {
	if c.Kernels == nil {
		return nil, fmt.Errorf("%w: this host runs no kernels in process (registry.Config.Kernels is unset)", core.ErrNoKernel)
	}
	return c.Kernels(ctx, k, req, c.Host)
}

func findKernel(ks []core.Kernel, m core.Method) (core.Kernel, bool) {
	for _, k := range ks {
		if k.Method == m {
			return k, true
		}
	}
	return core.Kernel{}, false
}
