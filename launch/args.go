package launch

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnplug/attnplug/core"
)

// bindings are what a launch's arguments may name: the plan's tensors, its
// metadata buffers (their sizes) and the size of its workspace.
type bindings struct {
	tensors   map[string]core.TensorSpec
	meta      map[string]int64
	workspace int64
}

// checkArgs checks that the arguments of launch i bind every parameter of
// e exactly once, each with a value of the parameter's kind that names
// what the plan declares and stays inside it.
func checkArgs(i int, l core.Launch, e core.Entry, b bindings) error {
	bound := make(map[string]bool, len(l.Args))
	var total int
	for _, p := range e.Params {
		if p.Bytes() <= 0 {
			return refuse(i, "parameter %q of %s has unknown kind %q or size %d", p.Name, e.Name, p.Kind, p.Size)
		}
		if p.Bytes() > core.MaxParamBytes {
			return refuse(i, "parameter %q of %s takes %d bytes, more than %d", p.Name, e.Name, p.Bytes(), core.MaxParamBytes)
		}
		total = (total+p.Align()-1)/p.Align()*p.Align() + p.Bytes()
	}
	if total > core.MaxParamBytes {
		return refuse(i, "the parameters of %s take %d bytes, more than %d", e.Name, total, core.MaxParamBytes)
	}
	for _, a := range l.Args {
		if bound[a.Param] {
			return refuse(i, "parameter %q bound twice", a.Param)
		}
		bound[a.Param] = true
		j := slices.IndexFunc(e.Params, func(p core.Param) bool { return p.Name == a.Param })
		if j < 0 {
			return refuse(i, "entry %s has no parameter %q", e.Name, a.Param)
		}
		if err := checkValue(a, e.Params[j], b); err != nil {
			return refuse(i, "parameter %q: %v", a.Param, err)
		}
	}
	for _, p := range e.Params {
		if !bound[p.Name] {
			return refuse(i, "parameter %q of %s is not bound", p.Name, e.Name)
		}
	}
	return nil
}

// checkValue checks argument a against parameter p.
func checkValue(a core.Arg, p core.Param, b bindings) error {
	switch a.Kind {
	case core.ArgTensor, core.ArgMeta, core.ArgWorkspace:
		if p.Kind != core.ParamPtr {
			return fmt.Errorf("is %s, bound to a device address", p.Kind)
		}
		return checkAddress(a, b)
	case core.ArgInt:
		return checkInt(a.Int, p.Kind)
	case core.ArgFloat:
		if p.Kind != core.ParamF32 {
			return fmt.Errorf("is %s, bound to a float", p.Kind)
		}
		return checkFloat(a.Float)
	case core.ArgTensorMap:
		if p.Kind != core.ParamTensorMap {
			return fmt.Errorf("is %s, bound to a TMA descriptor", p.Kind)
		}
		return checkTensorMap(a, b)
	case core.ArgStruct:
		if p.Kind != core.ParamStruct {
			return fmt.Errorf("is %s, bound to a struct", p.Kind)
		}
		return checkStruct(a.Fields, p.Size, b)
	case core.ArgStride:
		if p.Kind != core.ParamI64 {
			return fmt.Errorf("is %s, bound to a stride (an i64)", p.Kind)
		}
		return checkStride(a, b)
	}
	return fmt.Errorf("unknown argument kind %q", a.Kind)
}

// checkAddress checks a tensor, metadata or workspace address.
func checkAddress(a core.Arg, b bindings) error {
	switch a.Kind {
	case core.ArgTensor:
		if _, ok := b.tensors[a.Name]; !ok {
			return fmt.Errorf("binds tensor %q, which the plan does not declare", a.Name)
		}
	case core.ArgMeta:
		size, ok := b.meta[a.Name]
		if !ok {
			return fmt.Errorf("binds metadata %q, which the plan does not declare", a.Name)
		}
		if a.Offset < 0 || a.Offset > size {
			return fmt.Errorf("offset %d is outside metadata %q of %d bytes", a.Offset, a.Name, size)
		}
	case core.ArgWorkspace:
		if a.Offset < 0 || a.Offset > b.workspace {
			return fmt.Errorf("offset %d is outside the workspace of %d bytes", a.Offset, b.workspace)
		}
	}
	return nil
}

