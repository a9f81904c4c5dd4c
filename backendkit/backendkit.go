package backendkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/devkernels"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/refkernels"
	"github.com/attnplug/attnplug/shm"
)

// Backend is a core.RuleBackend that runs its kernels: a core.Backend,
// core.BatchBackend, core.Configurer and core.KernelRunner, and a
// core.KernelPlanner that hands the host device code (device.go). It is
// safe for concurrent use.
type Backend struct {
	*core.RuleBackend
	host    atomic.Pointer[core.HostInfo]
	builder devkernels.Builder // the device code, built once per architecture

	gpuOnce sync.Once
	gpu     *cuda.Device // nil: no usable CUDA device, or turned off
	gpuWhy  string       // why gpu is nil
}

// EnvNoGPU names the environment variable that, set to 1, makes every
// kernel run emulated even where a CUDA device is present.
const EnvNoGPU = "ATTNPLUG_NO_GPU"

// device opens the CUDA device once, the first time a kernel could run on
// it: opening costs the driver's initialisation.
func (b *Backend) device() (*cuda.Device, string) {
	b.gpuOnce.Do(func() {
		if os.Getenv(EnvNoGPU) == "1" {
			b.gpuWhy = EnvNoGPU + "=1"
			return
		}
		d, err := cuda.Open()
		if err != nil {
			b.gpuWhy = err.Error()
			return
		}
		b.gpu = d
	})
	return b.gpu, b.gpuWhy
}

// onCUDA reports whether kernel k is a CUDA kernel whose math this package
// runs on the device: the absorbed MLA of the NVIDIA libraries.
func onCUDA(k core.Kernel) bool {
	return !k.Sparse && k.Method == core.MLA && runsOn(k, core.PlatformCUDA)
}

// runsOn reports whether an entry of k's hardware names platform p.
func runsOn(k core.Kernel, p core.Platform) bool {
	return slices.ContainsFunc(k.Hardware, func(h core.Hardware) bool { return slices.Contains(h.Platforms, p) })
}

// New returns rb with kernels.
func New(rb *core.RuleBackend) *Backend { return &Backend{RuleBackend: rb} }

// NewRules is core.NewRuleBackend followed by New.
func NewRules(name, version string, logger core.Logger, rules ...core.Rule) (*Backend, error) {
	rb, err := core.NewRuleBackend(name, version, logger, rules...)
	if err != nil {
		return nil, err
	}
	return New(rb), nil
}

// Configure records the host's hardware, for the kernels' notes, and
// refuses it as the RuleBackend does.
func (b *Backend) Configure(ctx context.Context, info core.HostInfo) error {
	if err := b.RuleBackend.Configure(ctx, info); err != nil {
		return err
	}
	b.host.Store(&info)
	return nil
}

// RunKernel runs the kernel of req.Method from the catalog of the handler
// req.Backend on the tensors of req.Buffer: the in-process memory when
// req.Buffer.Mem is set, else the segment at req.Buffer.Path, mapped for
// the call.
func (b *Backend) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	k, err := b.catalogKernel(ctx, req.Backend, req.Method)
	if err != nil {
		return nil, err
	}
	if !onCUDA(k) {
		return Run(ctx, k, req, b.host.Load())
	}
	gpu, why := b.device()
	if gpu == nil {
		res, err := Run(ctx, k, req, b.host.Load())
		if err == nil {
			res.Note += "; no CUDA device: " + why
		}
		return res, err
	}
	res, err := run(ctx, k, req, b.host.Load(), gpu)
	if err == nil || !errors.Is(err, errDevice) {
		return res, err
	}
	// The device failed: the reference kernels still answer, and say so.
	res, err2 := Run(ctx, k, req, b.host.Load())
	if err2 == nil {
		res.Note = "the CUDA kernel failed (" + err.Error() + "); " + res.Note
	}
	return res, err2
}

// catalogKernel returns the kernel the catalog of the handler backend runs
// for m. The error wraps core.ErrUnknownBackend for a name the backend
// does not serve, core.ErrNoKernel for a method its catalog lacks.
func (b *Backend) catalogKernel(ctx context.Context, backend string, m core.Method) (core.Kernel, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return core.Kernel{}, err
	}
	return refkernels.CatalogKernel(d, backend, m)
}

// errDevice marks a failure of the device, not of the request.
var errDevice = errors.New("device kernel failed")

// Run runs kernel k's math for req with the reference kernels. host is the
// hardware the caller runs on, for the note; nil when not known. The
// tensors are req.Buffer.Mem when set, else the segment at req.Buffer.Path.
func Run(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo) (*core.KernelResult, error) {
	return run(ctx, k, req, host, nil)
}

