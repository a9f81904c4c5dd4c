package core_test

import (
	"errors"
	"math"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestKernelDimsValidate: each dimension out of range is refused with a
// FieldError naming it as the plugin protocol's KernelDims and attnplug
// run's "tensors" spell it, and its value.
func TestKernelDimsValidate(t *testing.T) {
	good := core.KernelDims{Heads: 2, KVLoraRank: 16, QKNopeHeadDim: 8, QKRopeHeadDim: 4, VHeadDim: 8, SoftmaxScale: 0.3, RopeBase: 10000, ChunkCapacity: 8, TopK: 2}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid dims: %v", err)
	}
	for _, tc := range []struct {
		edit func(*core.KernelDims)
		want string
	}{
		{func(d *core.KernelDims) { d.Heads = 0 }, "heads: 0 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.KVLoraRank = -8 }, "kv_lora_rank: -8 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.QKNopeHeadDim = 1 << 20 }, "qk_nope_head_dim: 1048576 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.QKRopeHeadDim = 3 }, "qk_rope_head_dim: 3 is odd (RoPE rotates pairs)"},
		{func(d *core.KernelDims) { d.VHeadDim = 0 }, "v_head_dim: 0 is outside [1, 65536]"},
		{func(d *core.KernelDims) { d.SoftmaxScale = -1 }, "softmax_scale: -1: want a finite number > 0"},
		{func(d *core.KernelDims) { d.SoftmaxScale = math.NaN() }, "softmax_scale: NaN: want a finite number > 0"},
		{func(d *core.KernelDims) { d.RopeBase = 1 }, "rope_base: 1: want a finite number > 1"},
		{func(d *core.KernelDims) { d.ChunkCapacity = 0 }, "chunk_capacity: 0 is outside [1, 1073741824]"},
		{func(d *core.KernelDims) { d.TopK = 70000 }, "top_k: 70000 is outside [0, 65536]"},
	} {
		d := good
		tc.edit(&d)
		err := d.Validate()
		var fe *core.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, core.ErrInvalidRequest) || err.Error() != tc.want {
			t.Errorf("got %v, want the FieldError %q", err, tc.want)
		}
	}
}
