package backend

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// Validate refuses a description that cannot be served: the first of its
// Problems, wrapping core.ErrProtocol. A kernel catalog may cover a subset
// of a name's methods (the host runs the others).
func Validate(d *core.Description) error {
	if p := Problems(d); len(p) > 0 {
		return fmt.Errorf("%w: %s", core.ErrProtocol, p[0])
	}
	return nil
}

// MaxNames bounds the names one plugin may declare (sglang registers a
// dozen, fa3's plugin serves two).
const MaxNames = 256

// ValidName reports whether name may be a backend name a plugin serves:
// lower-case ASCII letters, digits, '_', '-' and '.', starting with a
// letter or a digit, at most core.MaxBackendNameLen bytes, as sglang's
// names are (fa3, cutlass_mla, intel_xpu, trtllm_mla). Nothing else: no
// '/', no other script's look-alike letters, no bidi overrides or other
// formatting characters that could make one name read as another in a
// listing (attnplug plugins).
func ValidName(name string) bool {
	if name == "" || len(name) > core.MaxBackendNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-' || c == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}

// semverRE is a semantic version, with an optional leading v.
var semverRE = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Problems lists every way d is not a description a host can serve, in
// the order of its fields: the one rule of the registry (Validate, on
// every description it loads) and of attnplug conform (the description
// check). The plugin's name is a family name (wire.ValidFamily), its
// version a semantic one, and its vendor holds no control or formatting
// character; it serves at least one name and at most MaxNames; each name
// is valid (ValidName), declared once, with at least one method, each a
// known method declared once; an alias names another name of the plugin;
// the reads are cacheable and their constants within 0..core.MaxLength.
// Names are quoted with %+q, non-ASCII escaped, so that a problem never
// shows a name as the one it mimics. It takes time linear in the
// description's size.
func Problems(d *core.Description) []string {
	var out []string
	problem := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case d.Name == "":
		problem("the plugin has no name")
	case !wire.ValidFamily(d.Name):
		problem("name %q: want letters, digits, '_' or '-', starting with a letter or digit", d.Name)
	}
	if !semverRE.MatchString(d.Version) {
		problem("version %+q is not a semantic version (want MAJOR.MINOR.PATCH)", d.Version)
	}
	if strings.ContainsFunc(d.Vendor, func(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf) }) {
		problem("vendor %+q holds a control or formatting character (a bidi override, say)", d.Vendor)
	}
	switch n := len(d.Handlers); {
	case n == 0:
		problem("the plugin serves no names")
	case n > MaxNames:
		problem("the plugin declares %d names, more than %d", n, MaxNames)
		return out // not checked one by one
	}
	served := map[string]int{}
	for _, h := range d.Handlers {
		served[h.Name]++
	}
	seen := make(map[string]bool, len(d.Handlers))
	for _, h := range d.Handlers {
		switch {
		case h.Name == "":
			problem("a name is empty")
			continue
		case len(h.Name) > core.MaxBackendNameLen:
			problem("name %+q is longer than %d bytes", h.Name[:32]+"...", core.MaxBackendNameLen)
			continue
		case !ValidName(h.Name):
			problem("name %+q: want lower-case ASCII letters, digits, '_', '-' and '.', starting with a letter or a digit (as fa3, cutlass_mla, intel_xpu)", h.Name)
			continue
		}
		if seen[h.Name] {
			problem("name %q is declared twice", h.Name)
		}
		seen[h.Name] = true
		handlerProblems(h, served, problem)
	}
	return out
}

// handlerProblems reports the problems of one name's methods, alias and
// reads; served counts the names of its plugin.
func handlerProblems(h core.HandlerInfo, served map[string]int, problem func(string, ...any)) {
	if len(h.Methods) == 0 {
		problem("%s declares no methods; the host refuses it", h.Name)
	}
	for i, m := range h.Methods {
		if !m.Valid() {
			problem("%s declares %s, not a method", h.Name, m)
		}
		if slices.Contains(h.Methods[:i], m) {
			problem("%s declares %s twice", h.Name, m)
		}
	}
	switch {
	case h.AliasOf == "":
	case h.AliasOf == h.Name:
		problem("%s is declared an alias of itself", h.Name)
	case served[h.AliasOf] == 0:
		problem("%s is an alias of %+q, which the plugin does not serve", h.Name, h.AliasOf)
	}
	if err := h.Reads.Validate(); err != nil {
		problem("%s: the declared reads are not cacheable: %v", h.Name, err)
	}
	for _, v := range append(slices.Clone(h.Reads.PrefixSumAtLeast), h.Reads.SeqSumAtMost...) {
		if v < 0 || v > core.MaxLength {
			problem("%s: constant %d is outside 0..%d", h.Name, v, int64(core.MaxLength))
		}
	}
}

// UnsupportedOn says why none of d's names runs on host; "" when one
// does.
func UnsupportedOn(d *core.Description, host core.HostInfo) string {
	var why []string
	for _, h := range d.Handlers {
		ok, reason := core.SupportsAny(h.Hardware, host)
		if ok {
			return ""
		}
		why = append(why, h.Name+": "+reason)
	}
	return strings.Join(why, "; ")
}
