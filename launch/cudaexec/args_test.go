package cudaexec

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/cuda"
)

// TestLayout: each parameter at the offset the kernel's parameter space
// gives it (aligned to its size, 64 for a TMA descriptor, 8 for a
// struct), and the buffer's size; never less than 8 bytes.
func TestLayout(t *testing.T) {
	tests := []struct {
		name   string
		params []core.Param
		offs   []int
		size   int
	}{
		{"none", nil, []int{}, 8},
		{"scalars", []core.Param{{Kind: core.ParamI32}, {Kind: core.ParamPtr}, {Kind: core.ParamF32}, {Kind: core.ParamI32}, {Kind: core.ParamI64}},
			[]int{0, 8, 16, 20, 24}, 32},
		{"one_i32", []core.Param{{Kind: core.ParamI32}}, []int{0}, 8},
		{"descriptor_after_an_int", []core.Param{{Kind: core.ParamI32}, {Kind: core.ParamTensorMap}, {Kind: core.ParamI32}},
			[]int{0, 64, 192}, 196},
		{"struct", []core.Param{{Kind: core.ParamF32}, {Kind: core.ParamStruct, Size: 20}, {Kind: core.ParamPtr}},
			[]int{0, 8, 32}, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offs, size := layout(tt.params)
			if !slices.Equal(offs, tt.offs) || size != tt.size {
				t.Errorf("layout: got %v, %d; want %v, %d", offs, size, tt.offs, tt.size)
			}
		})
	}
}

// TestAligned: n zero bytes whose first is 64-byte aligned (a
// CUtensorMap's alignment), which an append cannot move.
func TestAligned(t *testing.T) {
	for _, n := range []int{8, 20, 128, 196, 4096} {
		b := aligned(n)
		if len(b) != n || cap(b) != n {
			t.Errorf("aligned(%d): len %d, cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(&b[0])); p%64 != 0 {
			t.Errorf("aligned(%d) starts at %#x", n, p)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("aligned(%d)[%d] = %d", n, i, v)
			}
		}
	}
}

// TestPut: each kind of argument is written where the kernel reads it,
// in its width: addresses with their offsets, integers and floats of 4
// and 8 bytes, strides of the row-major buffers, a struct's fields at
// their offsets; tensors and TMA
// descriptors are recorded for each launch to write.
func TestPut(t *testing.T) {
	pr := &Prepared{
		specs: []core.TensorSpec{{Name: "q", DType: "bf16", Shape: []int64{3, 16, 576}}, {Name: "kv_cache", DType: "bf16", Shape: []int64{8, 64, 576}}},
		meta:  map[string]Buffer{"sched": {Ptr: 0x10000, Bytes: 64}},
		ws:    Buffer{Ptr: 0x20000, Bytes: 1 << 20},
	}
	defer pr.pinner.Unpin()
	index := map[string]int{"q": 0, "kv_cache": 1}
	st := &step{args: aligned(256)}
	u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(st.args[off:]) }
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(st.args[off:]) }
	puts := []struct {
		off, size int
		a         core.Arg
	}{
		{0, 8, core.Arg{Kind: core.ArgMeta, Name: "sched", Offset: 16}},
		{8, 8, core.Arg{Kind: core.ArgWorkspace, Offset: 4096}},
		{16, 4, core.Arg{Kind: core.ArgInt, Int: -2}},
		{24, 8, core.Arg{Kind: core.ArgInt, Int: -1 << 40}},
		{32, 4, core.Arg{Kind: core.ArgFloat, Float: 0.125}},
		{40, 8, core.Arg{Kind: core.ArgTensor, Name: "kv_cache"}},
		{48, 32, core.Arg{Kind: core.ArgStruct, Fields: []core.Field{
			{Offset: 0, Size: 8, Arg: core.Arg{Kind: core.ArgWorkspace}},
			{Offset: 8, Size: 4, Arg: core.Arg{Kind: core.ArgInt, Int: 7}},
			{Offset: 16, Size: 8, Arg: core.Arg{Kind: core.ArgFloat, Float: 1.5}},
			{Offset: 24, Size: 8, Arg: core.Arg{Kind: core.ArgTensor, Name: "q"}},
		}}},
		{80, 8, core.Arg{Kind: core.ArgStride, Name: "q", Dim: 0}},
		{88, 8, core.Arg{Kind: core.ArgStride, Name: "kv_cache", Dim: 1}},
		{96, 8, core.Arg{Kind: core.ArgStride, Name: "kv_cache", Dim: 2}},
		{128, 128, core.Arg{Kind: core.ArgTensorMap, Name: "kv_cache", Map: &core.TensorMap{
			View: []int64{512, 576}, Box: []uint32{64, 64}, Swizzle: "128B", L2Promotion: "256B"}}},
	}
	for _, p := range puts {
		if err := pr.put(st, p.off, p.size, p.a, index); err != nil {
			t.Fatalf("put %+v: %v", p.a, err)
		}
	}
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"metadata + 16", u64(0), 0x10010},
		{"workspace + 4096", u64(8), 0x21000},
		{"i32 -2", uint64(u32(16)), uint64(uint32(0xfffffffe))},
		{"the i32's neighbour", uint64(u32(20)), 0},
		{"i64 -2^40", u64(24), uint64(1<<64 - 1<<40)},
		{"f32 0.125", uint64(u32(32)), uint64(math.Float32bits(0.125))},
		{"the tensor's slot, until a launch", u64(40), 0},
		{"struct: the workspace", u64(48), 0x20000},
		{"struct: i32 7", uint64(u32(56)), 7},
		{"struct: f64 1.5", u64(64), math.Float64bits(1.5)},
		{"q's token stride", u64(80), 16 * 576},
		{"the cache's page-row stride", u64(88), 576},
		{"the innermost stride", u64(96), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if want := []tensorArg{{off: 40, tensor: 1}, {off: 72, tensor: 0}}; !slices.Equal(st.tensors, want) {
		t.Errorf("tensor slots %+v, want %+v", st.tensors, want)
	}
	if len(st.maps) != 1 {
		t.Fatalf("%d descriptors recorded, want 1", len(st.maps))
	}
	m := st.maps[0]
	want := cuda.TensorMap{DType: 9, Rank: 2, Dims: [5]uint64{576, 512}, Strides: [5]uint64{1152}, Box: [5]uint32{64, 64},
		Swizzle: 3, L2Promotion: 3}
	if m.off != 128 || m.tensor != 1 || *m.m != want {
		t.Errorf("descriptor at %d over tensor %d: %+v\nwant at 128 over tensor 1: %+v", m.off, m.tensor, *m.m, want)
	}
	if err := pr.put(st, 0, 8, core.Arg{Kind: "register"}, index); err == nil {
		t.Error("an unknown argument kind was written")
	}
	if err := pr.put(st, 128, 128, core.Arg{Kind: core.ArgTensorMap, Name: "q"}, index); err == nil {
		t.Error("a descriptor without its map was recorded")
	}
}
