package jsonl

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/attnplug/attnplug/core"
)

// DecodeRequest parses line, one JSON object of the dispatch format, into
// req. Fields absent from the line get the format's defaults; req's length
// slices are reused when they have capacity. The error names the field and
// the value, and wraps core.ErrInvalidRequest.
func DecodeRequest(line []byte, req *core.Request) error {
	return decode(line, req, false)
}

// DecodeRoutedRequest is DecodeRequest for a server that routes requests
// without a backend (attnplug serve with prefill and decode backends): the
// backend may be absent, null or empty, and is then "".
func DecodeRoutedRequest(line []byte, req *core.Request) error {
	return decode(line, req, true)
}

func decode(line []byte, req *core.Request, routed bool) error {
	d := decoder{buf: line, routed: routed}
	prefix, seq := req.Batch.ExtendPrefixLens[:0], req.Batch.SeqLens[:0]
	*req = core.NewRequest("", 0)
	if err := d.request(req, prefix, seq); err != nil {
		return err
	}
	return nil
}

type decoder struct {
	buf    []byte
	pos    int
	routed bool // the backend may be missing
}

// errSyntax reports malformed JSON at the current position.
func (d *decoder) errSyntax(what string) error {
	if d.pos >= len(d.buf) {
		return core.NewFieldError("request", fmt.Sprintf("invalid JSON: unexpected end of line, want %s", what))
	}
	return core.NewFieldError("request", fmt.Sprintf("invalid JSON at byte %d: unexpected %s, want %s", d.pos+1, quoteByte(d.buf[d.pos]), what))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (d *decoder) ws() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\r', '\n':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	d.ws()
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

func (d *decoder) expect(c byte, what string) error {
	if d.peek() != c {
		return d.errSyntax(what)
	}
	d.pos++
	return nil
}

// object calls field for every key of an object; field must consume the
// value.
func (d *decoder) object(path string, field func(key []byte) error) error {
	if err := d.expect('{', "'{'"); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.pos++
		return nil
	}
	for {
		if d.peek() != '"' {
			return d.errSyntax("a field name")
		}
		key, err := d.rawString(path)
		if err != nil {
			return err
		}
		if err := d.expect(':', "':'"); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.errSyntax("',' or '}'")
		}
	}
}

// seen tracks fields already given, to refuse duplicates.
type seen uint32

func (s *seen) mark(bit int, field string) error {
	if *s&(1<<bit) != 0 {
		return core.NewFieldError(field, "given twice")
	}
	*s |= 1 << bit
	return nil
}

