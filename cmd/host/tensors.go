package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/kernels"
)

// tensorSpec is a line's "tensors" object: dimensions that replace the
// flags', and either a seed ("random") or every input given inline. The
// inline arrays stay as they were written, slices of the line, until
// their lengths have been checked against the shapes the dimensions and
// the batch declare: only then is memory allocated for them.
type tensorSpec struct {
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

func (s *tensorSpec) inline() bool { return len(s.arrays) > 0 }

// splitTensors takes the "tensors" object out of line; the rest is a
// dispatch request, every other member kept as it was written, duplicates
// included, so that jsonl.DecodeRequest refuses what attnplug dispatch
// refuses. A line without "tensors" is returned as it is; "tensors" given
// twice, or a field of it given twice, is refused. Nothing of the size of
// the arrays is allocated.
func splitTensors(line []byte) ([]byte, *tensorSpec, error) {
	if !bytes.Contains(line, []byte(`"tensors"`)) {
		return line, nil, nil
	}
	members, err := objectMembers(line)
	if err != nil {
		return nil, nil, core.NewFieldError("request", "invalid JSON: "+err.Error())
	}
	var raw []byte
	rest := []byte{'{'}
	for _, m := range members {
		if m.key != "tensors" {
			if len(rest) > 1 {
				rest = append(rest, ',')
			}
			k, _ := json.Marshal(m.key)
			rest = append(append(append(rest, k...), ':'), m.value...)
			continue
		}
		if raw != nil {
			return nil, nil, core.NewFieldError("tensors", "given twice")
		}
		raw = m.value
	}
	rest = append(rest, '}')
	if raw == nil {
		return line, nil, nil
	}
	if string(raw) == "null" {
		return rest, nil, nil
	}
	spec, err := parseTensorSpec(raw)
	if err != nil {
		return nil, nil, err
	}
	return rest, spec, nil
}

// parseTensorSpec reads the "tensors" object raw: its scalars decoded,
// its arrays counted but not decoded.
func parseTensorSpec(raw []byte) (*tensorSpec, error) {
	if raw[0] != '{' {
		return nil, core.NewFieldError("tensors", "want an object, got "+jsonKind(raw))
	}
	fields, err := objectMembers(raw)
	if err != nil {
		return nil, core.NewFieldError("tensors", err.Error())
	}
	spec := &tensorSpec{}
	ints := map[string]**int{"heads": &spec.Heads, "kv_lora_rank": &spec.KVLoraRank, "qk_nope_head_dim": &spec.QKNopeHeadDim,
		"qk_rope_head_dim": &spec.QKRopeHeadDim, "v_head_dim": &spec.VHeadDim, "top_k": &spec.TopK}
	floats := map[string]**float64{"softmax_scale": &spec.SoftmaxScale, "rope_base": &spec.RopeBase}
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		name := "tensors." + f.key
		if seen[f.key] {
			return nil, core.NewFieldError(name, "given twice")
		}
		seen[f.key] = true
		if string(f.value) == "null" {
			continue // absent
		}
		switch {
		case f.key == "random":
			var seed uint64
			if err := json.Unmarshal(f.value, &seed); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want a seed from 0 to 2^64-1, got %s", shortJSON(f.value)))
			}
			spec.Random = &seed
		case ints[f.key] != nil:
			var v int
			if err := json.Unmarshal(f.value, &v); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want an integer, got %s", shortJSON(f.value)))
			}
			*ints[f.key] = &v
		case floats[f.key] != nil:
			var v float64
			if err := json.Unmarshal(f.value, &v); err != nil {
				return nil, core.NewFieldError(name, fmt.Sprintf("want a number, got %s", shortJSON(f.value)))
			}
			*floats[f.key] = &v
		case isInputName(f.key):
			if f.value[0] != '[' {
				return nil, core.NewFieldError(name, "want an array of numbers, got "+jsonKind(f.value))
			}
			if spec.arrays == nil {
				spec.arrays = map[string]rawArray{}
			}
			spec.arrays[f.key] = rawArray{data: f.value, n: countElements(f.value)}
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
func inputs(cfg kernels.Config, b kernels.BatchShape, spec *tensorSpec) (kernels.Tensors, error) {
	if !spec.inline() {
		var seed uint64
		if spec.Random != nil {
			seed = *spec.Random
		}
		t, err := kernels.RandomTensors(rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc908)), cfg, b)
		if err != nil {
			return t, core.NewFieldError("tensors", err.Error())
		}
		return t, nil
	}
	if spec.Random != nil {
		return kernels.Tensors{}, core.NewFieldError("tensors", `give either "random" or the inputs, not both`)
	}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		return kernels.Tensors{}, core.NewFieldError("tensors", err.Error())
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
		return decodeNumbers(spec.arrays[f.Name], "tensors."+f.Name, func(i int, tok []byte) error {
			v, err := strconv.ParseFloat(string(tok), 32)
			(*dst)[i] = float32(v)
			return err
		})
	}
	i32 := func(f kernels.Field, dst *[]int32) error {
		*dst = make([]int32, f.Len)
		return decodeNumbers(spec.arrays[f.Name], "tensors."+f.Name, func(i int, tok []byte) error {
			v, err := strconv.ParseInt(string(tok), 10, 32)
			(*dst)[i] = int32(v)
			return err
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

// member is one member of a JSON object: its key and its value as
// written, a slice of the object's bytes.
type member struct {
	key   string
	value []byte
}

// objectMembers returns the members of the JSON object data, in order and
// duplicates included; data must be one object and nothing else. The
// values are slices of data: nothing the size of a value is copied.
func objectMembers(data []byte) ([]member, error) {
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v) // says where and why
		if err == nil {
			err = fmt.Errorf("not valid JSON")
		}
		return nil, err
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, fmt.Errorf("want an object, got %s", jsonKind(data[i:]))
	}
	var out []member
	i = skipSpace(data, i+1)
	for data[i] != '}' {
		end := valueEnd(data, i)
		var key string
		if err := json.Unmarshal(data[i:end], &key); err != nil {
			return nil, err
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // the colon
		end = valueEnd(data, i)
		out = append(out, member{key, data[i:end:end]})
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out, nil
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value that starts at i
// of valid JSON data.
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	for j := i; j < len(data); j++ {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
	}
	return len(data)
}

// stringEnd returns the index just past the JSON string that starts at i.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// countElements counts the elements of the valid JSON array arr without
// decoding them.
func countElements(arr []byte) int {
	n, depth := 0, 0
	for j := 0; j < len(arr); j++ {
		switch arr[j] {
		case '"':
			if depth == 1 && n == 0 {
				n = 1
			}
			j = stringEnd(arr, j) - 1
		case '[', '{':
			depth++
			if depth == 2 && n == 0 {
				n = 1
			}
		case ']', '}':
			depth--
		case ',':
			if depth == 1 {
				n++
			}
		case ' ', '\t', '\r', '\n':
		default:
			if depth == 1 && n == 0 {
				n = 1
			}
		}
	}
	return n
}

// decodeNumbers calls set with the index and the text of each of the
// a.n elements of a, which must all be numbers; field names the array in
// errors. An absent array (no data) has no elements.
func decodeNumbers(a rawArray, field string, set func(i int, tok []byte) error) error {
	arr := a.data
	if len(arr) == 0 {
		return nil
	}
	i := skipSpace(arr, 1)
	for k := 0; arr[i] != ']'; k++ {
		if k >= a.n {
			return core.NewFieldError(field, fmt.Sprintf("has more than the %d elements counted", a.n))
		}
		end := valueEnd(arr, i)
		tok := arr[i:end]
		if c := tok[0]; c != '-' && (c < '0' || c > '9') {
			return core.NewFieldError(fmt.Sprintf("%s[%d]", field, k), "want a number, got "+jsonKind(tok))
		}
		if err := set(k, tok); err != nil {
			return core.NewFieldError(fmt.Sprintf("%s[%d]", field, k), fmt.Sprintf("%s does not fit the tensor's type", shortJSON(tok)))
		}
		i = skipSpace(arr, end)
		if arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return nil
}

// jsonKind names the kind of the JSON value that starts data.
func jsonKind(data []byte) string {
	if len(data) == 0 {
		return "nothing"
	}
	switch data[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// shortJSON is a JSON value cut to 40 bytes for an error message.
func shortJSON(v []byte) string {
	if len(v) > 40 {
		return string(v[:37]) + "..."
	}
	return string(v)
}
