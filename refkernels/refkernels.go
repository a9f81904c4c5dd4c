package refkernels

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
	"github.com/attnplug/attnplug/shm"
)

// Backend is a core.RuleBackend that runs its kernel catalog with the
// reference kernels: a core.Backend, core.BatchBackend, core.Configurer and
// core.KernelRunner. It is safe for concurrent use.
type Backend struct {
	*core.RuleBackend
}

// New returns rb with RunKernel.
func New(rb *core.RuleBackend) *Backend { return &Backend{RuleBackend: rb} }

// RunKernel runs the kernel of req.Method from the catalog of the handler
// req.Backend with the reference kernels (Run). The error wraps
// core.ErrUnknownBackend for a name the backend does not serve and
// core.ErrNoKernel for a method its catalog lacks (the host then runs its
// own reference kernel).
func (b *Backend) RunKernel(ctx context.Context, req *core.KernelRequest) (*core.KernelResult, error) {
	d, err := b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	k, err := CatalogKernel(d, req.Backend, req.Method)
	if err != nil {
		return nil, err
	}
	return Run(ctx, k, req)
}

// CatalogKernel returns the kernel that the catalog of the handler name
// in d runs for m. The error wraps core.ErrUnknownBackend for a name d
// does not describe, core.ErrNoKernel for a method its catalog lacks.
func CatalogKernel(d *core.Description, name string, m core.Method) (core.Kernel, error) {
	h, ok := d.Handler(name)
	if !ok {
		return core.Kernel{}, fmt.Errorf("%s: %w %q", d.Name, core.ErrUnknownBackend, name)
	}
	k, ok := h.Kernel(m)
	if !ok {
		return core.Kernel{}, fmt.Errorf("%w: %s's catalog has no kernel for %s", core.ErrNoKernel, name, m)
	}
	return k, nil
}

// Run runs kernel k's math for req with the reference kernels, on the
// CPU, on the tensors of req.Buffer: its Mem when set, else the segment at
// its Path, mapped for the call. The result names k and says that it was
// emulated. The error is a core.FieldError (wrapping
// core.ErrInvalidRequest) for tensors or lengths that do not fit the
// kernel, and wraps core.ErrNoKernel for a method without a reference
// kernel.
func Run(ctx context.Context, k core.Kernel, req *core.KernelRequest) (*core.KernelResult, error) {
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
	if !k.Sparse {
		cfg.TopK = 0 // a dense kernel reads no indices
	}
	if err := cfg.Validate(); err != nil {
		return nil, inDims(err)
	}
	b, err := Batch(req.SeqLens, req.PrefixLens)
	if err != nil {
		return nil, err
	}
	in, out, err := Views(mem, req.Tensors)
	if err != nil {
		return nil, err
	}
	if !k.Sparse {
		in.TopKIndices = nil
	}
	m, err := KernelMethod(k)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if m.PreRoped() {
		// The buffer holds q_pe and k_pe before RoPE: rotate them first,
		// as the model does before an unfused kernel.
		if in, err = kernels.ApplyRoPE(cfg, b, in); err != nil {
			return nil, core.NewFieldError("tensors", err.Error())
		}
	}
	if err := kernels.Run(m, cfg, b, in, out); err != nil {
		return nil, inDims(err)
	}
	return &core.KernelResult{
		Kernel: k.Name, Library: k.Library, Emulated: true, Sparse: k.Sparse,
		TimeNS: time.Since(start).Nanoseconds(),
		Note: fmt.Sprintf("reference: the CPU kernels of package kernels (kernels.%s, float32 data, float64 accumulation) ran the math of %s %s, not its device kernel",
			m, k.Library, k.Name),
	}, nil
}

// inDims is an error of the kernels about req: a *core.FieldError names a
// dimension (dims and lengths are checked before, so the one the method
// needs: top_k, chunk_capacity), placed in the request's "dims"; any other
// is about the tensors.
func inDims(err error) error {
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return core.NewFieldError("dims."+fe.Field, fe.Msg)
	}
	return core.NewFieldError("tensors", err.Error())
}

// KernelMethod returns the reference kernel that runs k's math: the one of
// the same method, except that a sparse kernel for MLA is DSA_MLA. The
// error wraps core.ErrNoKernel.
func KernelMethod(k core.Kernel) (kernels.Method, error) {
	if k.Sparse && k.Method == core.MLA {
		return kernels.DSAMLA, nil
	}
	m, err := kernels.ParseMethod(k.Method.String())
	if err != nil {
		return "", fmt.Errorf("%w: %w", core.ErrNoKernel, err)
	}
	return m, nil
}

