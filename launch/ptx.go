package launch

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// PTXEntry is one kernel entry point of a PTX image, as its .entry
// signature declares it.
type PTXEntry struct {
	// Name is the entry's symbol.
	Name string
	// Params are its parameters, in order.
	Params []PTXParam
}

// PTXParam is one parameter of a PTX entry.
type PTXParam struct {
	// Name is the parameter's name in the image, such as
	// "mla_combine_param_0" (the compiler's, not the source's).
	Name string
	// Type is its PTX type, such as ".u64", ".f32" or ".b8".
	Type string
	// Size is its size in bytes: the type's size, times the element count
	// of an array parameter (a struct passed by value, ".b8 name[16]").
	Size int
	// Pointer reports a ".ptr" attribute (a pointer the compiler knows
	// as one; plain pointers are ".u64" without it).
	Pointer bool
}

// ptxTypeSizes are the sizes of the PTX fundamental types a parameter may
// have.
var ptxTypeSizes = map[string]int{
	".b8": 1, ".u8": 1, ".s8": 1,
	".b16": 2, ".u16": 2, ".s16": 2, ".f16": 2, ".bf16": 2,
	".b32": 4, ".u32": 4, ".s32": 4, ".f32": 4, ".f16x2": 4, ".bf16x2": 4,
	".b64": 8, ".u64": 8, ".s64": 8, ".f64": 8,
	".b128": 16,
}

// ParsePTXEntries returns the kernel entry points of a PTX image (text,
// as nvcc and NVRTC emit it, with or without a terminating NUL), with
// their parameters in order:
//
//	.visible .entry mla_combine(
//		.param .u64 .ptr .align 1 mla_combine_param_0,
//		.param .u32 mla_combine_param_1,
//		.param .align 8 .b8 mla_combine_param_2[16]
//	)
//
// Device functions (.func) are not entries. An entry declared twice (a
// declaration, then its definition) is listed once. The error says where
// the text is not PTX the function can read.
func ParsePTXEntries(image []byte) ([]PTXEntry, error) {
	toks, err := ptxTokens(string(bytes.TrimRight(image, "\x00")))
	if err != nil {
		return nil, err
	}
	var out []PTXEntry
	seen := map[string]int{}
	for i := 0; i < len(toks); i++ {
		if toks[i].text != ".entry" {
			continue
		}
		e, next, err := parseEntry(toks, i+1)
		if err != nil {
			return nil, err
		}
		i = next - 1
		if j, ok := seen[e.Name]; ok {
			if !samePTXParams(out[j].Params, e.Params) {
				return nil, fmt.Errorf("ptx line %d: entry %s declared twice with different parameters", toks[i].line, e.Name)
			}
			continue
		}
		seen[e.Name] = len(out)
		out = append(out, e)
	}
	return out, nil
}

func samePTXParams(a, b []PTXParam) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Size != b[i].Size || a[i].Type != b[i].Type {
			return false
		}
	}
	return true
}

// ptxToken is one token of PTX text and its line.
type ptxToken struct {
	text string
	line int
}

// ptxTokens splits PTX text into tokens: words (directives, types,
// names, numbers) and the punctuation ( ) , [ ] { } ; each on its own,
// comments and string literals dropped.
func ptxTokens(s string) ([]ptxToken, error) {
	var toks []ptxToken
	line := 1
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("ptx line %d: comment not closed", line)
			}
			line += strings.Count(s[i:i+2+end], "\n")
			i += end + 4
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' && s[j] != '\n' {
				j++
			}
			if j >= len(s) || s[j] != '"' {
				return nil, fmt.Errorf("ptx line %d: string not closed", line)
			}
			i = j + 1
		case strings.IndexByte("(),[]{};", c) >= 0:
			toks = append(toks, ptxToken{string(c), line})
			i++
		case c == 0:
			return nil, fmt.Errorf("ptx line %d: a NUL byte inside the text (binary data is not PTX)", line)
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\r\n\f\v(),[]{};\"\x00", s[j]) < 0 && !strings.HasPrefix(s[j:], "//") && !strings.HasPrefix(s[j:], "/*") {
				j++
			}
			toks = append(toks, ptxToken{s[i:j], line})
			i = j
		}
	}
	return toks, nil
}

