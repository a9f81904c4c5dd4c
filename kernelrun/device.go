package kernelrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicehost"
	"github.com/attnplug/attnplug/launch/cudaexec"
	"github.com/attnplug/attnplug/registry"
)

// Device is attnplug run --device cuda: the GPU, opened by Open or on the
// first line that needs it, as a devicehost.Host whose modules and plans
// come from the registry of the line being run. It serves one Stream or
// one goroutine's Run calls at a time.
type Device struct {
	pageSize int

	once sync.Once
	env  *devicehost.Env
	why  error              // why there is no GPU
	reg  *registry.Registry // the registry of the line being run
}

// NewDevice returns a Device whose MLA decode runs with a KV cache of
// pageSize tokens a page; the GPU is opened on first use. The caller
// closes it.
func NewDevice(pageSize int) *Device { return &Device{pageSize: pageSize} }

func (d *Device) open() (*devicehost.Env, error) {
	d.once.Do(func() {
		d.env, d.why = devicehost.OpenWith(source{d})
	})
	return d.env, d.why
}

// source is the Device's devicehost.Source: the registry of the line
// being run, which hashes, pins and checks what it hands.
type source struct{ d *Device }

func (s source) KernelModules(ctx context.Context, backend string, dev core.DeviceInfo) ([]core.KernelModule, error) {
	return s.d.reg.KernelModules(ctx, backend, dev)
}

