package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/attnplug/attnplug/core"
)

// This file splits JSON without decoding it: the members of an object and
// the elements of an array, as slices of the input, for a line that
// carries more than a dispatch request (attnplug run's "tensors") and
// arrays too large to decode before their length is checked.

// Member is one member of a JSON object: its key and its value as
// written, a slice of the object's bytes.
type Member struct {
	Key   string
	Value []byte
}

// Members returns the members of the JSON object data, in order and
// duplicates included; data must be one valid JSON object and nothing
// else. The values are slices of data: nothing the size of a value is
// copied.
func Members(data []byte) ([]Member, error) {
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
		return nil, fmt.Errorf("want an object, got %s", Kind(data[i:]))
	}
	var out []Member
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
		out = append(out, Member{key, data[i:end:end]})
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out, nil
}

// CutMember takes the member key out of the JSON object line: rest is the
// object without it, every other member kept as written (duplicates
// included, so that DecodeRequest refuses what it would refuse in line),
// and value is key's value as written. A line without the key is returned
// as it is, with a nil value (as is a key spelled with escapes, which
// DecodeRequest then refuses as unknown). Invalid JSON, or key given twice, is an
// error that wraps core.ErrInvalidRequest.
func CutMember(line []byte, key string) (rest, value []byte, err error) {
	if quoted, _ := json.Marshal(key); !bytes.Contains(line, quoted) {
		return line, nil, nil // the fast path of a line without it
	}
	members, err := Members(line)
	if err != nil {
		return nil, nil, core.NewFieldError("request", "invalid JSON: "+err.Error())
	}
	rest = []byte{'{'}
	for _, m := range members {
		if m.Key == key {
			if value != nil {
				return nil, nil, core.NewFieldError(key, "given twice")
			}
			value = m.Value
			continue
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		mk, _ := json.Marshal(m.Key)
		rest = append(append(append(rest, mk...), ':'), m.Value...)
	}
	if value == nil {
		return line, nil, nil
	}
	return append(rest, '}'), value, nil
}

// CountElements counts the elements of the valid JSON array arr without
// decoding them.
func CountElements(arr []byte) int {
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

// EachNumber calls set with the index and the text of each of the n
// elements of the valid JSON array arr (n from CountElements), which must
// all be numbers; field names the array in errors, which wrap
// core.ErrInvalidRequest and name the element. An error of set says what
// is wrong with the number ("<number> <set's message>"). An empty arr (no
// bytes) has no elements.
func EachNumber(arr []byte, n int, field string, set func(i int, tok []byte) error) error {
	if len(arr) == 0 {
		return nil
	}
	i := skipSpace(arr, 1)
	for k := 0; arr[i] != ']'; k++ {
		if k >= n {
			return core.NewFieldError(field, fmt.Sprintf("has more than the %d elements counted", n))
		}
		end := valueEnd(arr, i)
		tok := arr[i:end]
		if c := tok[0]; c != '-' && (c < '0' || c > '9') {
			return core.NewFieldError(fmt.Sprintf("%s[%d]", field, k), "want a number, got "+Kind(tok))
		}
		if err := set(k, tok); err != nil {
			return core.NewFieldError(fmt.Sprintf("%s[%d]", field, k), Excerpt(tok)+" "+err.Error())
		}
		i = skipSpace(arr, end)
		if arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return nil
}

// Kind names the kind of the JSON value that starts data, for an error
// message: "an object", "an array", "a string", "a boolean", "null", "a
// number", or "nothing".
func Kind(data []byte) string {
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

// Excerpt is a JSON value cut to 40 bytes for an error message.
func Excerpt(v []byte) string { return shorten(v) }

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
		if isDelimiter(data[j]) {
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