// Batch returns the kernels.BatchShape of seq_lens and extend_prefix_lens.
func Batch(seq, prefix []int64) (kernels.BatchShape, error) {
	if len(seq) != len(prefix) {
		return kernels.BatchShape{}, core.NewFieldError("prefix_lens", fmt.Sprintf("has %d entries, seq_lens %d", len(prefix), len(seq)))
	}
	b := kernels.BatchShape{SeqLens: make([]int, len(seq)), PrefixLens: make([]int, len(seq))}
	for i := range seq {
		if seq[i] < 0 || seq[i] > 1<<30 || prefix[i] < 0 || prefix[i] > 1<<30 {
			return kernels.BatchShape{}, core.NewFieldError(fmt.Sprintf("seq_lens[%d]", i), "out of range")
		}
		b.SeqLens[i], b.PrefixLens[i] = int(seq[i]), int(prefix[i])
	}
	if err := b.Validate(); err != nil {
		return kernels.BatchShape{}, err
	}
	return b, nil
}

// Refs returns the tensor references of l: every tensor, the output
// included, at its offset in a buffer laid out by l.
func Refs(l kernels.TensorLayout) []core.TensorRef {
	var out []core.TensorRef
	for _, f := range l.Fields() {
		shape := make([]int64, len(f.Shape))
		for i, x := range f.Shape {
			shape[i] = int64(x)
		}
		dt := "float32"
		if f.Int32 {
			dt = "int32"
		}
		out = append(out, core.TensorRef{Name: f.Name, Offset: 4 * int64(f.Offset), Shape: shape, DType: dt})
	}
	return out
}

// Views cuts mem into the tensors and the output that refs locate, without
// copying. Every ref must lie inside mem, 4-byte aligned, with the dtype of
// its name (int32 for positions and topk_indices, else float32).
func Views(mem []byte, refs []core.TensorRef) (kernels.Tensors, []float32, error) {
	var t kernels.Tensors
	var out []float32
	seen := map[string]bool{}
	for i, r := range refs {
		field := fmt.Sprintf("tensors[%d]", i)
		if seen[r.Name] {
			return t, nil, core.NewFieldError(field, fmt.Sprintf("%q given twice", r.Name))
		}
		seen[r.Name] = true
		elems := int64(1)
		for _, x := range r.Shape {
			if x < 0 || (x > 0 && elems > int64(len(mem))/x) {
				return t, nil, core.NewFieldError(field+".shape", "does not fit the buffer")
			}
			elems *= x
		}
		if r.Offset < 0 || r.Offset%4 != 0 || r.Offset > int64(len(mem))-4*elems {
			return t, nil, core.NewFieldError(field+".offset", fmt.Sprintf("%d: %d bytes at it do not fit a buffer of %d, or it is not 4-byte aligned", r.Offset, 4*elems, len(mem)))
		}
		wantInt := r.Name == "positions" || r.Name == "topk_indices"
		if (r.DType == "int32") != wantInt || (r.DType != "int32" && r.DType != "float32") {
			return t, nil, core.NewFieldError(field+".dtype", fmt.Sprintf("%q for %s", r.DType, r.Name))
		}
		var p unsafe.Pointer
		if elems > 0 {
			p = unsafe.Pointer(&mem[r.Offset])
			if uintptr(p)%4 != 0 {
				return t, nil, core.NewFieldError(field+".offset", "not 4-byte aligned in memory")
			}
		}
		f32 := func() []float32 {
			if elems == 0 {
				return []float32{}
			}
			return unsafe.Slice((*float32)(p), elems)
		}
		i32 := func() []int32 {
			if elems == 0 {
				return []int32{}
			}
			return unsafe.Slice((*int32)(p), elems)
		}
		switch r.Name {
		case "q_nope":
			t.QNope = f32()
		case "q_pe":
			t.QPe = f32()
		case "positions":
			t.Positions = i32()
		case "c_kv":
			t.CKV = f32()
		case "k_pe":
			t.KPe = f32()
		case "w_kc":
			t.WKC = f32()
		case "w_vc":
			t.WVC = f32()
		case "topk_indices":
			t.TopKIndices = i32()
		case "out":
			out = f32()
		default:
			return t, nil, core.NewFieldError(field+".name", fmt.Sprintf("unknown tensor %q", r.Name))
		}
	}
	if out == nil {
		return t, nil, core.NewFieldError("tensors", `no "out" tensor`)
	}
	return t, out, nil
}
