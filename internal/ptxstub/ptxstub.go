// Package ptxstub writes PTX text whose entry points have the signatures
// of given core.Entry declarations, in the form nvcc and NVRTC emit, with
// bodies that only return: the modules of test plugins and tests, which
// the host's checks (launch.CheckEntries) read but no GPU runs.
package ptxstub

import (
	"fmt"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Image returns PTX for the virtual architecture arch ("compute_90")
// declaring entries, with comment on a line of its own at the top (a
// variant marker, say; empty for none).
func Image(arch, comment string, entries []core.Entry) []byte {
	var sb strings.Builder
	if comment != "" {
		fmt.Fprintf(&sb, "// %s\n", comment)
	}
	fmt.Fprintf(&sb, "//\n// stand-in device code: every entry returns at once\n//\n\n.version 8.0\n.target %s\n.address_size 64\n\n",
		strings.Replace(arch, "compute_", "sm_", 1))
	for _, e := range entries {
		fmt.Fprintf(&sb, "\t// .globl\t%s\n.visible .entry %s(", e.Name, e.Name)
		for i, p := range e.Params {
			sep := ","
			if i == len(e.Params)-1 {
				sep = ""
			}
			if p.Kind == core.ParamTensorMap || p.Kind == core.ParamStruct {
				// By value, as nvcc declares a struct: bytes, aligned.
				fmt.Fprintf(&sb, "\n\t.param .align %d .b8 %s_param_%d[%d]%s", p.Align(), e.Name, i, max(p.Bytes(), 1), sep)
				continue
			}
			fmt.Fprintf(&sb, "\n\t.param %s %s_param_%d%s", Type(p.Kind), e.Name, i, sep)
		}
		if len(e.Params) > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString(")\n{\n\tret;\n\n}\n")
	}
	return []byte(sb.String())
}

// Type is the PTX type nvcc gives a parameter of kind k: .u64 for
// pointers, .u32, .u64 and .f32 for the integers and floats, .b8 for the
// bytes of a struct or a tensor map (Image declares them as an array).
func Type(k core.ParamKind) string {
	switch k {
	case core.ParamPtr, core.ParamI64:
		return ".u64"
	case core.ParamI32:
		return ".u32"
	case core.ParamF32:
		return ".f32"
	}
	return ".b8"
}
