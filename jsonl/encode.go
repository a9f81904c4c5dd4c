package jsonl

import (
	"strconv"
	"unicode/utf8"

	"github.com/attnplug/attnplug/core"
)

// AppendAnswer appends the answer line of a (with its newline) to dst:
// {"method": ..., "handler": ..., "plugin": ...}, plus "fallback" when a
// fell back.
func AppendAnswer(dst []byte, a core.Answer) []byte {
	dst = append(dst, `{"method":"`...)
	dst = append(dst, a.Method.String()...)
	dst = append(dst, `","handler":`...)
	dst = AppendString(dst, a.Handler)
	dst = append(dst, `,"plugin":`...)
	dst = AppendString(dst, a.Plugin)
	if a.Fallback != "" {
		dst = append(dst, `,"fallback":`...)
		dst = AppendString(dst, a.Fallback)
	}
	return append(dst, "}\n"...)
}

// AppendError appends the error line {"error": "line N: msg"} (with its
// newline) to dst.
func AppendError(dst []byte, line int, err error) []byte {
	dst = append(dst, `{"error":`...)
	msg := "line " + strconv.Itoa(line) + ": " + err.Error()
	dst = AppendString(dst, msg)
	return append(dst, "}\n"...)
}

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
