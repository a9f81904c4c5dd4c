package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
)

// KernelCallTimeout bounds one RunKernel call to a plugin when the caller's
// context has no deadline of its own: kernels on large tensors take far
// longer than a dispatch.
const KernelCallTimeout = backend.KernelCallTimeout

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

// Kernels returns the kernel catalog of the handler name: that of the
// backend serving it, or the triton rules' for "triton" and the names no
// plugin serves.
func (r *Registry) Kernels(name string) []core.Kernel {
	return r.table.Load().route(name).handler.Kernels
}

// RunKernel runs req.Method's kernel of the handler req.Backend on the
// tensors of req.Buffer (whose Mem must be the caller's mapping of Path):
// by the backend that serves the name, a plugin in its process through
// shared memory, or one in this process (the triton rules for "triton"
// and the names no plugin serves); in this process for a method the name
// declares but its catalog leaves to the host (core.HostReferenceKernel:
// Plugin core, no Fallback). When the backend cannot run it (a plugin
// that crashed, timed out, runs no kernels, or does not run on this
// host), the host runs the same kernel's math itself and Fallback says
// why; a crash also retires the plugin, which restarts as after a failed
// dispatch. An error is returned for a request the kernel refuses
// (core.ErrInvalidRequest), a method the catalog lacks everywhere, or
// when ctx ends.
func (r *Registry) RunKernel(ctx context.Context, req *core.KernelRequest) (*KernelAnswer, error) {
	rt := r.table.Load().route(req.Backend)
	if why := rt.be.Unsupported(); why != "" {
		return r.runInProcess(ctx, req, rt.handler.Kernels, fmt.Sprintf("plugin %s does not run on this host: %s", rt.family, why))
	}
	if _, ok := rt.handler.Kernel(req.Method); !ok && len(rt.handler.Kernels) > 0 {
		if !slices.Contains(rt.handler.Methods, req.Method) {
			return nil, fmt.Errorf("%w: %s's kernel catalog has no kernel for %s", core.ErrNoKernel, req.Backend, req.Method)
		}
		// A declared method the catalog leaves to the host.
		return r.runInProcess(ctx, req, []core.Kernel{core.HostReferenceKernel(req.Method)}, "")
	}
	asked := req
	if req.Backend != rt.handler.Name {
		cp := *req
		cp.Backend = rt.handler.Name // the name its backend serves (ask)
		asked = &cp
	}
	// Shaped like PlanKernel's call (device.go), but the outcomes part ways:
	// a kernel the plugin cannot run is run here, a plan it has not is cached.
	var res *core.KernelResult
	s, err := r.call(ctx, rt.be, req.Backend, backend.LongCall, "the kernel call", func(ctx context.Context, c backend.Conn) (err error) {
		res, err = c.RunKernel(ctx, asked)
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case s.verdict == answered:
		return &KernelAnswer{KernelResult: *res, Plugin: rt.family}, nil
	case s.verdict == moved:
		return r.RunKernel(ctx, req)
	case s.verdict == refused && errors.Is(s.o, core.ErrInvalidRequest):
		return nil, s.o.Err
	case s.o.Kind == backend.Failed:
		r.log.Warn("plugin failed during a kernel call; the host runs the kernel itself", "plugin", rt.family, "reason", string(s.o.Reason), "error", s.o.Err)
	}
	return r.runInProcess(ctx, req, rt.handler.Kernels, s.o.Error())
}

// runInProcess runs the catalog's kernel for req.Method with the reference
// kernels in this process; a catalog without one falls back to the
// fallback's catalog (the triton rules'), then to the plain reference
// kernel of the method.
func (r *Registry) runInProcess(ctx context.Context, req *core.KernelRequest, catalog []core.Kernel, fallback string) (*KernelAnswer, error) {
	k, ok := findKernel(catalog, req.Method)
	if !ok {
		k, ok = findKernel(r.fallbackRoute.handler.Kernels, req.Method)
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
