package backendkit

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/refkernels"
)

// Backend is a core.RuleBackend that runs its kernels: a core.Backend,
// core.BatchBackend, core.Configurer and core.KernelRunner, and, given the
// plugin's device code (WithDeviceCode), a core.KernelPlanner that hands
// it to the host (device.go). It is safe for concurrent use.
type Backend struct {
	*core.RuleBackend
	host   atomic.Pointer[core.HostInfo]
	device DeviceCode // nil: none
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
// req.Backend on the tensors of req.Buffer (the in-process memory when
// req.Buffer.Mem is set, else the segment at req.Buffer.Path, mapped for
// the call) with the reference kernels, and says so in the result: the
// device code runs in the host's process, on the host's tensors
// (KernelModules, PlanKernel; attnplug run --device cuda).
func (b *Backend) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	k, err := b.catalogKernel(ctx, req.Backend, req.Method)
	if err != nil {
		return nil, err
	}
	res, err := Run(ctx, k, req, b.host.Load())
	if err == nil && b.hasDeviceCode(k) {
		res.Note += "; its device code runs in the host's process, on the host's tensors (attnplug run --device cuda)"
	}
	return res, err
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

// Run runs kernel k's math for req with the reference kernels
// (refkernels.Run). host is the hardware the caller runs on, for the note;
// nil when not known. The tensors are req.Buffer.Mem when set, else the
// segment at req.Buffer.Path.
func Run(ctx context.Context, k core.Kernel, req *core.KernelRequest, host *core.HostInfo) (*core.KernelResult, error) {
	res, err := refkernels.Run(ctx, k, req)
	if err != nil {
		return nil, err
	}
	res.Note = EmulatedNote(k, host)
	return res, nil
}

// EmulatedNote says that a kernel ran emulated (Run runs the reference
// kernels, in the process that calls it) and whether the hardware it needs
// is present; a Backend's RunKernel adds where its device code runs.
func EmulatedNote(k core.Kernel, host *core.HostInfo) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "emulated: the reference CPU kernels (kernels.%s) ran the math of %s %s", mustMethod(k), k.Library, k.Name)
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
