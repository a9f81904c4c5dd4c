package kernelrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
	"github.com/attnplug/attnplug/kernels"
)

// TensorSpec is a line's "tensors" object: dimensions that replace the
// Options', and either a seed ("random") or every input given inline. The
// inline arrays stay as they were written, slices of the line, until
// their lengths have been checked against the shapes the dimensions and
// the batch declare: only then is memory allocated for them. One that
// gives neither a seed nor the inputs gives no tensors, and Run refuses
// it. A Go caller of Run gives a seed: &TensorSpec{Random: &seed}.
type TensorSpec struct {
	Random        *uint64
	Heads         *int
	KVLoraRank    *int
	QKNopeHeadDim *int
	QKRopeHeadDim *int
	VHeadDim      *int
	TopK          *int
	SoftmaxScale  *float64
	RopeBase      *float64

	// arrays holds each inline input by its tensor name ("q_nope", ...):
	// the JSON array as written and its element count.
	arrays map[string]rawArray
}

// rawArray is a JSON array of numbers not decoded yet.
type rawArray struct {
	data []byte // "[...]", a slice of the line
	n    int    // elements
}

// inputNames is the inline inputs a "tensors" object may give.
func inputNames() []string {
	return []string{"q_nope", "q_pe", "positions", "c_kv", "k_pe", "w_kc", "w_vc", "topk_indices"}
}

func (s *TensorSpec) inline() bool { return len(s.arrays) > 0 }

// splitTensors takes the "tensors" object out of line (jsonl.CutMember);
// the rest is a dispatch request, every other member kept as it was
// written, so that jsonl.DecodeRequest refuses what attnplug dispatch
// refuses. A line without "tensors" is returned as it is; "tensors" given
// twice, or a field of it given twice, is refused. Nothing of the size of
// the arrays is allocated.
func splitTensors(line []byte) ([]byte, *TensorSpec, error) {
	rest, raw, err := jsonl.CutMember(line, "tensors")
	if err != nil || raw == nil || string(raw) == "null" {
		return rest, nil, err
	}
	spec, err := parseTensorSpec(raw)
	if err != nil {
		return nil, nil, err
	}
	return rest, spec, nil
}

// parseTensorSpec reads the "tensors" object raw: its scalars decoded,
// its arrays counted but not decoded.
func parseTensorSpec(raw []byte) (*TensorSpec, error) {
	if raw[0] != '{' {
		return nil, core.NewFieldError("tensors", "want an object, got "+jsonl.Kind(raw))
	}
	fields, err := jsonl.Members(raw)
	if err != nil {
		return nil, core.NewFieldError("tensors", err.Error())
	}
	spec := &TensorSpec{}
	ints := map[string]**int{"heads": &spec.Heads, "kv_lora_rank": &spec.KVLoraRank, "qk_nope_head_dim": &spec.QKNopeHeadDim,
		"qk_rope_head_dim": &spec.QKRopeHeadDim, "v_head_dim": &spec.VHeadDim, "top_k": &spec.TopK}
	floats := map[string]**float64{"softmax_scale": &spec.SoftmaxScale, "rope_base": &spec.RopeBase}
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		name := "tensors." + f.Key
		if seen[f.Key] {
			return nil, core.NewFieldError(name, "given twice")
		}
		seen[f.Key] = true
		if string(f.Value) == "null" {
			continue // absent
		}
		switch {
		case f.Key == "random":
			var seed uint64
			if err := json.Unmarshal(f.Value, &seed); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want a seed from 0 to 2^64-1, got %s", jsonl.Excerpt(f.Value)))
			}
			spec.Random = &seed
		case ints[f.Key] != nil:
			var v int
			if err := json.Unmarshal(f.Value, &v); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want an integer, got %s", jsonl.Excerpt(f.Value)))
			}
			*ints[f.Key] = &v
		case floats[f.Key] != nil:
			var v float64
			if err := json.Unmarshal(f.Value, &v); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want a number, got %s", jsonl.Excerpt(f.Value)))
			}
			*floats[f.Key] = &v
		case isInputName(f.Key):
			if f.Value[0] != '[' {
				return nil, core.NewFieldError(name, "want an array of numbers, got "+jsonl.Kind(f.Value))
			}
			if spec.arrays == nil {
				spec.arrays = map[string]rawArray{}
			}
			spec.arrays[f.Key] = rawArray{data: f.Value, n: jsonl.CountElements(f.Value)}
		default:
			return nil, core.NewFieldError(name, "unknown field")
		}
	}
	if spec.TopK != nil && *spec.TopK < 0 {
		return nil, core.NewFieldError("tensors.top_k", fmt.Sprintf("%d is negative (0 runs DSA layers dense)", *spec.TopK))
	}
	return spec, nil
}

