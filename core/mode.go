package core

import (
	"fmt"
	"strings"
)

// ForwardMode is the mode of a forward batch, as sglang's ForwardMode.
// The zero value is not a mode; ParseForwardMode never returns it.
type ForwardMode uint8

// The nine forward modes of sglang, in sglang's order.
const (
	ModeExtend ForwardMode = iota + 1
	ModeDecode
	ModeMixed
	ModeIdle
	ModeTargetVerify
	ModeDraftExtendV2
	ModePrebuilt
	ModeSplitPrefill
	ModeDLLMExtend
)

var modeNames = [...]string{
	ModeExtend:        "EXTEND",
	ModeDecode:        "DECODE",
	ModeMixed:         "MIXED",
	ModeIdle:          "IDLE",
	ModeTargetVerify:  "TARGET_VERIFY",
	ModeDraftExtendV2: "DRAFT_EXTEND_V2",
	ModePrebuilt:      "PREBUILT",
	ModeSplitPrefill:  "SPLIT_PREFILL",
	ModeDLLMExtend:    "DLLM_EXTEND",
}

// ForwardModes returns every forward mode, in sglang's order.
func ForwardModes() []ForwardMode {
	out := make([]ForwardMode, 0, len(modeNames)-1)
	for m := ModeExtend; int(m) < len(modeNames); m++ {
		out = append(out, m)
	}
	return out
}

// String returns the sglang name of m, such as "EXTEND".
func (m ForwardMode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("ForwardMode(%d)", uint8(m))
}

// Valid reports whether m is one of the nine modes.
func (m ForwardMode) Valid() bool { return m >= ModeExtend && int(m) < len(modeNames) }

// ParseForwardMode returns the mode named s (exact, upper case, as sglang
// spells it). The error names the value and the accepted names.
func ParseForwardMode(s string) (ForwardMode, error) {
	for m := ModeExtend; int(m) < len(modeNames); m++ {
		if modeNames[m] == s {
			return m, nil
		}
	}
	return 0, invalidValue(fmt.Sprintf("unknown mode %q (want one of %s)", s, strings.Join(modeNames[1:], ", ")))
}

// IsExtend is sglang's is_extend() called without include_draft_extend_v2:
// EXTEND, MIXED, TARGET_VERIFY, SPLIT_PREFILL and DLLM_EXTEND.
func (m ForwardMode) IsExtend() bool {
	switch m {
	case ModeExtend, ModeMixed, ModeTargetVerify, ModeSplitPrefill, ModeDLLMExtend:
		return true
	}
	return false
}

// IsExtendWithoutSpeculative is sglang's is_extend_without_speculative():
// IsExtend and not TARGET_VERIFY.
func (m ForwardMode) IsExtendWithoutSpeculative() bool {
	return m.IsExtend() && m != ModeTargetVerify
}

// IsDecode is sglang's is_decode(): DECODE only.
func (m ForwardMode) IsDecode() bool { return m == ModeDecode }

// IsTargetVerify is sglang's is_target_verify(): TARGET_VERIFY only.
func (m ForwardMode) IsTargetVerify() bool { return m == ModeTargetVerify }

// IsDraftExtendV2 is sglang's is_draft_extend_v2(): DRAFT_EXTEND_V2 only.
func (m ForwardMode) IsDraftExtendV2() bool { return m == ModeDraftExtendV2 }
