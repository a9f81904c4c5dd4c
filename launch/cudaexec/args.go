package cudaexec

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
	"github.com/attnplug/attnplug/launch"
)

// layout returns each parameter's byte offset in a launch's argument
// buffer, aligned as the kernel's parameter space aligns it, and the
// buffer's size.
func layout(params []core.Param) ([]int, int) {
	offs := make([]int, len(params))
	n := 0
	for i, p := range params {
		a := p.Align()
		n = (n + a - 1) / a * a
		offs[i] = n
		n += p.Bytes()
	}
	return offs, max(n, 8)
}

// aligned returns n zero bytes whose first is 64-byte aligned (a
// CUtensorMap's alignment).
func aligned(n int) []byte {
	b := make([]byte, n+64)
	skip := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[skip : skip+n : skip+n]
}

// put writes argument a (of size bytes) at byte off of st.args, or
// records what each launch writes there: the layer's tensor addresses and
// TMA descriptors. launch.Check has checked a against its parameter, in
// the modules the plan's Source checked it with; put still refuses an
// argument that does not fit the slot of the entry loaded here (a plan
// checked against other modules of the same names), rather than write
// past it.
func (pr *Prepared) put(st *step, off, size int, a core.Arg, index map[string]int) error {
	if off < 0 || off+size > len(st.args) || !slotFits(a, size) {
		return fmt.Errorf("a %s argument does not fit the loaded entry's %d-byte parameter at byte %d of %d (was the plan checked against other modules?)",
			a.Kind, size, off, len(st.args))
	}
	buf := st.args[off : off+size]
	switch a.Kind {
	case core.ArgTensor:
		st.tensors = append(st.tensors, tensorArg{off: off, tensor: index[a.Name]})
	case core.ArgMeta:
		binary.LittleEndian.PutUint64(buf, pr.meta[a.Name].Ptr+uint64(a.Offset))
	case core.ArgWorkspace:
		binary.LittleEndian.PutUint64(buf, pr.ws.Ptr+uint64(a.Offset))
	case core.ArgInt:
		if size == 4 {
			binary.LittleEndian.PutUint32(buf, uint32(int32(a.Int)))
		} else {
			binary.LittleEndian.PutUint64(buf, uint64(a.Int))
		}
	case core.ArgFloat:
		if size == 4 {
			binary.LittleEndian.PutUint32(buf, math.Float32bits(float32(a.Float)))
		} else {
			binary.LittleEndian.PutUint64(buf, math.Float64bits(a.Float))
		}
	case core.ArgStride:
		// This host's buffers hold their tensors row-major (Buffer: an
		// address and a size), a strided one too.
		binary.LittleEndian.PutUint64(buf, uint64(rowMajorStride(pr.specs[index[a.Name]].Shape, a.Dim)))
	case core.ArgStruct:
		for _, f := range a.Fields {
			if int(f.Offset)+int(f.Size) > size {
				return fmt.Errorf("a field of %d bytes at byte %d of a %d-byte struct", f.Size, f.Offset, size)
			}
			if err := pr.put(st, off+int(f.Offset), int(f.Size), f.Arg, index); err != nil {
				return err
			}
		}
	case core.ArgTensorMap:
		m, err := pr.tensorMap(a, index)
		if err != nil {
			return err
		}
		m.off = off
		pr.pinner.Pin(m.m)
		st.maps = append(st.maps, m)
	default:
		return fmt.Errorf("unknown argument kind %q", a.Kind)
	}
	return nil
}

// slotFits reports whether an argument of a's kind fits a parameter slot
// of size bytes: an address or a stride 8, a number 4 or 8, a TMA
// descriptor a tensormap's; a struct's fields are bounded by put.
func slotFits(a core.Arg, size int) bool {
	switch a.Kind {
	case core.ArgTensor, core.ArgMeta, core.ArgWorkspace, core.ArgStride:
		return size == 8
	case core.ArgInt, core.ArgFloat:
		return size == 4 || size == 8
	case core.ArgTensorMap:
		return size == core.ParamTensorMap.Size()
	}
	return size > 0
}

// rowMajorStride is the element stride of dimension dim of a row-major
// tensor of shape.
func rowMajorStride(shape []int64, dim int) int64 {
	n := int64(1)
	for _, d := range shape[dim+1:] {
		n *= d
	}
	return n
}

// mapArg is a TMA descriptor at byte off of a step's args, over tensor
// tensor, encoded again whenever the bound tensor's address changes.
type mapArg struct {
	off, tensor int
	m           *cuda.TensorMap // pinned with the step
	last        uint64
}

// tensorMap converts a's map over its tensor to the driver's form:
// dimensions, byte strides and box innermost first.
func (pr *Prepared) tensorMap(a core.Arg, index map[string]int) (mapArg, error) {
	t := pr.specs[index[a.Name]]
	dt, ok := launch.TensorMapDType(t.DType)
	if !ok || a.Map == nil {
		return mapArg{}, fmt.Errorf("a TMA descriptor over %s (%s)", a.Name, t.DType)
	}
	view := launch.TensorMapView(a.Map, t)
	r := len(view)
	m := &cuda.TensorMap{DType: dt, Rank: r,
		Swizzle:     map[string]int{"": 0, "32B": 1, "64B": 2, "128B": 3}[a.Map.Swizzle],
		L2Promotion: map[string]int{"": 0, "64B": 1, "128B": 2, "256B": 3}[a.Map.L2Promotion],
		OOBNaN:      a.Map.OOBNaN}
	stride := uint64(core.DTypeSize(t.DType))
	for d := range r {
		m.Dims[d] = uint64(view[r-1-d])
		m.Box[d] = a.Map.Box[r-1-d]
		if d > 0 {
			m.Strides[d-1] = stride
		}
		stride *= uint64(view[r-1-d])
	}
	return mapArg{tensor: index[a.Name], m: m}, nil
}

// encode writes the descriptor over the bound tensor into args, when its
// address differs from the one last encoded.
func (ma *mapArg) encode(c *cuda.Ctx, args []byte, tensors []Buffer) error {
	p := tensors[ma.tensor].Ptr
	if p == ma.last {
		return nil
	}
	ma.m.Addr = p
	if err := c.EncodeTensorMap(unsafe.Pointer(&args[ma.off]), ma.m); err != nil { // both pinned
		return err
	}
	ma.last = p
	return nil
}
