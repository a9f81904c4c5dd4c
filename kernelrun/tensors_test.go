package kernelrun

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/kernels"
)

// TestParseTensorSpec: the "tensors" object is read without decoding its
// arrays; each is counted, and every mistake names the field and value.
func TestParseTensorSpec(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		counts   map[string]int
		err      string
	}{
		{"seed", `{"random":7,"heads":2,"top_k":0}`, nil, ""},
		{"counts", `{"q_nope":[1, 2.5e3 ,-3],"q_pe":[],"c_kv":[ 0 ],"positions":[[1,2],{"a":[3,4]},"x,y"]}`,
			map[string]int{"q_nope": 3, "q_pe": 0, "c_kv": 1, "positions": 3}, ""},
		{"null_is_absent", `{"q_nope":null,"random":null}`, map[string]int{}, ""},
		{"negative_top_k", `{"random":1,"top_k":-5}`, nil, "tensors.top_k: -5 is negative (0 runs DSA layers dense)"},
		{"unknown", `{"q_rope":[1]}`, nil, "tensors.q_rope: unknown field"},
		{"twice", `{"heads":1,"heads":2}`, nil, "tensors.heads: given twice"},
		{"heads_string", `{"heads":"2"}`, nil, `tensors.heads: want an integer, got "2"`},
		{"heads_float", `{"heads":1.5}`, nil, "tensors.heads: want an integer, got 1.5"},
		{"seed_negative", `{"random":-1}`, nil, "tensors.random: want a seed from 0 to 2^64-1, got -1"},
		{"array_not_array", `{"q_nope":"abc"}`, nil, "tensors.q_nope: want an array of numbers, got a string"},
		{"not_object", `[1,2]`, nil, "tensors: want an object, got an array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, spec, err := splitTensors([]byte(`{"backend":"fa3","tensors":` + tc.in + `}`))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, n := range tc.counts {
				if got := spec.arrays[name].n; got != n {
					t.Errorf("%s: counted %d elements, want %d", name, got, n)
				}
			}
			if len(spec.arrays) != len(tc.counts) {
				t.Errorf("arrays %v, want %v", spec.arrays, tc.counts)
			}
		})
	}
}

// TestInputsDecodeAfterTheCheck: inline arrays of the wrong length are
// refused with the counts; of the right length, decoded as encoding/json
// would; elements that are not numbers of the tensor's type are refused
// naming the index.
func TestInputsDecodeAfterTheCheck(t *testing.T) {
	cfg := kernels.Config{Heads: 1, KVLoraRank: 2, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 8}
	b := kernels.BatchShape{SeqLens: []int{2}, PrefixLens: []int{1}}
	l, err := kernels.Layout(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	want := map[string][]float32{}
	obj := map[string]any{}
	for _, f := range l.Fields() {
		if f.Int32 || f.Name == "out" {
			continue
		}
		v := make([]float32, f.Len)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
		}
		want[f.Name], obj[f.Name] = v, v
	}
	good, _ := json.Marshal(obj)
	_, spec, err := splitTensors([]byte(`{"tensors":` + string(good) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := inputs(cfg, b, spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string][]float32{"q_nope": got.QNope, "q_pe": got.QPe, "c_kv": got.CKV, "k_pe": got.KPe, "w_kc": got.WKC, "w_vc": got.WVC} {
		if !slices.Equal(g, want[name]) {
			t.Errorf("%s: got %v, want %v", name, g, want[name])
		}
	}
	if !slices.Equal(got.Positions, []int32{1}) {
		t.Errorf("positions: got %v, want [1]", got.Positions)
	}
	for _, tc := range []struct{ change, err string }{
		{`"q_nope":[1,2,3]`, fmt.Sprintf("tensors.q_nope: has 3 elements, want %d (shape %v)", l.QNope.Len, l.QNope.Shape)},
		{`"q_nope":[1,"2"]`, `tensors.q_nope[1]: want a number, got a string`},
		{`"q_nope":[1,1e39]`, `tensors.q_nope[1]: 1e39 does not fit the tensor's type`},
		{`"positions":[1.5]`, `tensors.positions[0]: 1.5 does not fit the tensor's type`},
		{`"positions":[4294967296]`, `tensors.positions[0]: 4294967296 does not fit the tensor's type`},
		{`"topk_indices":[1]`, "tensors.topk_indices: has 1 elements, want 0 (shape [1 0])"},
	} {
		key, _, _ := strings.Cut(strings.Trim(tc.change, `"`), `"`)
		line := string(mustReplaceMember(t, good, key, tc.change))
		_, spec, err := splitTensors([]byte(`{"tensors":` + line + `}`))
		if err == nil {
			_, err = inputs(cfg, b, spec)
		}
		if err == nil || err.Error() != tc.err {
			t.Errorf("%s: got %v, want %q", tc.change, err, tc.err)
		}
	}
}

// mustReplaceMember returns the JSON object obj with its member key
// replaced by the text member.
func mustReplaceMember(t *testing.T, obj []byte, key, member string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, key)
	rest, _ := json.Marshal(m)
	return append([]byte("{"+member+","), rest[1:]...)
}
