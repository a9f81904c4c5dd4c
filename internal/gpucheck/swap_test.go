package gpucheck

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/registry"
)

// swapping is a Source over the tests' registry that moves every backend
// to other images once swapped is set, as a registry's Reload or a hot
// swap of attnplug serve does: each image then carries 64 zero bytes more
// (the same code under another hash), and each plan names those images.
type swapping struct {
	devicehost.Source
	swapped atomic.Bool
	asked   atomic.Int64 // module requests after the swap
	plans   atomic.Int64 // plan requests after the swap
}

func (s *swapping) KernelModules(ctx context.Context, backend string, dev core.DeviceInfo) ([]core.KernelModule, error) {
	mods, err := s.Source.KernelModules(ctx, backend, dev)
	if err != nil || !s.swapped.Load() {
		return mods, err
	}
	s.asked.Add(1)
	return swapped(mods), nil
}

func swapped(mods []core.KernelModule) []core.KernelModule {
	out := slices.Clone(mods)
	for i := range out {
		out[i].Image = append(slices.Clip(out[i].Image), make([]byte, 64)...)
		out[i].SHA256 = core.ImageSHA256(out[i].Image)
	}
	return out
}

func (s *swapping) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	p, err := s.Source.PlanKernel(ctx, req)
	if err != nil || !s.swapped.Load() {
		return p, err
	}
	s.plans.Add(1)
	mods, err := s.Source.KernelModules(ctx, req.Backend, req.Device)
	if err != nil {
		return nil, err
	}
	q := *p
	q.ModuleSHA256 = map[string]string{}
	for _, m := range swapped(mods) {
		if _, ok := p.ModuleSHA256[m.Name]; ok {
			q.ModuleSHA256[m.Name] = m.SHA256
		}
	}
	return &q, nil
}

// TestHostAcrossASwap: a Host whose Source moved a backend to other images
// loads them at its next plan (asking for the modules and the plan once)
// and prepares the plan on them; a plan prepared before the swap keeps
// launching the images it was made on, which are unloaded when it closes.
// Both decode the batch as float64 does.
func TestHostAcrossASwap(t *testing.T) {
	var src *swapping
	e := openEnvOver(t, func(r *registry.Registry) devicehost.Source {
		src = &swapping{Source: r}
		return src
	})
	c := devicecheck.MLA{Heads: 16, PageSize: 64, Seed: 11, SeqLens: []int64{300, 1000}, QLens: []int64{1, 1}}
	before, err := e.Run(t.Context(), dense, c, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	open := true
	defer func() {
		if open {
			before.Close()
		}
	}()
	src.swapped.Store(true)
	after, err := e.Run(t.Context(), dense, c, 1, 64)
	if err != nil {
		t.Fatalf("after the swap: %v", err)
	}
	defer after.Close()
	old, now := before.Prepared.Plan().ModuleSHA256, after.Prepared.Plan().ModuleSHA256
	if len(now) == 0 || maps.Equal(old, now) {
		t.Fatalf("the plans name images %v before the swap and %v after", old, now)
	}
	ex := e.Host.Executor()
	if src.asked.Load() != 1 || src.plans.Load() != 1 || !ex.Holds(now) || !ex.Holds(old) {
		t.Errorf("after the swap: modules asked %d times, the plan %d times (want 1, 1); the new images loaded: %v, the old (its plan open): %v",
			src.asked.Load(), src.plans.Load(), ex.Holds(now), ex.Holds(old))
	}
	if err := before.Launch(); err != nil {
		t.Fatal(err)
	}
	if ch, err := before.Batch.Verify(0, 64); err != nil || !ch.OK() {
		t.Errorf("the plan prepared before the swap, launched after it: %v %v", ch, err)
	}
	t.Logf("before the swap: %v; after: %v", before.Check, after.Check)
	before.Close()
	open = false
	if ex.Holds(old) || !ex.Holds(now) {
		t.Errorf("after the last plan on the old images closed: old images loaded %v (want false), new %v", ex.Holds(old), ex.Holds(now))
	}
}
