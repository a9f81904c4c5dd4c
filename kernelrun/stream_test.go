package kernelrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/kernels"
)

// inlineLine is a request line of fa3 on one fresh sequence of seq tokens
// whose float inputs are all given inline as v (positions left out).
func inlineLine(t *testing.T, seq int, v float64) string {
	t.Helper()
	cfg := kernels.Config{Heads: 1, KVLoraRank: 4, QKNopeHeadDim: 2, QKRopeHeadDim: 2, VHeadDim: 2, SoftmaxScale: 0.5, RopeBase: 10000, ChunkCapacity: 1 << 17}
	l, err := kernels.Layout(cfg, kernels.BatchShape{SeqLens: []int{seq}, PrefixLens: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	tensors := map[string]any{"heads": 1, "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2, "softmax_scale": 0.5}
	for _, f := range []kernels.Field{l.QNope, l.QPe, l.CKV, l.KPe, l.WKC, l.WVC} {
		vals := make([]float64, f.Len)
		for i := range vals {
			vals[i] = v
		}
		tensors[f.Name] = vals
	}
	req := map[string]any{"backend": "fa3", "forward_mode": "EXTEND", "extend_prefix_lens": []int{0}, "seq_lens": []int{seq},
		"max_chunk_capacity": 131072, "tensors": tensors}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStreamNonFiniteIsAnError: a line whose kernel output, reference or
// error is NaN or infinite (a softmax_scale of 1e308, inputs of 1e30) is
// answered with an error line that says so, and refused; no line is left
// empty and the lines around it are answered.
func TestStreamNonFiniteIsAnError(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	lines := []struct{ line, err string }{
		{`{"backend":"flashinfer","forward_mode":"DECODE","seq_lens":[40],"tensors":{"random":3,"softmax_scale":1e308}}`,
			"line 1: tensors: result not finite: the output of "},
		{`{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}`, ""},
		{inlineLine(t, 3, 1e30), "line 3: tensors: result not finite: "},
		{inlineLine(t, 3, 0.5), ""},
	}
	var in strings.Builder
	for _, l := range lines {
		in.WriteString(l.line + "\n")
	}
	var out bytes.Buffer
	o := DefaultOptions()
	refused, err := Stream(testContext(t), reg, strings.NewReader(in.String()), &out, o)
	if err != nil {
		t.Fatal(err)
	}
	if refused != 2 {
		t.Errorf("%d lines refused, want 2", refused)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(lines) {
		t.Fatalf("%d answer lines for %d requests:\n%s", len(got), len(lines), out.String())
	}
	for i, line := range got {
		var a struct {
			Kernel, Error string
			RelError      *float64 `json:"rel_error"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("answer %d: %v: %q", i+1, err, line)
		}
		switch want := lines[i].err; {
		case want == "" && (a.Error != "" || a.Kernel == "" || a.RelError == nil):
			t.Errorf("answer %d: %s, want a kernel's answer", i+1, line)
		case want != "" && (!strings.HasPrefix(a.Error, want) || !strings.Contains(a.Error, "too large for the arithmetic")):
			t.Errorf("answer %d: %s, want an error starting %q that says why", i+1, line, want)
		}
	}
}

// TestAppendAnswerRefusesNaN: an answer JSON cannot hold gives an error,
// which Stream writes as the line's error, and nothing is appended.
func TestAppendAnswerRefusesNaN(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1)} {
		got, err := appendAnswer([]byte("x"), &Answer{Method: "MLA", RelError: x})
		if err == nil || string(got) != "x" || !strings.HasPrefix(err.Error(), "answer: json: unsupported value") {
			t.Errorf("rel_error %v: got %q, %v; want nothing appended and the JSON error", x, got, err)
		}
	}
	got, err := appendAnswer(nil, &Answer{Method: "MLA", RelError: 1e-8})
	if err != nil || !strings.HasPrefix(string(got), `{"method":"MLA"`) || !strings.HasSuffix(string(got), "}\n") {
		t.Errorf("a finite answer: %q, %v", got, err)
	}
}

// TestStreamTensorsWithoutInputs: a "tensors" object that gives neither
// "random" nor the inputs ({}, dimensions alone, "random": null) gives no
// tensors: without --random-tensors the line is refused naming the field,
// as a line without "tensors" is; with it, the tensors are those of
// --seed plus the line number, as for a line without "tensors", at the
// object's dimensions.
func TestStreamTensorsWithoutInputs(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	const head = `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[6],"tensors":`
	objects := []string{`{}`, `{"heads":3}`, `{"random":null,"top_k":0}`}
	stream := func(o Options, in string) []map[string]any {
		t.Helper()
		var out bytes.Buffer
		if _, err := Stream(testContext(t), reg, strings.NewReader(in), &out, o); err != nil {
			t.Fatal(err)
		}
		var answers []map[string]any
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			var a map[string]any
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("%v: %q", err, line)
			}
			answers = append(answers, a)
		}
		return answers
	}
	var in strings.Builder
	for _, obj := range objects {
		in.WriteString(head + obj + "}\n")
	}
	for i, a := range stream(DefaultOptions(), in.String()) {
		want := fmt.Sprintf(`line %d: tensors: gives neither "random" nor the inputs: `, i+1)
		if e, _ := a["error"].(string); !strings.HasPrefix(e, want) || !strings.Contains(e, "--random-tensors") {
			t.Errorf("%s without --random-tensors: got %v, want an error starting %q that names --random-tensors", objects[i], a, want)
		}
	}
	// With --random-tensors, line n of each object against the same line
	// with "random": Seed+n written out.
	o := DefaultOptions()
	o.RandomTensors, o.Seed = true, 40
	for i, obj := range objects {
		n := i + 1
		seeded := strings.Replace(obj, "{", fmt.Sprintf(`{"random":%d,`, o.Seed+uint64(n)), 1)
		seeded = strings.Replace(strings.Replace(seeded, `"random":null,`, "", 1), ",}", "}", 1)
		var in strings.Builder
		for range n - 1 {
			in.WriteString("\n")
		}
		in.WriteString(head + obj + "}\n" + head + seeded + "}\n")
		got := stream(o, in.String())
		if len(got) != 2 || got[0]["error"] != nil || got[1]["error"] != nil {
			t.Fatalf("%s and %s: %v, want two answers", obj, seeded, got)
		}
		if got[0]["rel_error"] != got[1]["rel_error"] {
			t.Errorf("%s at line %d: rel_error %v, want %v, that of %s", obj, n, got[0]["rel_error"], got[1]["rel_error"], seeded)
		}
	}
}

// TestStreamDimsErrorsNameTheLine: a dimension or a length out of range
// is refused naming the field as the line spells it, and its value.
func TestStreamDimsErrorsNameTheLine(t *testing.T) {
	reg := openTestRegistry(t, bins.PluginDir)
	const head = `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[3],"tensors":{"random":1,`
	for _, tc := range []struct{ line, want string }{
		{head + `"softmax_scale":-1}}`, "line 1: tensors.softmax_scale: -1: want a finite number > 0"},
		{head + `"qk_rope_head_dim":3}}`, "line 1: tensors.qk_rope_head_dim: 3 is odd (RoPE rotates pairs)"},
		{head + `"heads":0}}`, "line 1: tensors.heads: 0 is outside [1, 65536]"},
		{head + `"rope_base":1}}`, "line 1: tensors.rope_base: 1: want a finite number > 1"},
		{`{"backend":"dsa","forward_mode":"DECODE","seq_lens":[3],"tensors":{"random":1,"top_k":70000}}`, "line 1: tensors.top_k: 70000 is outside [0, 65536]"},
		{`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[0]}`, "line 1: seq_lens[0]: request 0 has no new token (extend_prefix_lens[0] = seq_lens[0] = 0)"},
		{`{"backend":"fa3","forward_mode":"EXTEND","seq_lens":[20000000]}`, "line 1: seq_lens[0]: 20000000 is more than 16777216"},
	} {
		var out bytes.Buffer
		o := DefaultOptions()
		o.RandomTensors = true
		if _, err := Stream(testContext(t), reg, strings.NewReader(tc.line+"\n"), &out, o); err != nil {
			t.Fatal(err)
		}
		var a struct{ Error string }
		if err := json.Unmarshal(out.Bytes(), &a); err != nil || a.Error != tc.want {
			t.Errorf("%s: got %s, want the error %q", tc.line, out.String(), tc.want)
		}
	}
}