func (d *decoder) request(req *core.Request, prefix, seq []int64) error {
	var s seen
	backendNull := false // null reads as absent
	err := d.object("", func(key []byte) error {
		switch string(key) {
		case "backend":
			if err := s.mark(0, "backend"); err != nil {
				return err
			}
			v, null, err := d.str("backend")
			if err != nil {
				return err
			}
			if null {
				backendNull = true
				return nil
			}
			if len(v) > core.MaxBackendNameLen {
				return core.NewFieldError("backend", fmt.Sprintf("name of %d bytes is longer than %d", len(v), core.MaxBackendNameLen))
			}
			req.Backend = v
		case "forward_mode":
			if err := s.mark(1, "forward_mode"); err != nil {
				return err
			}
			v, null, err := d.str("forward_mode")
			if err != nil || null {
				return err
			}
			m, err := core.ParseForwardMode(v)
			if err != nil {
				return core.NewFieldError("forward_mode", err.Error())
			}
			req.Batch.Mode = m
		case "extend_prefix_lens":
			if err := s.mark(2, "extend_prefix_lens"); err != nil {
				return err
			}
			v, err := d.lens("extend_prefix_lens", prefix)
			if err != nil {
				return err
			}
			req.Batch.ExtendPrefixLens = v
		case "seq_lens":
			if err := s.mark(3, "seq_lens"); err != nil {
				return err
			}
			v, err := d.lens("seq_lens", seq)
			if err != nil {
				return err
			}
			req.Batch.SeqLens = v
		case "max_chunk_capacity":
			if err := s.mark(4, "max_chunk_capacity"); err != nil {
				return err
			}
			return d.optInt("max_chunk_capacity", &req.Batch.MaxChunkCapacity)
		case "mla_prefill_cp":
			if err := s.mark(5, "mla_prefill_cp"); err != nil {
				return err
			}
			return d.optBool("mla_prefill_cp", &req.Batch.MLAPrefillCP)
		case "layer":
			if err := s.mark(6, "layer"); err != nil {
				return err
			}
			return d.layer(&req.Layer)
		case "runtime":
			if err := s.mark(7, "runtime"); err != nil {
				return err
			}
			return d.runtime(&req.Runtime)
		default:
			return core.NewFieldError(fieldName("", key), "unknown field")
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.ws()
	if d.pos != len(d.buf) {
		return d.errSyntax("end of line after the request object")
	}
	if (s&1 == 0 || backendNull) && !d.routed {
		return core.NewFieldError("backend", "required field missing")
	}
	if s&2 == 0 || req.Batch.Mode == 0 {
		return core.NewFieldError("forward_mode", "required field missing")
	}
	if req.Backend == "" && !d.routed {
		return core.NewFieldError("backend", "must not be empty")
	}
	return nil
}

func fieldName(path string, key []byte) string {
	q := strconv.Quote(string(key))
	if path == "" {
		return q
	}
	return path + "." + q
}

func (d *decoder) layer(l *core.Layer) error {
	if d.null() {
		return nil
	}
	if d.peek() != '{' {
		return d.wrongType("layer", "an object")
	}
	var s seen
	return d.object("layer", func(key []byte) error {
		var dst *bool
		var bit int
		switch string(key) {
		case "chunked_prefix_cache_threshold":
			if err := s.mark(0, "layer.chunked_prefix_cache_threshold"); err != nil {
				return err
			}
			return d.optInt("layer.chunked_prefix_cache_threshold", &l.ChunkedPrefixCacheThreshold)
		case "disable_chunked_prefix_cache":
			dst, bit = &l.DisableChunkedPrefixCache, 1
		case "flashinfer_mla_disable_ragged":
			dst, bit = &l.FlashinferMLADisableRagged, 2
		case "rocm_fused_decode_mla":
			dst, bit = &l.ROCmFusedDecodeMLA, 3
		case "use_dsa":
			dst, bit = &l.UseDSA, 4
		case "fused_qkv_a_proj_with_mqa":
			dst, bit = &l.FusedQKVAProjWithMQA, 5
		case "intel_amx":
			dst, bit = &l.IntelAMX, 6
		default:
			return core.NewFieldError("layer."+strconv.Quote(string(key)), "unknown field")
		}
		name := "layer." + string(key)
		if err := s.mark(bit, name); err != nil {
			return err
		}
		return d.optBool(name, dst)
	})
}

func (d *decoder) runtime(r *core.Runtime) error {
	if d.null() {
		return nil
	}
	if d.peek() != '{' {
		return d.wrongType("runtime", "an object")
	}
	var s seen
	return d.object("runtime", func(key []byte) error {
		var dst *bool
		var bit int
		switch string(key) {
		case "platform":
			if err := s.mark(0, "runtime.platform"); err != nil {
				return err
			}
			v, null, err := d.str("runtime.platform")
			if err != nil || null {
				return err
			}
			p, err := core.ParsePlatform(v)
			if err == nil && p == core.PlatformUnset {
				err = fmt.Errorf(`unknown platform "" (want one of cuda, hip, npu, xpu, cpu)`)
			}
			if err != nil {
				return core.NewFieldError("runtime.platform", err.Error())
			}
			r.Platform = p
			return nil
		case "piecewise_cuda_graph":
			dst, bit = &r.PiecewiseCUDAGraph, 1
		case "breakable_cuda_graph":
			dst, bit = &r.BreakableCUDAGraph, 2
		case "deterministic_inference":
			dst, bit = &r.DeterministicInference, 3
		case "dsa_use_mha":
			if err := s.mark(4, "runtime.dsa_use_mha"); err != nil {
				return err
			}
			if d.null() {
				return nil // null reads as absent: the dsa backend decides
			}
			r.DSAUseMHASet = true
			return d.optBool("runtime.dsa_use_mha", &r.DSAUseMHA)
		case "compute_capability":
			if err := s.mark(6, "runtime.compute_capability"); err != nil {
				return err
			}
			var v int64 = -1
			if d.null() {
				return nil
			}
			if err := d.optInt("runtime.compute_capability", &v); err != nil {
				return err
			}
			if v < 0 || v > core.MaxComputeCapability {
				return core.NewFieldError("runtime.compute_capability", fmt.Sprintf("%d is out of [0, %d] (want major*10+minor, such as 90)", v, core.MaxComputeCapability))
			}
			r.ComputeCapability = int(v)
			return nil
		case "kv_cache_dtype":
			if err := s.mark(7, "runtime.kv_cache_dtype"); err != nil {
				return err
			}
			v, null, err := d.str("runtime.kv_cache_dtype")
			if err != nil || null {
				return err
			}
			if !slices.Contains(core.KVCacheDTypes(), v) {
				if len(v) > 40 {
					v = v[:37] + "..."
				}
				return core.NewFieldError("runtime.kv_cache_dtype", fmt.Sprintf("unknown dtype %q (want one of %s)", v, strings.Join(core.KVCacheDTypes(), ", ")))
			}
			r.KVCacheDType = v
			return nil
		case "two_batch_overlap":
			dst, bit = &r.TwoBatchOverlap, 5
		default:
			return core.NewFieldError("runtime."+strconv.Quote(string(key)), "unknown field")
		}
		name := "runtime." + string(key)
		if err := s.mark(bit, name); err != nil {
			return err
		}
		return d.optBool(name, dst)
	})
}

// null consumes a null literal if one comes next.
func (d *decoder) null() bool {
	if d.peek() == 'n' && d.pos+4 <= len(d.buf) && string(d.buf[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

// typeName names the JSON type of the value that comes next, for errors.
func (d *decoder) typeName() string {
	switch c := d.peek(); {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n' && d.pos+4 <= len(d.buf) && string(d.buf[d.pos:d.pos+4]) == "null":
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	case c == 0 && d.pos >= len(d.buf):
		return "the end of the line"
	default:
		return quoteByte(c)
	}
}

func (d *decoder) wrongType(field, want string) error {
	return core.NewFieldError(field, fmt.Sprintf("want %s, got %s", want, d.typeName()))
}

func (d *decoder) optBool(field string, dst *bool) error {
	if d.null() {
		return nil
	}
	switch d.peek() {
	case 't':
		if d.pos+4 <= len(d.buf) && string(d.buf[d.pos:d.pos+4]) == "true" {
			d.pos += 4
			*dst = true
			return nil
		}
	case 'f':
		if d.pos+5 <= len(d.buf) && string(d.buf[d.pos:d.pos+5]) == "false" {
			d.pos += 5
			*dst = false
			return nil
		}
	default:
		return d.wrongType(field, "true or false")
	}
	return d.errSyntax("true or false")
}

func (d *decoder) optInt(field string, dst *int64) error {
	if d.null() {
		return nil
	}
	c := d.peek()
	if c != '-' && (c < '0' || c > '9') {
		return d.wrongType(field, "an integer")
	}
	v, err := d.integer(field)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// integer parses a JSON number that must be an integer in int64 range.
// Numbers written with a fraction or exponent are accepted when their value
// is an integer below 2^53 in magnitude (1024.0, 1e3).
func (d *decoder) integer(field string) (int64, error) {
	start := d.pos
	if d.pos < len(d.buf) && d.buf[d.pos] == '-' {
		d.pos++
	}
	digits := d.pos
	for d.pos < len(d.buf) && d.buf[d.pos] >= '0' && d.buf[d.pos] <= '9' {
		d.pos++
	}
	if d.pos == digits {
		end := d.pos
		for end < len(d.buf) && end-start < 40 && !isDelimiter(d.buf[end]) {
			end++
		}
		return 0, core.NewFieldError(field, fmt.Sprintf("want an integer, got %q", d.buf[start:end]))
	}
	if d.buf[digits] == '0' && d.pos-digits > 1 {
		d.pos = digits + 1
		return 0, d.errSyntax("',' after a number (leading zeros are not JSON)")
	}
	integral := true
	if d.pos < len(d.buf) && d.buf[d.pos] == '.' {
		integral = false
		d.pos++
		f := d.pos
		for d.pos < len(d.buf) && d.buf[d.pos] >= '0' && d.buf[d.pos] <= '9' {
			d.pos++
		}
		if d.pos == f {
			return 0, d.errSyntax("a digit after '.'")
		}
	}
	if d.pos < len(d.buf) && (d.buf[d.pos] == 'e' || d.buf[d.pos] == 'E') {
		integral = false
		d.pos++
		if d.pos < len(d.buf) && (d.buf[d.pos] == '+' || d.buf[d.pos] == '-') {
			d.pos++
		}
		e := d.pos
		for d.pos < len(d.buf) && d.buf[d.pos] >= '0' && d.buf[d.pos] <= '9' {
			d.pos++
		}
		if d.pos == e {
			return 0, d.errSyntax("a digit in the exponent")
		}
	}
	text := d.buf[start:d.pos]
	if integral {
		v, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return 0, core.NewFieldError(field, fmt.Sprintf("%s is out of the int64 range", shorten(text)))
		}
		return v, nil
	}
	v, ok, inRange := exactInteger(text)
	switch {
	case !ok:
		return 0, core.NewFieldError(field, fmt.Sprintf("%s is not an integer", shorten(text)))
	case !inRange:
		return 0, core.NewFieldError(field, fmt.Sprintf("%s is out of the int64 range", shorten(text)))
	}
	return v, nil
}

// exactInteger reads a JSON number with a fraction or an exponent exactly:
// ok when its value is an integer (1024.0, 1e3, 1.5e1), and inRange when
// that integer fits an int64. No float rounding: 1e-400 and
// 1.00000000000000001 are not integers.
func exactInteger(text []byte) (v int64, ok, inRange bool) {
	neg := len(text) > 0 && text[0] == '-'
	if neg {
		text = text[1:]
	}
	mant, exp := text, []byte(nil)
	if i := bytes.IndexAny(text, "eE"); i >= 0 {
		mant, exp = text[:i], text[i+1:]
	}
	intPart, frac := mant, []byte(nil)
	if i := bytes.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	digits := append(append([]byte(nil), intPart...), frac...)
	digits = bytes.TrimLeft(digits, "0")
	if len(digits) == 0 {
		return 0, true, true // zero, whatever the exponent
	}
	// The value is digits × 10^shift.
	shift := -len(frac)
	if len(exp) > 0 {
		e, err := strconv.Atoi(string(exp))
		if err != nil { // an exponent past int: far out of range either way
			return 0, exp[0] != '-', false
		}
		shift += e
	}
	trimmed := bytes.TrimRight(digits, "0")
	shift += len(digits) - len(trimmed)
	digits = trimmed
	if shift < 0 {
		return 0, false, false // a nonzero digit after the point
	}
	if len(digits)+shift > 19 {
		return 0, true, false
	}
	s := string(digits) + strings.Repeat("0", shift)
	if neg {
		s = "-" + s
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, true, err == nil
}

func shorten(b []byte) string {
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}

// lens parses an array of lengths, or null (absent: nil). The array is
// refused as soon as it passes core.MaxBatchSize entries.
func (d *decoder) lens(field string, dst []int64) ([]int64, error) {
	if d.null() {
		return nil, nil
	}
	if d.peek() != '[' {
		return nil, d.wrongType(field, "an array of integers")
	}
	d.pos++
	out := dst[:0]
	if out == nil {
		out = []int64{}
	}
	if d.peek() == ']' {
		d.pos++
		return out, nil
	}
	for i := 0; ; i++ {
		if i >= core.MaxBatchSize {
			return nil, core.NewFieldError(field, fmt.Sprintf("has more than %d entries", core.MaxBatchSize))
		}
		c := d.peek()
		if c != '-' && (c < '0' || c > '9') {
			return nil, d.wrongType(field+"["+strconv.Itoa(i)+"]", "an integer")
		}
		v, err := d.integer(field + "[" + strconv.Itoa(i) + "]")
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return out, nil
		default:
			return nil, d.errSyntax("',' or ']'")
		}
	}
}

// str parses a string value or null.
func (d *decoder) str(field string) (s string, null bool, err error) {
	if d.null() {
		return "", true, nil
	}
	if d.peek() != '"' {
		return "", false, d.wrongType(field, "a string")
	}
	b, err := d.rawString(field)
	if err != nil {
		return "", false, err
	}
	return string(b), false, nil
}

// rawString parses a JSON string at d.pos (which is '"'). Without escapes
// it returns a slice of the input.
func (d *decoder) rawString(field string) ([]byte, error) {
	d.pos++
	start := d.pos
	for d.pos < len(d.buf) {
		c := d.buf[d.pos]
		switch {
		case c == '"':
			s := d.buf[start:d.pos]
			d.pos++
			return s, nil
		case c == '\\':
			return d.escapedString(start, field)
		case c < 0x20:
			return nil, d.errSyntax("a string character (control characters must be escaped)")
		case c >= utf8.RuneSelf:
			if !d.utf8Rune() {
				return nil, d.errUTF8(field)
			}
			continue
		}
		d.pos++
	}
	return nil, d.errSyntax("'\"' to end the string")
}

// utf8Rune steps over the UTF-8 encoded rune at d.pos, and reports whether
// it is valid UTF-8.
func (d *decoder) utf8Rune() bool {
	r, size := utf8.DecodeRune(d.buf[d.pos:])
	if r == utf8.RuneError && size == 1 {
		return false
	}
	d.pos += size
	return true
}

// errUTF8 reports bytes that are not UTF-8 inside the string of field.
func (d *decoder) errUTF8(field string) error {
	if field == "" {
		return d.errSyntax("UTF-8 text")
	}
	return core.NewFieldError(field, fmt.Sprintf("invalid UTF-8 at byte %d", d.pos+1))
}

// isDelimiter reports whether c ends a JSON number.
func isDelimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func (d *decoder) escapedString(start int, field string) ([]byte, error) {
	out := append([]byte(nil), d.buf[start:d.pos]...)
	for d.pos < len(d.buf) {
		c := d.buf[d.pos]
		switch {
		case c == '"':
			d.pos++
			return out, nil
		case c < 0x20:
			return nil, d.errSyntax("a string character (control characters must be escaped)")
		case c >= utf8.RuneSelf:
			p := d.pos
			if !d.utf8Rune() {
				return nil, d.errUTF8(field)
			}
			out = append(out, d.buf[p:d.pos]...)
			continue
		case c != '\\':
			out = append(out, c)
			d.pos++
			continue
		}
		d.pos++
		if d.pos >= len(d.buf) {
			break
		}
		e := d.buf[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, d.errSyntax("four hex digits after \\u")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if d.pos+1 < len(d.buf) && d.buf[d.pos] == '\\' && d.buf[d.pos+1] == 'u' {
					next := d.pos
					d.pos += 2
					var ok2 bool
					if r2, ok2 = d.hex4(); !ok2 {
						return nil, d.errSyntax("four hex digits after \\u")
					}
					if utf16.DecodeRune(r, r2) == utf8.RuneError {
						// Not a pair: the second escape stands on its own.
						d.pos = next
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			d.pos--
			return nil, d.errSyntax("an escape character")
		}
	}
	return nil, d.errSyntax("'\"' to end the string")
}

func (d *decoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.buf) {
		return 0, false
	}
	var r rune
	for _, c := range d.buf[d.pos : d.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.pos += 4
	return r, true
}
