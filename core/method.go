package core

import (
	"fmt"
	"strings"
)

// Method is a forward method of a DeepSeek attention layer, as sglang's
// AttnForwardMethod. The zero value is not a method.
type Method uint8

// The forward methods, in the order of sglang's AttnForwardMethod.
const (
	MHA Method = iota + 1
	MLA
	MHAChunkedKV
	MHAOneShot
	MLAFusedRoPEROCm
	MLAFusedRoPECPU
	MHANPU
	MLANPU
	DSANPU
)

var methodNames = [...]string{
	MHA:              "MHA",
	MLA:              "MLA",
	MHAChunkedKV:     "MHA_CHUNKED_KV",
	MHAOneShot:       "MHA_ONE_SHOT",
	MLAFusedRoPEROCm: "MLA_FUSED_ROPE_ROCM",
	MLAFusedRoPECPU:  "MLA_FUSED_ROPE_CPU",
	MHANPU:           "MHA_NPU",
	MLANPU:           "MLA_NPU",
	DSANPU:           "DSA_NPU",
}

// Methods returns every method, in sglang's order.
func Methods() []Method {
	out := make([]Method, 0, len(methodNames)-1)
	for m := MHA; int(m) < len(methodNames); m++ {
		out = append(out, m)
	}
	return out
}

// String returns the sglang name of m, such as "MHA_ONE_SHOT".
func (m Method) String() string {
	if m.Valid() {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// Valid reports whether m is one of the nine methods.
func (m Method) Valid() bool { return m >= MHA && int(m) < len(methodNames) }

// ParseMethod returns the method named s, as sglang spells it.
func ParseMethod(s string) (Method, error) {
	for m := MHA; int(m) < len(methodNames); m++ {
		if methodNames[m] == s {
			return m, nil
		}
	}
	return 0, invalidValue(fmt.Sprintf("unknown method %q (want one of %s)", s, strings.Join(methodNames[1:], ", ")))
}