// parseEntry reads an entry's name and parameter list from toks[i:] (just
// after ".entry") and returns the index of the token after the list.
func parseEntry(toks []ptxToken, i int) (PTXEntry, int, error) {
	if i >= len(toks) || !isPTXName(toks[i].text) {
		return PTXEntry{}, 0, fmt.Errorf("ptx line %d: .entry without a name", lineOf(toks, i))
	}
	e := PTXEntry{Name: toks[i].text}
	i++
	if i >= len(toks) || toks[i].text != "(" {
		return e, i, nil // no parameter list: no parameters
	}
	i++
	if i < len(toks) && toks[i].text == ")" {
		return e, i + 1, nil
	}
	for {
		p, next, err := parseParam(toks, i, e.Name, len(e.Params))
		if err != nil {
			return e, 0, err
		}
		e.Params = append(e.Params, p)
		i = next
		if i >= len(toks) {
			return e, 0, fmt.Errorf("ptx: entry %s: parameter list not closed", e.Name)
		}
		switch toks[i].text {
		case ",":
			i++
		case ")":
			return e, i + 1, nil
		default:
			return e, 0, fmt.Errorf("ptx line %d: entry %s: %q after parameter %d, want , or )", toks[i].line, e.Name, toks[i].text, len(e.Params)-1)
		}
	}
}

// parseParam reads one parameter, ".param" then its state space
// attributes, type and name, with an optional element count.
func parseParam(toks []ptxToken, i int, entry string, index int) (PTXParam, int, error) {
	bad := func(format string, args ...any) (PTXParam, int, error) {
		return PTXParam{}, 0, fmt.Errorf("ptx line %d: entry %s: parameter %d: %s", lineOf(toks, i), entry, index, fmt.Sprintf(format, args...))
	}
	if i >= len(toks) {
		return PTXParam{}, 0, fmt.Errorf("ptx: entry %s: parameter list not closed", entry)
	}
	if toks[i].text != ".param" {
		return bad("want .param, not %q", toks[i].text)
	}
	i++
	var p PTXParam
	for ; i < len(toks); i++ {
		t := toks[i].text
		if size, ok := ptxTypeSizes[t]; ok && p.Type == "" {
			p.Type, p.Size = t, size
			continue
		}
		switch t {
		case ".ptr":
			p.Pointer = true
			continue
		case ".align":
			if i+1 >= len(toks) {
				return bad(".align without a value")
			}
			if _, err := strconv.Atoi(toks[i+1].text); err != nil {
				return bad(".align %q", toks[i+1].text)
			}
			i++
			continue
		case ".global", ".const", ".shared", ".local", ".param":
			continue // the state space a .ptr points to
		}
		if !strings.HasPrefix(t, ".") && isPTXName(t) {
			break
		}
		return bad("unexpected %q", t)
	}
	if p.Type == "" {
		return bad("no type")
	}
	if i >= len(toks) {
		return bad("no name")
	}
	p.Name = toks[i].text
	i++
	if i < len(toks) && toks[i].text == "[" {
		if i+2 >= len(toks) || toks[i+2].text != "]" {
			return bad("array size not closed")
		}
		n, err := strconv.Atoi(toks[i+1].text)
		if err != nil || n < 1 || n > 1<<16 {
			return bad("array size %q", toks[i+1].text)
		}
		p.Size *= n
		i += 3
	}
	return p, i, nil
}

func lineOf(toks []ptxToken, i int) int {
	if i < len(toks) {
		return toks[i].line
	}
	if len(toks) > 0 {
		return toks[len(toks)-1].line
	}
	return 1
}