func (s source) PlanKernel(ctx context.Context, req *core.PlanRequest) (*core.Plan, error) {
	return s.d.reg.PlanKernel(ctx, req)
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

// run runs the method the dispatch chose on the GPU as a host does: the
// modules and the plan come from the plugin, the tensors are generated on
// the device (seeded by seed), the plan is launched on them, and the output
// is compared with the float64 reference on sampled rows. It returns no
// answer and the reason when the method cannot run on the device here;
// the caller then runs the CPU kernels and says why.
// deviceRun is what run runs: the model's heads, the top-k of a sparse
// layer (0: dense), the request and the dispatch's answer, and the seed of
// the tensors.
type deviceRun struct {
	heads, topK int
	req         *core.Request
	ans         core.Answer
	seed        uint64
}

func (d *Device) run(ctx context.Context, reg *registry.Registry, r deviceRun) (*Answer, string, error) {
	req, ans := r.req, r.ans
	env, err := d.open()
	if err != nil {
		return nil, "no CUDA device: " + err.Error(), nil
	}
	d.reg = reg
	if err := env.Host.Load(ctx, ans.Handler); err != nil {
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
		prep, err := env.Host.Plan(ctx, pr)
		if errors.Is(err, core.ErrNoPlan) {
			return nil, err.Error(), nil
		}
		if err != nil {
			return nil, "", err
		}
		p := prep.Plan()
		a.Kernel, a.Plan = p.Kernel, p.Note
		for _, k := range reg.Kernels(ans.Handler) {
			if k.Name == p.Kernel {
				a.Library = k.Library
			}
		}
		return prep, "", nil
	}
	ch, t, kv, why, err := d.runMethod(env, reg, r, qlens, plan)
	if why != "" || err != nil {
		return nil, why, err
	}
	a.TimeNS = int64(t.Median * 1000)
	a.RelError, a.LSEError = ch.RelErr, ch.LSEErr
	if r.topK > 0 && ans.Method == core.MLA {
		a.Sparse = true
	}
	a.Note = fmt.Sprintf("on %s, bf16 queries, %s, tensors generated on the device; rel_error is ||out-ref||/||ref|| over %d sampled rows against float64 (tolerance %.0e)",
		a.Device, kv, ch.Rows, devicehost.MaxRelErr)
	if ch.Unwritten > 0 {
		return nil, "", fmt.Errorf("run: the kernel left %d output elements unwritten", ch.Unwritten)
	}
	return a, "", nil
}

// runQuant runs a sparse or FP8 case: its tensors generated on the device
// (the top-k drawn per query token among the keys it sees, the FP8 cache
// quantised from the same values), the plan launched, the output compared
// with the float64 reference over the dequantised cache, and timed.
func (d *Device) runQuant(env *devicehost.Env, c devicehost.QuantCase, plan func(*core.PlanRequest) (*cudaexec.Prepared, string, error)) (devicehost.Check, devicehost.Timing, string, error) {
	var ch devicehost.Check
	var t devicehost.Timing
	bt, err := env.AllocQuant(c, 1)
	if err != nil {
		return ch, t, "", core.NewFieldError("seq_lens", err.Error())
	}
	defer bt.Free(env)
	p, why, err := plan(&bt.Req)
	if p == nil {
		return ch, t, why, err
	}
	defer p.Close()
	if err := env.LaunchQuant(bt, p); err != nil {
		return ch, t, "", err
	}
	if ch, err = env.VerifyQuant(bt, 0, 32); err != nil {
		return ch, t, "", err
	}
	t, err = env.TimeQuant(bt, p, 5, 5)
	return ch, t, "", err
}

// runMethod runs r's method on the GPU: the MLA decode (dense, sparse over
// the top-k, or over an FP8 cache) or a prefill, planned by plan, checked
// and timed. It returns the check, the timing and the cache it read; or
// why the method cannot run on the device here.
func (d *Device) runMethod(env *devicehost.Env, reg *registry.Registry, r deviceRun, qlens []int64,
	plan func(*core.PlanRequest) (*cudaexec.Prepared, string, error)) (devicehost.Check, devicehost.Timing, string, string, error) {
	var ch devicehost.Check
	var t devicehost.Timing
	kv := "bf16 cache"
	heads, req, ans, seed, b := r.heads, r.req, r.ans, r.seed, r.req.Batch
	switch ans.Method {
	case core.MLA:
		sparse := false
		for _, k := range reg.Kernels(ans.Handler) {
			sparse = sparse || (k.Method == core.MLA && k.Sparse)
		}
		fp8 := req.Runtime.KVCacheDType == "fp8_e4m3"
		if fp8 || (sparse && r.topK > 0) {
			c := devicehost.QuantCase{Heads: heads, PageSize: d.pageSize, SeqLens: b.SeqLens, QLens: qlens, FP8: fp8, Seed: seed}
			if sparse {
				c.TopK = r.topK
			}
			if fp8 {
				kv = "fp8_e4m3 cache"
			}
			ch, t, why, err := d.runQuant(env, c, plan)
			return ch, t, kv, why, err
		}
		bt, err := env.Alloc(devicehost.Case{Heads: heads, PageSize: d.pageSize, SeqLens: b.SeqLens, QLens: qlens, Seed: seed}, 1)
		if err != nil {
			return ch, t, kv, "", core.NewFieldError("seq_lens", err.Error())
		}
		defer bt.Free(env)
		p, why, err := plan(&bt.Req)
		if p == nil {
			return ch, t, kv, why, err
		}
		defer p.Close()
		if err := env.Launch(bt, p); err != nil {
			return ch, t, kv, "", err
		}
		if ch, err = env.Verify(bt, 0, 32); err != nil {
			return ch, t, kv, "", err
		}
		if t, err = env.Time(bt, p, 5, 5); err != nil {
			return ch, t, kv, "", err
		}
	case core.MHA, core.MHAOneShot, core.MHAChunkedKV:
		c := devicehost.PrefillCase{Method: ans.Method, Heads: heads, SeqLens: b.SeqLens, QLens: qlens,
			ChunkCapacity: int(min(b.MaxChunkCapacity, 1<<30)), Seed: seed}
		bt, err := env.AllocPrefill(c)
		if err != nil {
			return ch, t, kv, "", core.NewFieldError("seq_lens", err.Error())
		}
		defer bt.Free(env)
		p, why, err := plan(&bt.Req)
		if p == nil {
			return ch, t, kv, why, err
		}
		defer p.Close()
		if err := env.RunPrefill(bt, p); err != nil {
			return ch, t, kv, "", err
		}
		out, lse, err := env.Outputs(bt)
		if err != nil {
			return ch, t, kv, "", err
		}
		ch = env.VerifyPrefill(bt, out, lse, 32)
		if t, err = env.TimePrefill(bt, p, 5); err != nil {
			return ch, t, kv, "", err
		}
	default:
		return ch, t, kv, fmt.Sprintf("%s has no device code", ans.Method), nil
	}
	return ch, t, kv, "", nil
}
