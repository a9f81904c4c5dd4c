package kernelrun

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/devicecheck"
	"github.com/attnplug/attnplug/registry"
)

// Device is attnplug run --device cuda: the GPU, opened by Open or on the
// first line that needs it, as a devicecheck.Env whose modules and plans
// come from the registry of the line being run. It serves one Stream or
// one goroutine's Run calls at a time.
type Device struct {
	pageSize int

	once sync.Once
	env  *devicecheck.Env
	why  error              // why there is no GPU
	reg  *registry.Registry // the registry of the line being run
}

// NewDevice returns a Device whose MLA decode runs with a KV cache of
// pageSize tokens a page; the GPU is opened on first use. The caller
// closes it.
func NewDevice(pageSize int) *Device { return &Device{pageSize: pageSize} }

func (d *Device) open() (*devicecheck.Env, error) {
	d.once.Do(func() {
		d.env, d.why = devicecheck.Open(source{d})
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

// deviceRun is what run runs: the model's heads, the top-k of a sparse
// layer (0: dense), the request and the dispatch's answer, and the seed of
// the tensors.
type deviceRun struct {
	heads, topK int
	req         *core.Request
	ans         core.Answer
	seed        uint64
}

// run runs the method the dispatch chose on the GPU as a host does,
// through the verification layer (devicecheck.Env.Run): the modules and
// the plan come from the plugin through the registry, the tensors are
// generated on the device (seeded by r.seed), the plan is launched on them
// with its outputs poisoned first, and the output is compared with the
// float64 reference on sampled rows, then timed. It returns no answer and
// the reason when the method cannot run on the device here; the caller
// then runs the CPU kernels and says why.
func (d *Device) run(ctx context.Context, reg *registry.Registry, r deviceRun) (*Answer, string, error) {
	ans := r.ans
	env, err := d.open()
	if err != nil {
		return nil, "no CUDA device: " + err.Error(), nil
	}
	d.reg = reg
	if err := env.Host.Load(ctx, ans.Handler); err != nil {
		return nil, fmt.Sprintf("no device code from %s: %v", ans.Handler, err), nil
	}
	w, kv, why := d.workload(reg, r)
	if w == nil {
		return nil, why, nil
	}
	run, err := env.Run(ctx, ans.Handler, w, 1, 32)
	switch {
	case errors.Is(err, core.ErrNoPlan):
		return nil, err.Error(), nil
	case run == nil && err != nil:
		return nil, "", err
	}
	defer run.Close()
	if run.Check.Unwritten > 0 {
		return nil, "", fmt.Errorf("run: the kernel left %d output elements unwritten", run.Check.Unwritten)
	}
	t, err := run.Time(5, 5)
	if err != nil {
		return nil, "", err
	}
	p := run.Prepared.Plan()
	a := &Answer{Method: ans.Method.String(), Handler: ans.Handler, Plugin: ans.Plugin, Fallback: ans.Fallback,
		KernelPlugin: ans.Plugin, Device: env.Device().Name, Kernel: p.Kernel, Plan: p.Note,
		TimeNS: int64(t.Median * 1000), RelError: run.Check.RelErr, LSEError: run.Check.LSEErr}
	for _, k := range reg.Kernels(ans.Handler) {
		if k.Name == p.Kernel {
			a.Library = k.Library
		}
	}
	if r.topK > 0 && ans.Method == core.MLA {
		a.Sparse = true
	}
	a.Note = fmt.Sprintf("on %s, bf16 queries, %s, tensors generated on the device; rel_error is ||out-ref||/||ref|| over %d sampled rows against float64 (tolerance %.0e)",
		a.Device, kv, run.Check.Rows, devicecheck.MaxRelErr)
	return a, "", nil
}

// workload is the verification layer's workload of r's method: the MLA
// decode (dense, sparse over the top-k where the handler's catalog has a
// sparse kernel, or over an FP8 cache where the line asks for one) or a
// prefill; it says which cache it reads, or why the method has no device
// code.
func (d *Device) workload(reg *registry.Registry, r deviceRun) (devicecheck.Workload, string, string) {
	req, b := r.req, r.req.Batch
	qlens := make([]int64, len(b.SeqLens))
	for i, n := range b.SeqLens {
		qlens[i] = 1
		if i < len(b.ExtendPrefixLens) {
			qlens[i] = n - b.ExtendPrefixLens[i]
		}
	}
	switch r.ans.Method {
	case core.MLA:
		sparse := false
		for _, k := range reg.Kernels(r.ans.Handler) {
			sparse = sparse || (k.Method == core.MLA && k.Sparse)
		}
		fp8 := req.Runtime.KVCacheDType == "fp8_e4m3"
		if fp8 || (sparse && r.topK > 0) {
			c := devicecheck.Quant{Heads: r.heads, PageSize: d.pageSize, SeqLens: b.SeqLens, QLens: qlens, FP8: fp8, Seed: r.seed}
			if sparse {
				c.TopK = r.topK
			}
			kv := "bf16 cache"
			if fp8 {
				kv = "fp8_e4m3 cache"
			}
			return c, kv, ""
		}
		return devicecheck.MLA{Heads: r.heads, PageSize: d.pageSize, SeqLens: b.SeqLens, QLens: qlens, Seed: r.seed}, "bf16 cache", ""
	case core.MHA, core.MHAOneShot, core.MHAChunkedKV:
		return devicecheck.Prefill{Method: r.ans.Method, Heads: r.heads, SeqLens: b.SeqLens, QLens: qlens,
			ChunkCapacity: int(min(b.MaxChunkCapacity, 1<<30)), Seed: r.seed}, "bf16 cache", ""
	}
	return nil, "", fmt.Sprintf("%s has no device code", r.ans.Method)
}