// isPTXName reports whether s is a PTX identifier: a letter, _ or $
// first (or % for the compiler's own names), then letters, digits, _ and $.
func isPTXName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
		if !letter && !(i > 0 && c >= '0' && c <= '9') && !(i == 0 && c == '%') {
			return false
		}
	}
	return true
}

// CheckEntries compares the entry points a module declares (Entries, whose
// Params the host binds by name and passes in order) with the signatures
// in its image: every declared entry must be in the image, with as many
// parameters, each of the size of its kind (core.ParamKind.Size: ptr and
// i64 8 bytes, i32 and f32 4) and in the same order; a parameter that is
// a float in the image must be declared f32, and one declared f32 must not
// be an integer there. The error names the entry, the parameter's index
// and both sizes.
//
// It reads PTX images only (Format core.FormatPTX). A cubin is machine
// code in an ELF file and is not parsed: CheckEntries returns nil for it,
// as for the formats of other platforms. Two parameters of the same size
// swapped (two pointers) look the same in the image, whose parameter names
// are the compiler's (NAME_param_0, ...): only running the kernel tells
// them apart.
func CheckEntries(mod core.KernelModule) error {
	if mod.Format != core.FormatPTX {
		return nil
	}
	img, err := ParsePTXEntries(mod.Image)
	if err != nil {
		return fmt.Errorf("kernel module %q: %w", mod.Name, err)
	}
	byName := make(map[string]PTXEntry, len(img))
	names := make([]string, len(img))
	for i, e := range img {
		byName[e.Name] = e
		names[i] = e.Name
	}
	for _, e := range mod.Entries {
		got, ok := byName[e.Name]
		if !ok {
			have := "none"
			if len(names) > 0 {
				have = strings.Join(names, ", ")
			}
			return fmt.Errorf("kernel module %q: entry %s is not in the PTX image (its entries: %s)", mod.Name, e.Name, have)
		}
		if err := compareParams(e, got); err != nil {
			return fmt.Errorf("kernel module %q: entry %s: %w", mod.Name, e.Name, err)
		}
	}
	return nil
}

// compareParams compares the declared parameters of e with the image's.
func compareParams(e core.Entry, got PTXEntry) error {
	count := ""
	if len(e.Params) != len(got.Params) {
		count = fmt.Sprintf(" (Entries declares %d parameters, the image's signature has %d)", len(e.Params), len(got.Params))
	}
	for i := range min(len(e.Params), len(got.Params)) {
		d, g := e.Params[i], got.Params[i]
		size := d.Bytes()
		switch {
		case size != g.Size:
			return fmt.Errorf("parameter %d (%q, %s) is %d bytes as declared, %d bytes in the image (%s %s)%s",
				i, d.Name, d.Kind, size, g.Size, g.Type, g.Name, count)
		case g.Type == ".f32" && d.Kind != core.ParamF32, g.Type == ".f64":
			return fmt.Errorf("parameter %d (%q, %s) is a float in the image (%s %s)%s", i, d.Name, d.Kind, g.Type, g.Name, count)
		case d.Kind == core.ParamF32 && g.Type != ".f32" && g.Type != ".b32":
			return fmt.Errorf("parameter %d (%q, f32) is an integer in the image (%s %s)%s", i, d.Name, g.Type, g.Name, count)
		}
	}
	switch {
	case len(got.Params) > len(e.Params):
		g := got.Params[len(e.Params)]
		return fmt.Errorf("parameter %d (%d bytes in the image, %s %s) is not declared%s", len(e.Params), g.Size, g.Type, g.Name, count)
	case len(e.Params) > len(got.Params):
		d := e.Params[len(got.Params)]
		return fmt.Errorf("parameter %d (%q, %s, %d bytes as declared) is not in the image%s", len(got.Params), d.Name, d.Kind, d.Bytes(), count)
	}
	return nil
}
