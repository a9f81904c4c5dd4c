package backend

import (
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// Validate refuses a description that cannot be served: no names, a name
// without methods or with an unknown one. A kernel catalog may cover a
// subset of a name's methods (the host runs the others). The error wraps
// core.ErrProtocol.
func Validate(d *core.Description) error {
	if !wire.ValidFamily(d.Name) {
		return fmt.Errorf("%w: plugin name %q: want letters, digits, '_' or '-'", core.ErrProtocol, d.Name)
	}
	if len(d.Handlers) == 0 {
		return fmt.Errorf("%w: plugin serves no names", core.ErrProtocol)
	}
	for _, h := range d.Handlers {
		if h.Name == "" {
			return fmt.Errorf("%w: a handler with an empty name", core.ErrProtocol)
		}
		if len(h.Methods) == 0 {
			return fmt.Errorf("%w: name %q declares no methods", core.ErrProtocol, h.Name)
		}
		for _, m := range h.Methods {
			if !m.Valid() {
				return fmt.Errorf("%w: name %q declares an unknown method %d", core.ErrProtocol, h.Name, int(m))
			}
		}
	}
	return nil
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
