package jsonl

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Member
		err      bool
	}{
		{"empty", ` { } `, nil, false},
		{"order_and_duplicates", `{"b":1,"a":[1,{"x":"]}"}],"b":"s,\"}"}`,
			[]Member{{"b", []byte(`1`)}, {"a", []byte(`[1,{"x":"]}"}]`)}, {"b", []byte(`"s,\"}"`)}}, false},
		{"spaces", "{ \"k\" :\t null\n, \"t\":true }", []Member{{"k", []byte(`null`)}, {"t", []byte(`true`)}}, false},
		{"escaped_key", `{"a\u0062":-1.5e3}`, []Member{{"ab", []byte(`-1.5e3`)}}, false},
		{"not_object", `[1]`, nil, true},
		{"invalid", `{"a":}`, nil, true},
		{"trailing", `{"a":1} x`, nil, true},
		{"empty_input", ``, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Members([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error %v", err, tc.err)
			}
			if !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestCutMember(t *testing.T) {
	for _, tc := range []struct {
		name, in, rest, value, err string
	}{
		{"absent", `{"backend":"fa3"}`, `{"backend":"fa3"}`, "", ""},
		{"absent_but_named_in_a_value", `{"backend":"\"tensors\""}`, `{"backend":"\"tensors\""}`, "", ""},
		{"cut", `{"backend":"fa3", "tensors": {"random":1} ,"seq_lens":[1]}`, `{"backend":"fa3","seq_lens":[1]}`, `{"random":1}`, ""},
		{"only", `{"tensors":[1,2]}`, `{}`, `[1,2]`, ""},
		{"null", `{"tensors":null,"a":1}`, `{"a":1}`, `null`, ""},
		{"other_duplicates_kept", `{"a":1,"tensors":2,"a":3}`, `{"a":1,"a":3}`, `2`, ""},
		{"twice", `{"tensors":1,"tensors":2}`, "", "", "tensors: given twice"},
		{"invalid", `{"tensors":1,}`, "", "", "request: invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest, value, err := CutMember([]byte(tc.in), "tensors")
			if tc.err != "" {
				if err == nil || !errors.Is(err, core.ErrInvalidRequest) || len(err.Error()) < len(tc.err) || err.Error()[:len(tc.err)] != tc.err {
					t.Fatalf("got %v, want an invalid request %q", err, tc.err)
				}
				return
			}
			if err != nil || string(rest) != tc.rest || string(value) != tc.value {
				t.Errorf("got %q, %q, %v; want %q, %q", rest, value, err, tc.rest, tc.value)
			}
		})
	}
}

func TestCountElementsAndEachNumber(t *testing.T) {
	for in, n := range map[string]int{`[]`: 0, `[ ]`: 0, `[1]`: 1, `[1, 2.5e3 ,-3]`: 3, `[[1,2],{"a":[3,4]},"x,y"]`: 3, `[""]`: 1, `[[]]`: 1} {
		if got := CountElements([]byte(in)); got != n {
			t.Errorf("CountElements(%s) = %d, want %d", in, got, n)
		}
	}
	var got []string
	err := EachNumber([]byte(`[ 1, -2.5 ,3e2]`), 3, "x", func(i int, tok []byte) error {
		got = append(got, strconv.Itoa(i)+"="+string(tok))
		return nil
	})
	if err != nil || !reflect.DeepEqual(got, []string{"0=1", "1=-2.5", "2=3e2"}) {
		t.Errorf("EachNumber: %v, %v", got, err)
	}
	for _, tc := range []struct{ in, err string }{
		{`[1,"2"]`, `x[1]: want a number, got a string`},
		{`[1,[2]]`, `x[1]: want a number, got an array`},
		{`[1,2,3]`, `x: has more than the 2 elements counted`},
		{`[7]`, `x[0]: 7 is odd`},
	} {
		err := EachNumber([]byte(tc.in), 2, "x", func(_ int, tok []byte) error {
			if string(tok) == "7" {
				return errors.New("is odd")
			}
			return nil
		})
		if err == nil || err.Error() != tc.err || !errors.Is(err, core.ErrInvalidRequest) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.err)
		}
	}
	if err := EachNumber(nil, 0, "x", nil); err != nil {
		t.Errorf("an absent array: %v", err)
	}
}

// FuzzCutMember: on any input, CutMember never panics; what it cuts is
// what encoding/json reads under the key, and the rest holds every other
// member.
func FuzzCutMember(f *testing.F) {
	for _, s := range []string{`{"backend":"fa3","tensors":{"random":1}}`, `{"tensors":[1,{"a":"]"}]}`, `{"a":"\"tensors\""}`, `{"tensors":1,"tensors":2}`, `{`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rest, value, err := CutMember(line, "tensors")
		if err != nil || value == nil {
			return
		}
		var whole, without map[string]json.RawMessage
		if json.Unmarshal(line, &whole) != nil {
			t.Fatalf("cut %q out of invalid JSON %q", value, line)
		}
		if err := json.Unmarshal(rest, &without); err != nil {
			t.Fatalf("rest %q of %q: %v", rest, line, err)
		}
		if _, ok := without["tensors"]; ok {
			t.Fatalf("rest %q still holds tensors", rest)
		}
		if len(without) != len(whole)-1 {
			t.Fatalf("rest %q has %d members, the line %d", rest, len(without), len(whole))
		}
		var a, b any
		if json.Unmarshal(value, &a) != nil || json.Unmarshal(whole["tensors"], &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("cut %q, encoding/json reads %q", value, whole["tensors"])
		}
	})
}