// run is Run on gpu when it is not nil: the absorbed MLA kernel then runs
// on the device, compiled from CUDA C by NVRTC. Without gpu, or for
// another kernel, refkernels.Run runs the math on the CPU.
func run(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo, gpu *cuda.Device) (*core.KernelResult, error) {
	if gpu == nil || !onCUDA(k) {
		res, err := refkernels.Run(ctx, k, req)
		if err != nil {
			return nil, err
		}
		res.Note = EmulatedNote(k, host)
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mem := req.Buffer.Mem
	if mem == nil {
		m, err := shm.Open(req.Buffer.Path, req.Buffer.Size)
		if err != nil {
			return nil, core.NewFieldError("buffer", err.Error())
		}
		defer m.Close()
		mem = m.Bytes()
	}
	if int64(len(mem)) < req.Buffer.Size {
		return nil, core.NewFieldError("buffer", fmt.Sprintf("has %d bytes, the request says %d", len(mem), req.Buffer.Size))
	}
	cfg := req.Dims
	cfg.TopK = 0 // a dense kernel reads no indices
	b, err := Batch(req.SeqLens, req.PrefixLens)
	if err != nil {
		return nil, err
	}
	in, out, err := Views(mem, req.Tensors)
	if err != nil {
		return nil, err
	}
	in.TopKIndices = nil
	start := time.Now()
	// The buffer holds q_pe and k_pe before RoPE: rotate them first, as
	// the model does before an unfused kernel.
	if in, err = kernels.ApplyRoPE(cfg, b, in); err != nil {
		return nil, core.NewFieldError("tensors", err.Error())
	}
	if err := gpu.RunMLA(cfg, b, in, out); err != nil {
		return nil, fmt.Errorf("%w: %w", errDevice, err)
	}
	return &core.KernelResult{
		Kernel: k.Name, Library: k.Library, Emulated: false, Sparse: k.Sparse,
		TimeNS: time.Since(start).Nanoseconds(),
		Note: fmt.Sprintf("ran on %s (compute %d.%d): the CUDA MLA kernel of package cuda, standing for %s %s",
			gpu.Info().Name, gpu.Info().Major, gpu.Info().Minor, k.Library, k.Name),
	}, nil
}

// EmulatedNote says why a kernel ran emulated (RunKernel runs in the
// plugin's process, on tensors in shared memory; device code runs in the
// host's process, docs/device.md) and whether the hardware it needs is
// present.
func EmulatedNote(k core.Kernel, host *core.HostInfo) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "emulated: the reference CPU kernels (kernels.%s) ran the math of %s %s", mustMethod(k), k.Library, k.Name)
	if !onCUDA(k) {
		sb.WriteString("; in the plugin's process only the absorbed MLA of the CUDA libraries has device code (run --device cuda launches the plugins' device code in this process)")
	}
	switch {
	case host == nil:
	case len(k.Hardware) == 0:
		sb.WriteString("; the kernel needs no particular hardware")
	default:
		if ok, why := core.SupportsAny(k.Hardware, *host); ok {
			sb.WriteString("; its hardware is present")
		} else {
			sb.WriteString("; its hardware is absent: " + why)
		}
	}
	return sb.String()
}

func mustMethod(k core.Kernel) kernels.Method {
	m, _ := KernelMethod(k)
	return m
}

// KernelMethod returns the reference kernel that runs k's math: the one of
// the same method, except that a sparse kernel for MLA is DSA_MLA. It is
// refkernels.KernelMethod.
func KernelMethod(k core.Kernel) (kernels.Method, error) { return refkernels.KernelMethod(k) }

// Config returns d: kernels.Config is core.KernelDims.
//
// Deprecated: use d itself; kept for plugins written against v0.1.0.
func Config(d core.KernelDims) kernels.Config { return d }

// Dims returns cfg: kernels.Config is core.KernelDims.
//
// Deprecated: use cfg itself; kept for plugins written against v0.1.0.
func Dims(cfg kernels.Config) core.KernelDims { return cfg }

// Batch returns the kernels.BatchShape of seq_lens and extend_prefix_lens.
// It is refkernels.Batch.
func Batch(seq, prefix []int64) (kernels.BatchShape, error) { return refkernels.Batch(seq, prefix) }

// Refs returns the tensor references of l: every tensor, the output
// included, at its offset in a buffer laid out by l. It is refkernels.Refs.
func Refs(l kernels.TensorLayout) []core.TensorRef { return refkernels.Refs(l) }

// Views cuts mem into the tensors and the output that refs locate, without
// copying. Every ref must lie inside mem, 4-byte aligned, with the dtype of
// its name (int32 for positions and topk_indices, else float32). It is
// refkernels.Views.
func Views(mem []byte, refs []core.TensorRef) (kernels.Tensors, []float32, error) {
	return refkernels.Views(mem, refs)
}

// FusedRoPEKernels are the kernels of the two fused-RoPE MLA methods, which
// every name whose rules can answer them shares (core.TritonKernels):
// sglang's triton grouped-RoPE decode on ROCm and sgl-kernel's AMX decode
// on Intel CPUs.
func FusedRoPEKernels() []core.Kernel {
	var out []core.Kernel
	for _, k := range core.TritonKernels() {
		if k.Method == core.MLAFusedRoPEROCm || k.Method == core.MLAFusedRoPECPU {
			out = append(out, k)
		}
	}
	return out
}
