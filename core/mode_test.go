package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
)

// TestModePredicates checks every predicate of every mode against the table
// of the dispatch format (docs: "Forward modes and the predicates the
// reference calls").
func TestModePredicates(t *testing.T) {
	type preds struct{ extend, extendNoSpec, decode, targetVerify, draftExtendV2 bool }
	tests := []struct {
		mode core.ForwardMode
		want preds
	}{
		{core.ModeExtend, preds{extend: true, extendNoSpec: true}},
		{core.ModeDecode, preds{decode: true}},
		{core.ModeMixed, preds{extend: true, extendNoSpec: true}},
		{core.ModeIdle, preds{}},
		{core.ModeTargetVerify, preds{extend: true, targetVerify: true}},
		{core.ModeDraftExtendV2, preds{draftExtendV2: true}},
		{core.ModePrebuilt, preds{}},
		{core.ModeSplitPrefill, preds{extend: true, extendNoSpec: true}},
		{core.ModeDLLMExtend, preds{extend: true, extendNoSpec: true}},
		{0, preds{}},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			got := preds{
				extend:        tt.mode.IsExtend(),
				extendNoSpec:  tt.mode.IsExtendWithoutSpeculative(),
				decode:        tt.mode.IsDecode(),
				targetVerify:  tt.mode.IsTargetVerify(),
				draftExtendV2: tt.mode.IsDraftExtendV2(),
			}
			if got != tt.want {
				t.Errorf("predicates of %s: got %+v, want %+v", tt.mode, got, tt.want)
			}
		})
	}
}

// TestForwardModesOrder checks the modes, their numbers and names against
// sglang's ForwardMode order, which the protocol's enum numbers share.
func TestForwardModesOrder(t *testing.T) {
	want := []string{"EXTEND", "DECODE", "MIXED", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "PREBUILT", "SPLIT_PREFILL", "DLLM_EXTEND"}
	modes := core.ForwardModes()
	if len(modes) != len(want) {
		t.Fatalf("ForwardModes(): got %d modes, want %d", len(modes), len(want))
	}
	for i, m := range modes {
		if got := m.String(); got != want[i] {
			t.Errorf("ForwardModes()[%d]: got %s, want %s", i, got, want[i])
		}
		if int(m) != i+1 {
			t.Errorf("%s: got number %d, want %d", m, int(m), i+1)
		}
		if !m.Valid() {
			t.Errorf("%s.Valid(): got false, want true", m)
		}
	}
	for _, m := range []core.ForwardMode{0, 10, 255} {
		if m.Valid() {
			t.Errorf("ForwardMode(%d).Valid(): got true, want false", uint8(m))
		}
	}
	if got, want := core.ForwardMode(42).String(), "ForwardMode(42)"; got != want {
		t.Errorf("String of an unknown mode: got %q, want %q", got, want)
	}
}

