package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/refkernels"
	"github.com/attnplug/attnplug/shm"
)

// kernelTolerance is the largest relative error a kernel may have against
// the float64 reference.
const kernelTolerance = 1e-5

// kernels checks the kernel catalog: every answered method of every name
// is declared or has a kernel (a catalog may cover a subset of the
// declared methods, which the host then runs with its reference kernels),
// and each kernel of the catalog, run by the plugin on small random
// tensors in shared memory, matches the float64 reference attention (over
// the top-k for a sparse kernel) within 1e-5.
func (s *suite) kernels(ctx context.Context, c *Check) {
	if s.desc == nil || !s.desc.HasKernels() {
		c.Status, c.Detail = Skip, "no kernels declared: skipped (the plugin has no kernel catalog: it decides methods and runs no kernels)"
		return
	}
	if s.dead != nil {
		c.Status, c.Detail = Skip, "not run: "+s.dead.Error()
		return
	}
	var hostRuns []string
	for i, h := range s.cov.names {
		// A catalog may cover a subset of the declared methods: the host
		// runs the others with its reference kernels. An answer that is
		// neither declared nor in the catalog has no kernel anywhere.
		var missing []string
		for _, a := range s.cov.answers[i] {
			if a.err == nil && a.method.Valid() && !slices.Contains(h.Methods, a.method) && !slices.Contains(missing, a.method.String()) {
				if _, ok := h.Kernel(a.method); !ok {
					missing = append(missing, a.method.String())
				}
			}
		}
		if len(missing) > 0 {
			c.problem("%s answered %s, which it neither declares nor has a kernel for: a host refuses the plugin", h.Name, strings.Join(missing, ", "))
		}
		if h.Deprecated != "" || len(h.Kernels) == 0 {
			continue
		}
		for _, k := range h.Catalog() {
			if k.Library == core.LibHostReference {
				hostRuns = append(hostRuns, h.Name+" "+k.Method.String())
			}
		}
	}
	kr := s.runner
	if kr == nil {
		// A host runs the kernels of a backend in its process itself
		// (registry.Config.Kernels).
		c.Status, c.Detail = Skip, "the backend declares kernels but runs none itself (not a core.KernelRunner): a host runs them with its own runner"
		return
	}
	rng := rand.New(rand.NewPCG(17, 19))
	n, worst := 0, 0.0
	for _, h := range s.cov.names {
		if h.Deprecated != "" {
			continue
		}
		for _, k := range h.Kernels {
			if s.dead != nil {
				break
			}
			rel, err := s.runKernel(ctx, kr, h.Name, k, rng)
			n++
			switch {
			case err != nil:
				c.problem("%s: kernel %s for %s: %v", h.Name, k.Name, k.Method, err)
			case rel > kernelTolerance:
				c.problem("%s: kernel %s for %s: relative error %.3g against the float64 reference, more than %g", h.Name, k.Name, k.Method, rel, kernelTolerance)
			}
			worst = max(worst, rel)
		}
	}
	if c.Status == Fail {
		c.Detail = "kernels missing or wrong"
		return
	}
	c.Detail = fmt.Sprintf("%d kernels ran over shared memory within %g of the float64 reference (worst %.2g)", n, kernelTolerance, worst)
	if len(hostRuns) > 0 {
		c.Detail += "; the host's reference kernels run what the catalog leaves out: " + strings.Join(hostRuns, ", ")
	}
}

// runKernel runs kernel k of name once, through the plugin, on a small
// random batch, and returns its relative error.
func (s *suite) runKernel(ctx context.Context, kr core.KernelRunner, name string, k core.Kernel, rng *rand.Rand) (float64, error) {
	cfg := kernels.Config{Heads: 2, KVLoraRank: 8, QKNopeHeadDim: 4, QKRopeHeadDim: 4, VHeadDim: 4, SoftmaxScale: 0.35,
		RopeBase: 10000, ChunkCapacity: 4}
	if k.Sparse {
		cfg.TopK = 3
	}
	b := kernels.BatchShape{SeqLens: []int{7, 3}, PrefixLens: []int{5, 0}}
	raw, err := kernels.RandomTensors(rng, cfg, b)
	if err != nil {
		return 0, err
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		return 0, err
	}
	seg, err := shm.Create(int64(l.Bytes()))
	if err != nil {
		return 0, err
	}
	defer seg.Close()
	in, out, err := l.SplitBytes(seg.Bytes())
	if err != nil {
		return 0, err
	}
	in.CopyInputs(&raw)
	req := &core.KernelRequest{
		Backend: name, Method: k.Method, Dims: cfg,
		SeqLens: []int64{7, 3}, PrefixLens: []int64{5, 0},
		Buffer:  core.SharedBuffer{Path: seg.Path(), Size: seg.Size()},
		Tensors: refkernels.Refs(l),
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	res, err := kr.RunKernel(cctx, req)
	cancel()
	s.observe(ctx, err)
	if err != nil {
		return 0, err
	}
	if res.Kernel != k.Name {
		return 0, fmt.Errorf("ran kernel %q, the catalog says %q", res.Kernel, k.Name)
	}
	var want []float64
	if k.Sparse {
		want, err = kernels.SparseReference(cfg, b, raw)
	} else {
		want, err = kernels.Reference(cfg, b, raw)
	}
	if err != nil {
		return 0, err
	}
	return kernels.RelError(out, want), nil
}