// checkStride checks an ArgStride: a dimension of a tensor the plan
// declares.
func checkStride(a core.Arg, b bindings) error {
	t, ok := b.tensors[a.Name]
	switch {
	case !ok:
		return fmt.Errorf("a stride of tensor %q, which the plan does not declare", a.Name)
	case a.Dim < 0 || a.Dim >= len(t.Shape):
		return fmt.Errorf("the stride of dimension %d of tensor %q, which has %d", a.Dim, a.Name, len(t.Shape))
	}
	return nil
}

func checkInt(v int64, kind core.ParamKind) error {
	switch kind {
	case core.ParamI32:
		if v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%d does not fit an i32", v)
		}
	case core.ParamI64:
	default:
		return fmt.Errorf("is %s, bound to an integer", kind)
	}
	return nil
}

func checkFloat(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
		return fmt.Errorf("%v is not a finite f32", v)
	}
	return nil
}

// checkStruct checks the fields of a struct of size bytes: each inside the
// struct, aligned to its size, not overlapping another, of a size its kind
// takes, with a value that names what the plan declares.
func checkStruct(fields []core.Field, size int, b bindings) error {
	used := make([]bool, size)
	for k, f := range fields {
		a := f.Arg
		var kind core.ParamKind
		switch {
		case (a.Kind == core.ArgTensor || a.Kind == core.ArgMeta || a.Kind == core.ArgWorkspace) && f.Size == 8:
			kind = core.ParamPtr
		case a.Kind == core.ArgStride && f.Size == 8:
			kind = core.ParamI64
		case a.Kind == core.ArgInt && (f.Size == 4 || f.Size == 8):
			kind = map[uint32]core.ParamKind{4: core.ParamI32, 8: core.ParamI64}[f.Size]
		case a.Kind == core.ArgFloat && (f.Size == 4 || f.Size == 8):
			kind = core.ParamF32
		default:
			return fmt.Errorf("field %d: a %s field of %d bytes (addresses and strides take 8, integers and floats 4 or 8)", k, a.Kind, f.Size)
		}
		if uint64(f.Offset)+uint64(f.Size) > uint64(size) || f.Offset%f.Size != 0 {
			return fmt.Errorf("field %d: %d bytes at offset %d, outside the struct of %d bytes or not aligned", k, f.Size, f.Offset, size)
		}
		for o := f.Offset; o < f.Offset+f.Size; o++ {
			if used[o] {
				return fmt.Errorf("field %d at offset %d overlaps another", k, f.Offset)
			}
			used[o] = true
		}
		var err error
		switch kind {
		case core.ParamPtr:
			err = checkAddress(a, b)
		case core.ParamF32:
			err = checkFloat(a.Float)
		case core.ParamI64:
			if a.Kind == core.ArgStride {
				err = checkStride(a, b)
			} else {
				err = checkInt(a.Int, kind)
			}
		default:
			err = checkInt(a.Int, kind)
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", k, err)
		}
	}
	return nil
}

// TensorMapDType returns the CUtensorMapDataType of a tensor dtype, and
// whether TMA takes it.
func TensorMapDType(dtype string) (int, bool) {
	t, ok := map[string]int{"fp8_e4m3": 0, "fp8_e5m2": 0, "i32": 3, "i64": 5, "fp16": 6, "f32": 7, "f64": 8, "bf16": 9}[dtype]
	return t, ok
}

// swizzleSpans are the swizzles a TensorMap names, and the bytes of the
// innermost box row each takes at most.
var swizzleSpans = map[string]int64{"": 1 << 62, "32B": 32, "64B": 64, "128B": 128}

// TensorMapView returns the dimensions of m over tensor t, outermost
// first: m.View, or t's shape.
func TensorMapView(m *core.TensorMap, t core.TensorSpec) []int64 {
	if len(m.View) > 0 {
		return m.View
	}
	return t.Shape
}