func TestParseForwardMode(t *testing.T) {
	const names = "EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2, PREBUILT, SPLIT_PREFILL, DLLM_EXTEND"
	for _, m := range core.ForwardModes() {
		t.Run("valid_"+m.String(), func(t *testing.T) {
			got, err := core.ParseForwardMode(m.String())
			if err != nil || got != m {
				t.Errorf("ParseForwardMode(%q): got %v, %v, want %v, nil", m.String(), got, err, m)
			}
		})
	}
	tests := []struct {
		name, in, wantErr string
	}{
		{"unknown_name", "PREFILL", `unknown mode "PREFILL" (want one of ` + names + `)`},
		{"lower_case", "extend", `unknown mode "extend" (want one of ` + names + `)`},
		{"empty", "", `unknown mode "" (want one of ` + names + `)`},
		{"surrounding_space", " EXTEND", `unknown mode " EXTEND" (want one of ` + names + `)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := core.ParseForwardMode(tt.in)
			if err == nil {
				t.Fatalf("ParseForwardMode(%q): got %v, nil, want error %q", tt.in, got, tt.wantErr)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("ParseForwardMode(%q) error: got %q, want %q", tt.in, err, tt.wantErr)
			}
			if !errors.Is(err, core.ErrInvalidRequest) {
				t.Errorf("ParseForwardMode(%q): errors.Is(err, ErrInvalidRequest) = false, want true", tt.in)
			}
			if got != 0 {
				t.Errorf("ParseForwardMode(%q): got mode %v with the error, want 0", tt.in, got)
			}
		})
	}
}

// TestMethodsOrder checks the methods against sglang's AttnForwardMethod,
// an IntEnum of auto() values starting at 1.
func TestMethodsOrder(t *testing.T) {
	want := []string{"MHA", "MLA", "MHA_CHUNKED_KV", "MHA_ONE_SHOT", "MLA_FUSED_ROPE_ROCM", "MLA_FUSED_ROPE_CPU", "MHA_NPU", "MLA_NPU", "DSA_NPU"}
	consts := []core.Method{core.MHA, core.MLA, core.MHAChunkedKV, core.MHAOneShot, core.MLAFusedRoPEROCm, core.MLAFusedRoPECPU, core.MHANPU, core.MLANPU, core.DSANPU}
	ms := core.Methods()
	if len(ms) != len(want) {
		t.Fatalf("Methods(): got %d, want %d", len(ms), len(want))
	}
	for i, m := range ms {
		if m != consts[i] {
			t.Errorf("Methods()[%d]: got %v, want %v", i, m, consts[i])
		}
		if int(m) != i+1 {
			t.Errorf("%s: got number %d, want %d (sglang's auto())", m, int(m), i+1)
		}
		if got := m.String(); got != want[i] {
			t.Errorf("Methods()[%d].String(): got %s, want %s", i, got, want[i])
		}
	}
	for _, m := range []core.Method{0, 10, 255} {
		if m.Valid() {
			t.Errorf("Method(%d).Valid(): got true, want false", uint8(m))
		}
	}
	if got, want := core.Method(42).String(), "Method(42)"; got != want {
		t.Errorf("String of an unknown method: got %q, want %q", got, want)
	}
}

func TestParseMethod(t *testing.T) {
	for _, m := range core.Methods() {
		got, err := core.ParseMethod(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMethod(%q): got %v, %v, want %v, nil", m.String(), got, err, m)
		}
	}
	const want = `unknown method "MLA_FUSED_ROPE" (want one of MHA, MLA, MHA_CHUNKED_KV, MHA_ONE_SHOT, MLA_FUSED_ROPE_ROCM, MLA_FUSED_ROPE_CPU, MHA_NPU, MLA_NPU, DSA_NPU)`
	_, err := core.ParseMethod("MLA_FUSED_ROPE")
	if err == nil || err.Error() != want {
		t.Errorf("ParseMethod(unknown) error: got %v, want %q", err, want)
	}
	if !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("ParseMethod(unknown): errors.Is(err, ErrInvalidRequest) = false, want true")
	}
	if _, err := core.ParseMethod("mha"); err == nil {
		t.Errorf("ParseMethod(%q): got nil error, want one (names are case-sensitive)", "mha")
	}
}

func TestParsePlatform(t *testing.T) {
	tests := []struct {
		in   string
		want core.Platform
	}{
		{"", core.PlatformUnset},
		{"cuda", core.PlatformCUDA},
		{"hip", core.PlatformHIP},
		{"npu", core.PlatformNPU},
		{"xpu", core.PlatformXPU},
		{"cpu", core.PlatformCPU},
	}
	for _, tt := range tests {
		t.Run("valid_"+tt.in, func(t *testing.T) {
			got, err := core.ParsePlatform(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("ParsePlatform(%q): got %v, %v, want %v, nil", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String(): got %q, want %q", got.String(), tt.in)
			}
			if !got.Valid() {
				t.Errorf("%q.Valid(): got false, want true", tt.in)
			}
		})
	}
	for _, in := range []string{"rocm", "CUDA", "gpu"} {
		t.Run("invalid_"+in, func(t *testing.T) {
			_, err := core.ParsePlatform(in)
			want := `unknown platform "` + in + `" (want one of cuda, hip, npu, xpu, cpu)`
			if err == nil || err.Error() != want {
				t.Fatalf("ParsePlatform(%q) error: got %v, want %q", in, err, want)
			}
			if !errors.Is(err, core.ErrInvalidRequest) {
				t.Errorf("errors.Is(err, ErrInvalidRequest) = false, want true")
			}
		})
	}
	if p := core.Platform(6); p.Valid() || !strings.HasPrefix(p.String(), "Platform(") {
		t.Errorf("Platform(6): got Valid %v String %q, want false and Platform(6)", p.Valid(), p.String())
	}
}
