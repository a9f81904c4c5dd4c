package jsonl_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/jsonl"
)

func TestAppendAnswer(t *testing.T) {
	tests := []struct {
		name   string
		answer core.Answer
		want   string
	}{
		{"plugin_answer", core.Answer{Method: core.MHAOneShot, Handler: "fa3", Plugin: "fa3"},
			`{"method":"MHA_ONE_SHOT","handler":"fa3","plugin":"fa3"}` + "\n"},
		{"core_without_fallback", core.Answer{Method: core.MHA, Handler: "triton", Plugin: core.PluginCore},
			`{"method":"MHA","handler":"triton","plugin":"core"}` + "\n"},
		{"fallback_only_when_set", core.Answer{Method: core.MLA, Handler: "triton", Plugin: "core", Fallback: `plugin "fa3" crashed`},
			`{"method":"MLA","handler":"triton","plugin":"core","fallback":"plugin \"fa3\" crashed"}` + "\n"},
		{"escaped_names", core.Answer{Method: core.MLA, Handler: "a\"b\\c\n", Plugin: "p\x01\xff"},
			`{"method":"MLA","handler":"a\"b\\c\n","plugin":"p\u0001\ufffd"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(jsonl.AppendAnswer(nil, tt.answer))
			if got != tt.want {
				t.Errorf("AppendAnswer:\n got %q\nwant %q", got, tt.want)
			}
			var m map[string]string
			if err := json.Unmarshal([]byte(got), &m); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if m["method"] != tt.answer.Method.String() {
				t.Errorf("method: got %q, want %q", m["method"], tt.answer.Method)
			}
			if _, ok := m["fallback"]; ok != (tt.answer.Fallback != "") {
				t.Errorf("fallback present: got %v, want %v", ok, tt.answer.Fallback != "")
			}
			if m["handler"] != valid(tt.answer.Handler) || m["plugin"] != valid(tt.answer.Plugin) || m["fallback"] != tt.answer.Fallback {
				t.Errorf("round trip: got %q, want %+v", m, tt.answer)
			}
		})
	}
	t.Run("appends_to_dst", func(t *testing.T) {
		dst := []byte("prefix\n")
		got := string(jsonl.AppendAnswer(dst, core.Answer{Method: core.MLA, Handler: "h", Plugin: "p"}))
		if want := "prefix\n" + `{"method":"MLA","handler":"h","plugin":"p"}` + "\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		name string
		line int
		err  error
		want string
	}{
		{"field_error", 3, core.NewFieldError("forward_mode", `unknown mode "PREFILL"`), `{"error":"line 3: forward_mode: unknown mode \"PREFILL\""}` + "\n"},
		{"wrapped", 12, fmt.Errorf("fa3: %w", core.ErrUnavailable), `{"error":"line 12: fa3: backend unavailable"}` + "\n"},
		{"control_and_invalid_utf8", 1, errors.New("a\tb\x00\xc3"), `{"error":"line 1: a\tb\u0000\ufffd"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(jsonl.AppendError(nil, tt.line, tt.err))
			if got != tt.want {
				t.Errorf("AppendError:\n got %q\nwant %q", got, tt.want)
			}
			var m map[string]string
			if err := json.Unmarshal([]byte(got), &m); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if want := valid(fmt.Sprintf("line %d: %s", tt.line, tt.err)); m["error"] != want || len(m) != 1 {
				t.Errorf("round trip: got %q, want only error %q", m, want)
			}
		})
	}
}

// valid is s with every invalid byte replaced by U+FFFD, as encoding/json
// reads it back.
func valid(s string) string { return string([]rune(s)) }

func TestAppendString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", `""`},
		{"plain", "fa3", `"fa3"`},
		{"quote_and_backslash", `a"b\c`, `"a\"b\\c"`},
		{"named_controls", "\n\r\t", `"\n\r\t"`},
		{"other_controls", "\x00\x01\x1f\b\f", `"\u0000\u0001\u001f\u0008\u000c"`},
		{"del_kept", "\x7f", "\"\x7f\""},
		{"utf8_kept", "é😀\u2028", "\"é😀\u2028\""},
		{"invalid_utf8_each_byte", "a\xff\xfeb", `"a\ufffd\ufffdb"`},
		{"truncated_rune", "\xe2\x82", `"\ufffd\ufffd"`},
		{"replacement_char_kept", "\uFFFD", "\"\uFFFD\""},
		{"slash_not_escaped", "a/b", `"a/b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(jsonl.AppendString(nil, tt.in))
			if got != tt.want {
				t.Errorf("AppendString(%q): got %q, want %q", tt.in, got, tt.want)
			}
			var back string
			if err := json.Unmarshal([]byte(got), &back); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if back != valid(tt.in) {
				t.Errorf("round trip: got %q, want %q", back, valid(tt.in))
			}
		})
	}
}

// TestAppendStringEveryByte round-trips every single byte and every pair of
// bytes through encoding/json.
func TestAppendStringEveryByte(t *testing.T) {
	var b strings.Builder
	for i := range 256 {
		b.WriteByte(byte(i))
	}
	all := b.String()
	for _, s := range []string{all, strings.Repeat(all, 3)} {
		var back string
		enc := jsonl.AppendString(nil, s)
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("encoding/json of %q: %v", enc, err)
		}
		if back != valid(s) {
			t.Errorf("round trip of every byte: got %q, want %q", back, valid(s))
		}
	}
	for i := range 256 {
		for j := range 256 {
			s := string([]byte{byte(i), byte(j)})
			var back string
			if err := json.Unmarshal(jsonl.AppendString(nil, s), &back); err != nil || back != valid(s) {
				t.Fatalf("round trip of %q: got %q, %v, want %q", s, back, err, valid(s))
			}
		}
	}
}

// TestAnswerLinesDecodeLikeTheSpec checks the answer object's keys are
// exactly those of the format.
func TestAnswerLinesDecodeLikeTheSpec(t *testing.T) {
	type answer struct {
		Method   string  `json:"method"`
		Handler  string  `json:"handler"`
		Plugin   string  `json:"plugin"`
		Fallback *string `json:"fallback"`
	}
	line := jsonl.AppendAnswer(nil, core.Answer{Method: core.MHAOneShot, Handler: "fa3", Plugin: "fa3"})
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	var got answer
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if want := (answer{Method: "MHA_ONE_SHOT", Handler: "fa3", Plugin: "fa3"}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
