package kernelrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/gpucheck"
	"github.com/attnplug/attnplug/launch/cudaexec"
	"github.com/attnplug/attnplug/registry"
)

// Device is attnplug run --device cuda: the GPU, opened by Open or on the
// first line that needs it, with the modules each backend's plugin handed
// over. It serves one Stream or one goroutine's Run calls at a time.
type Device struct {
	pageSize int

	once   sync.Once
	env    *gpucheck.Env
	why    error            // why there is no GPU
	loaded map[string]error // by backend name
}

// NewDevice returns a Device whose MLA decode runs with a KV cache of
// pageSize tokens a page; the GPU is opened on first use. The caller
// closes it.
func NewDevice(pageSize int) *Device { return &Device{pageSize: pageSize} }

func (d *Device) open() (*gpucheck.Env, error) {
	d.once.Do(func() {
		d.env, d.why = gpucheck.OpenDevice()
		d.loaded = map[string]error{}
	})
	return d.env, d.why
}

// Open opens the GPU now, unless it is open already, and returns why
// there is none (nil: there is one). A caller that must not run kernels
// on the CPU instead, as attnplug run --device cuda without --allow-cpu,
// calls it before the first line.
func (d *Device) Open() error {
	_, err := d.open()
	return err
}

// Close releases the GPU, when it was opened.
func (d *Device) Close() {
	if d.env != nil {
		d.env.Close()
	}
}

// modules loads backend's device code into the host's executor, once.
func (d *Device) modules(ctx context.Context, reg *registry.Registry, backend string) error {
	if err, ok := d.loaded[backend]; ok {
		return err
	}
	mods, err := reg.KernelModules(ctx, backend, d.env.Exec.Device())
	if err == nil {
		err = d.env.Load(mods)
	}
	d.loaded[backend] = err
	return err
}

// run runs the method the dispatch chose on the GPU as a host does: the
// modules and the plan come from the plugin, the tensors are generated on
// the device (seeded by seed), the plan is launched on them, and the output
// is compared with the float64 reference on sampled rows. It returns no
// answer and the reason when the method cannot run on the device here;
// the caller then runs the CPU kernels and says why.
func (d *Device) run(ctx context.Context, reg *registry.Registry, heads int, req *core.Request, ans core.Answer, seed uint64) (*Answer, string, error) {
	env, err := d.open()
	if err != nil {
		return nil, "no CUDA device: " + err.Error(), nil
	}
	if err := d.modules(ctx, reg, ans.Handler); err != nil {
		return nil, fmt.Sprintf("no device code from %s: %v", ans.Handler, err), nil
	}
	b := req.Batch
	qlens := make([]int64, len(b.SeqLens))
	for i, n := range b.SeqLens {
		qlens[i] = 1
		if i < len(b.ExtendPrefixLens) {
			qlens[i] = n - b.ExtendPrefixLens[i]
		}
	}
	a := &Answer{Method: ans.Method.String(), Handler: ans.Handler, Plugin: ans.Plugin, Fallback: ans.Fallback,
		KernelPlugin: ans.Plugin, Device: env.Dev.Info().Name}
	plan := func(pr *core.PlanRequest) (*cudaexec.Prepared, string, error) {
		pr.Backend = ans.Handler
		p, err := reg.PlanKernel(ctx, pr)
		if errors.Is(err, core.ErrNoPlan) {
			return nil, err.Error(), nil
		}
		if err != nil {
			return nil, "", err
		}
		prep, err := env.Exec.Prepare(pr, p)
		if err != nil {
			return nil, "", err
		}
		a.Kernel, a.Plan = p.Kernel, p.Note
		for _, k := range reg.Kernels(ans.Handler) {
			if k.Name == p.Kernel {
				a.Library = k.Library
			}
		}
		return prep, "", nil
	}
	var ch gpucheck.Check
	var t gpucheck.Timing
	switch ans.Method {
	case core.MLA:
		bt, err := env.Alloc(gpucheck.Case{Heads: heads, PageSize: d.pageSize, SeqLens: b.SeqLens, QLens: qlens, Seed: seed}, 1)
		if err != nil {
			return nil, "", core.NewFieldError("seq_lens", err.Error())
		}
		defer bt.Free(env)
		p, why, err := plan(&bt.Req)
		if p == nil {
			return nil, why, err
		}
		defer p.Close()
		if err := env.Launch(bt, p); err != nil {
			return nil, "", err
		}
		if ch, err = env.Verify(bt, 0, 32); err != nil {
			return nil, "", err
		}
		if t, err = env.Time(bt, p, 5, 5); err != nil {
			return nil, "", err
		}
	case core.MHA, core.MHAOneShot, core.MHAChunkedKV:
		c := gpucheck.PrefillCase{Method: ans.Method, Heads: heads, SeqLens: b.SeqLens, QLens: qlens,
			ChunkCapacity: int(min(b.MaxChunkCapacity, 1<<30)), Seed: seed}
		bt, err := env.AllocPrefill(c)
		if err != nil {
			return nil, "", core.NewFieldError("seq_lens", err.Error())
		}
		defer bt.Free(env)
		p, why, err := plan(&bt.Req)
		if p == nil {
			return nil, why, err
		}
		defer p.Close()
		if err := env.RunPrefill(bt, p); err != nil {
			return nil, "", err
		}
		out, lse, err := env.Outputs(bt)
		if err != nil {
			return nil, "", err
		}
		ch = env.VerifyPrefill(bt, out, lse, 32)
		if t, err = env.TimePrefill(bt, p, 5); err != nil {
			return nil, "", err
		}
	default:
		return nil, fmt.Sprintf("%s has no device code", ans.Method), nil
	}
	a.TimeNS = int64(t.Median * 1000)
	a.RelError, a.LSEError = ch.RelErr, ch.LSEErr
	a.Note = fmt.Sprintf("on %s, bf16, tensors generated on the device; rel_error is ||out-ref||/||ref|| over %d sampled rows against float64 (tolerance %.0e)",
		a.Device, ch.Rows, gpucheck.MaxRelErr)
	if ch.Unwritten > 0 {
		return nil, "", fmt.Errorf("run: the kernel left %d output elements unwritten", ch.Unwritten)
	}
	return a, "", nil
}