func isInputName(key string) bool {
	for _, n := range inputNames() {
		if n == key {
			return true
		}
	}
	return false
}

// inputs returns the tensors of spec for cfg and b: random from its seed,
// or the inline arrays. Each inline array must have the length of its
// tensor in the layout, checked before anything is allocated for it;
// positions, when not given, are each request's prefix length onwards.
func inputs(cfg kernels.Config, b kernels.BatchShape, spec *TensorSpec) (kernels.Tensors, error) {
	if !spec.inline() {
		seed := *spec.Random // Run refused a spec with neither
		t, err := kernels.RandomTensors(rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc908)), cfg, b)
		if err != nil {
			return t, inTensors(err)
		}
		return t, nil
	}
	if spec.Random != nil {
		return kernels.Tensors{}, core.NewFieldError("tensors", `give either "random" or the inputs, not both`)
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		return kernels.Tensors{}, inTensors(err)
	}
	fields := []kernels.Field{l.QNope, l.QPe, l.Positions, l.CKV, l.KPe, l.WKC, l.WVC, l.TopKIndices}
	for _, f := range fields {
		a, ok := spec.arrays[f.Name]
		if !ok && f.Name == "positions" {
			continue
		}
		if a.n != f.Len {
			return kernels.Tensors{}, core.NewFieldError("tensors."+f.Name, fmt.Sprintf("has %d elements, want %d (shape %v)", a.n, f.Len, f.Shape))
		}
	}
	var t kernels.Tensors
	f32 := func(f kernels.Field, dst *[]float32) error {
		*dst = make([]float32, f.Len)
		a := spec.arrays[f.Name]
		return jsonl.EachNumber(a.data, a.n, "tensors."+f.Name, func(i int, tok []byte) error {
			v, err := strconv.ParseFloat(string(tok), 32)
			(*dst)[i] = float32(v)
			return notFit(err)
		})
	}
	i32 := func(f kernels.Field, dst *[]int32) error {
		*dst = make([]int32, f.Len)
		a := spec.arrays[f.Name]
		return jsonl.EachNumber(a.data, a.n, "tensors."+f.Name, func(i int, tok []byte) error {
			v, err := strconv.ParseInt(string(tok), 10, 32)
			(*dst)[i] = int32(v)
			return notFit(err)
		})
	}
	for _, err := range []error{
		f32(l.QNope, &t.QNope), f32(l.QPe, &t.QPe), f32(l.CKV, &t.CKV), f32(l.KPe, &t.KPe),
		f32(l.WKC, &t.WKC), f32(l.WVC, &t.WVC), i32(l.TopKIndices, &t.TopKIndices),
	} {
		if err != nil {
			return kernels.Tensors{}, err
		}
	}
	if _, ok := spec.arrays["positions"]; ok {
		if err := i32(l.Positions, &t.Positions); err != nil {
			return kernels.Tensors{}, err
		}
	} else {
		t.Positions = make([]int32, 0, b.Tokens())
		for r := range b.Requests() {
			for i := b.PrefixLens[r]; i < b.SeqLens[r]; i++ {
				t.Positions = append(t.Positions, int32(i))
			}
		}
	}
	return t, nil
}

// notFit is the error of a number that does not parse as a tensor's
// element type.
func notFit(err error) error {
	if err != nil {
		return errors.New("does not fit the tensor's type")
	}
	return nil
}