// checkTensorMap checks a TMA descriptor as cuTensorMapEncodeTiled will
// take it: a declared tensor of a dtype TMA loads, a view of its elements
// of 1 to 5 dimensions, a box of one extent per dimension in [1, 256] and
// within the view, row strides of a multiple of 16 bytes, and an innermost
// box row of a multiple of 16 bytes that fits the swizzle.
func checkTensorMap(a core.Arg, b bindings) error {
	t, ok := b.tensors[a.Name]
	if !ok {
		return fmt.Errorf("a TMA descriptor over tensor %q, which the plan does not declare", a.Name)
	}
	m := a.Map
	if m == nil {
		return fmt.Errorf("a TMA descriptor over %q without its map", a.Name)
	}
	if _, ok := TensorMapDType(t.DType); !ok {
		return fmt.Errorf("a TMA descriptor over %q, whose dtype %s TMA does not load", a.Name, t.DType)
	}
	if t.Strided {
		return fmt.Errorf("a TMA descriptor over %q, a strided tensor (its descriptor is encoded for the row-major shape)", a.Name)
	}
	view := TensorMapView(m, t)
	count := func(dims []int64) int64 {
		n := int64(1)
		for _, d := range dims {
			if d < 1 || d > 1<<32 || n > math.MaxInt64/d {
				return -1
			}
			n *= d
		}
		return n
	}
	switch n := count(view); {
	case len(view) < 1 || len(view) > 5:
		return fmt.Errorf("a TMA descriptor over %q of %d dimensions (1 to 5)", a.Name, len(view))
	case n < 0 || n != count(t.Shape):
		return fmt.Errorf("view %v of %q has other elements than its shape %v", view, a.Name, t.Shape)
	case len(m.Box) != len(view):
		return fmt.Errorf("box %v of %q has %d dimensions, the view %v %d", m.Box, a.Name, len(m.Box), view, len(view))
	}
	es := int64(core.DTypeSize(t.DType))
	for d, x := range m.Box {
		if x < 1 || x > 256 || int64(x) > view[d] {
			return fmt.Errorf("box %v of %q: dimension %d is %d, outside [1, min(256, %d)]", m.Box, a.Name, d, x, view[d])
		}
	}
	stride := es
	for d := len(view) - 1; d > 0; d-- {
		stride *= view[d]
		if stride%16 != 0 {
			return fmt.Errorf("view %v of %q: rows of dimension %d are %d bytes apart, not a multiple of 16", view, a.Name, d-1, stride)
		}
	}
	span, ok := swizzleSpans[m.Swizzle]
	if !ok {
		return fmt.Errorf("swizzle %q of %q (none, 32B, 64B or 128B)", m.Swizzle, a.Name)
	}
	if _, ok := map[string]bool{"": true, "64B": true, "128B": true, "256B": true}[m.L2Promotion]; !ok {
		return fmt.Errorf("L2 promotion %q of %q (none, 64B, 128B or 256B)", m.L2Promotion, a.Name)
	}
	inner := int64(m.Box[len(m.Box)-1]) * es
	if inner%16 != 0 || inner > span {
		return fmt.Errorf("box %v of %q: its rows are %d bytes, not a multiple of 16 or more than the swizzle %q takes", m.Box, a.Name, inner, m.Swizzle)
	}
	if m.OOBNaN && (t.DType == "i32" || t.DType == "i64") {
		return fmt.Errorf("a NaN fill for %q, a tensor of integers", a.Name)
	}
	return nil
}

// checkLaunchFeatures checks launch i's clusters and programmatic launch:
// sm_90 and newer; cluster dimensions all set, dividing the grid's, at
// most 8 blocks a cluster.
func checkLaunchFeatures(i int, l core.Launch, dev core.DeviceInfo) error {
	c := l.Cluster
	if c != ([3]uint32{}) {
		if dev.ComputeCapability < 90 {
			return refuse(i, "clusters %v need compute capability 9.0, the device has %d.%d", c, dev.ComputeCapability/10, dev.ComputeCapability%10)
		}
		n := uint64(1)
		for d := range 3 {
			if c[d] == 0 || l.Grid[d]%c[d] != 0 {
				return refuse(i, "cluster %v does not divide the grid %v", c, l.Grid)
			}
			n *= uint64(c[d])
		}
		if n > 8 {
			return refuse(i, "cluster %v has %d blocks, more than 8", c, n)
		}
	}
	if l.Programmatic && dev.ComputeCapability < 90 {
		return refuse(i, "a programmatic launch needs compute capability 9.0, the device has %d.%d", dev.ComputeCapability/10, dev.ComputeCapability%10)
	}
	return nil
}
