package detect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/attnplug/attnplug/core"
)

// Attention kinds of DeepSeek models.
const (
	AttentionMLA = "mla" // DeepSeek-V3/R1: multi-head latent attention
	AttentionDSA = "dsa" // DeepSeek-V3.2: DeepSeek sparse attention
)

// EnvBackend is the environment variable whose value the caller passes in
// SelectOptions.Env.
const EnvBackend = "ATTNPLUG_BACKEND"

// Where a selected backend came from, in precedence order.
const (
	SourceFlag     = "flag"
	SourceEnv      = "env"
	SourceConfig   = "config"
	SourceDefault  = "default"
	SourceFallback = "fallback" // a forced or default backend could not run here
)

// fallbackBackend is what AllowFallback falls to: it runs on every platform.
const fallbackBackend = "triton"

// deepseekHeads is the attention head count of DeepSeek-V3/R1/V3.2.
const deepseekHeads = 128

// Errors returned (wrapped) by Select and LoadConfig.
var (
	// ErrUnknownBackend means a backend name is not one Select knows.
	ErrUnknownBackend = errors.New("unknown attention backend")
	// ErrUnsupportedBackend means a forced backend cannot run on this host.
	ErrUnsupportedBackend = errors.New("attention backend not supported on this hardware")
	// ErrUnknownAttention means an attention kind is neither AttentionMLA
	// nor AttentionDSA.
	ErrUnknownAttention = errors.New("unknown attention kind")
)

// Requirement is the hardware one attention backend needs. Plugin
// descriptions declare the same data. The zero Requirement runs anywhere.
type Requirement struct {
	// Platforms lists the platforms the backend runs on; empty means any.
	Platforms []string `json:"platforms,omitempty"`
	// MinCapability is the lowest CUDA compute capability as major*10+minor
	// (90 for sm90); 0 means no minimum. It applies on cuda only.
	MinCapability int `json:"min_capability,omitempty"`
	// MaxCapability is the highest CUDA compute capability, inclusive (99
	// allows every 9.x); 0 means no maximum. It applies on cuda only.
	MaxCapability int `json:"max_capability,omitempty"`
	// Archs lists the accepted architectures: gfx targets on hip, "smXY"
	// on cuda, CPU architectures ("amd64") on cpu; empty means any.
	Archs []string `json:"archs,omitempty"`
	// NeedsAMX requires usable Intel AMX on the CPU.
	NeedsAMX bool `json:"needs_amx,omitempty"`
}

// Satisfied reports whether the report's platform and usable devices meet
// the requirement, and why not. Every usable device of the platform must
// qualify: the lowest capability is held against MinCapability and the
// highest against MaxCapability.
func (q Requirement) Satisfied(r Report) (bool, string) {
	platform := r.Platform
	if platform == "" {
		platform = choosePlatform(r.Devices)
	}
	if len(q.Platforms) > 0 && !contains(q.Platforms, platform) {
		return false, fmt.Sprintf("needs platform %s, this host serves on %s", strings.Join(q.Platforms, " or "), platform)
	}
	devs := r.usableOn(platform)
	if platform == PlatformCUDA && (q.MinCapability > 0 || q.MaxCapability > 0) {
		if len(devs) == 0 {
			return false, "needs a usable NVIDIA GPU, none found"
		}
		lo, hi := 0, 0
		for _, d := range devs {
			c := d.capability()
			if c == 0 {
				return false, fmt.Sprintf("compute capability of %s unknown", d.PCIAddress)
			}
			if lo == 0 || c < lo {
				lo = c
			}
			if c > hi {
				hi = c
			}
		}
		if q.MinCapability > 0 && lo < q.MinCapability {
			return false, fmt.Sprintf("needs compute capability %s or newer, lowest usable GPU has %s", formatCapability(q.MinCapability), formatCapability(lo))
		}
		if q.MaxCapability > 0 && hi > q.MaxCapability {
			return false, fmt.Sprintf("needs compute capability at most %s, highest usable GPU has %s", maxCapabilityString(q.MaxCapability), formatCapability(hi))
		}
	}
	if len(q.Archs) > 0 {
		if platform == PlatformCPU {
			if !contains(q.Archs, r.CPU.Arch) {
				return false, fmt.Sprintf("needs CPU architecture %s, this CPU is %s", strings.Join(q.Archs, " or "), orUnknown(r.CPU.Arch))
			}
		} else {
			for _, d := range devs {
				if !contains(q.Archs, d.Arch) {
					return false, fmt.Sprintf("needs %s, %s is %s", strings.Join(q.Archs, ", "), d.PCIAddress, orUnknown(d.Arch))
				}
			}
		}
	}
	if q.NeedsAMX && !r.CPU.AMX {
		why := r.CPU.Reason
		if why == "" {
			why = "AMX not usable"
		}
		return false, "needs usable Intel AMX: " + why
	}
	return true, ""
}

// maxCapabilityString shows 99 as "9.x" and 109 as "10.x".
func maxCapabilityString(c int) string {
	if c%10 == 9 {
		return fmt.Sprintf("%d.x", c/10)
	}
	return formatCapability(c)
}

// backendRequirements is the requirement table, built afresh per call.
// See docs/hardware.md for the sglang source of each row.
func backendRequirements() map[string]Requirement {
	cuda := []string{PlatformCUDA}
	return map[string]Requirement{
		"triton":         {},
		"torch_native":   {},
		"flex_attention": {},
		"flashinfer":     {Platforms: cuda, MinCapability: 80},
		"fa3":            {Platforms: cuda, MinCapability: 90, MaxCapability: 99},
		"fa4":            {Platforms: cuda, MinCapability: 100, MaxCapability: 109},
		"flashmla":       {Platforms: cuda, MinCapability: 90, MaxCapability: 109},
		"cutlass_mla":    {Platforms: cuda, MinCapability: 100, MaxCapability: 109},
		"trtllm_mla":     {Platforms: cuda, MinCapability: 100, MaxCapability: 109},
		"tokenspeed_mla": {Platforms: cuda, MinCapability: 100, MaxCapability: 109},
		// sglang sets DSA up for "CUDA or ROCm GPU" (and NPU, where ascend
		// serves it); on CUDA its defaults below sm100 are Hopper's
		// (flashmla_sparse prefill, fa3 decode), so sm90 is the minimum.
		"dsa":       {Platforms: []string{PlatformCUDA, PlatformHIP}, MinCapability: 90},
		"aiter":     {Platforms: []string{PlatformHIP}, Archs: aiterTargets()},
		"wave":      {Platforms: []string{PlatformHIP}},
		"ascend":    {Platforms: []string{PlatformNPU}},
		"intel_xpu": {Platforms: []string{PlatformXPU}},
		"intel_amx": {Platforms: []string{PlatformCPU}, Archs: []string{"amd64"}, NeedsAMX: true},
	}
}

// backendAliases maps deprecated sglang names to current ones.
func backendAliases() map[string]string { return map[string]string{"nsa": "dsa"} }

// Backends returns the attention backend names Select accepts, sorted.
func Backends() []string {
	reqs := backendRequirements()
	out := make([]string, 0, len(reqs))
	for name := range reqs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// knownBackends is Backends and the names of served, sorted.
func knownBackends(served map[string][]core.Hardware) []string {
	out := Backends()
	for name := range served {
		if _, known := backendRequirements()[name]; !known {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// RequirementFor returns the hardware requirement of a backend, accepting
// deprecated aliases ("nsa" for "dsa").
func RequirementFor(backend string) (Requirement, bool) {
	q, ok := backendRequirements()[normalizeBackend(backend)]
	return q, ok
}

// normalizeBackend lower-cases, trims and resolves aliases.
func normalizeBackend(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := backendAliases()[n]; ok {
		return a
	}
	return n
}

// Config is the JSON config file read by LoadConfig.
type Config struct {
	Backend        string `json:"backend,omitempty"`         // both phases
	PrefillBackend string `json:"prefill_backend,omitempty"` // prefill only
	DecodeBackend  string `json:"decode_backend,omitempty"`  // decode only
	TPSize         int    `json:"tp_size,omitempty"`         // tensor-parallel size
}

// LoadConfig reads a JSON config file such as
// {"backend": "fa3", "prefill_backend": "", "decode_backend": "", "tp_size": 8}.
// Unknown keys are an error, so a typo does not pass silently.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("detect: config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("detect: config %s: %w", path, err)
	}
	if c.TPSize < 0 {
		return nil, fmt.Errorf("detect: config %s: tp_size %d is negative", path, c.TPSize)
	}
	return &c, nil
}

// SelectOptions are the user's overrides. Precedence, per phase: flags
// (PrefillBackend/DecodeBackend over Backend) > Env > Config (its
// prefill/decode over its backend) > the detected default.
type SelectOptions struct {
	// Attention is AttentionMLA (default) or AttentionDSA.
	Attention string
	// Backend is the --attention-backend flag, for both phases.
	Backend string
	// PrefillBackend is the --prefill-attention-backend flag.
	PrefillBackend string
	// DecodeBackend is the --decode-attention-backend flag.
	DecodeBackend string
	// Env is the value of ATTNPLUG_BACKEND, for both phases.
	Env string
	// Config is the config file, or nil.
	Config *Config
	// TPSize is the --tp-size flag; 0 takes Config.TPSize, then the
	// report's, then 1.
	TPSize int
	// AllowFallback turns a backend this hardware cannot run into triton
	// plus a warning instead of an error.
	AllowFallback bool
	// Served lists the names the host's plugins serve, with the hardware
	// their descriptions declare (core.HandlerInfo.Hardware), so that a
	// vendor's name (acme_mla) can be selected: a name of sglang's table
	// keeps the table's requirement; any other name in Served is checked
	// against the report as the host checks plugins (core.SupportsAny on
	// Report.HostInfo), and taken exactly as the plugin spells it.
	Served map[string][]core.Hardware
}

// Selection is the backend pair the host will load.
type Selection struct {
	Platform      string `json:"platform"`        // the report's platform
	Attention     string `json:"attention"`       // AttentionMLA or AttentionDSA
	TPSize        int    `json:"tp_size"`         // the tensor-parallel size used
	Prefill       string `json:"prefill_backend"` // backend for prefill (extend)
	Decode        string `json:"decode_backend"`  // backend for decode
	PrefillSource string `json:"prefill_source"`  // SourceFlag, SourceEnv, ...
	DecodeSource  string `json:"decode_source"`   // SourceFlag, SourceEnv, ...
	// Warnings are for the caller to log, e.g. a fallback to triton.
	Warnings []string `json:"warnings,omitempty"`
}

// Hybrid reports whether prefill and decode use different backends.
func (s Selection) Hybrid() bool { return s.Prefill != s.Decode }

// Select picks the prefill and decode backends for a DeepSeek model on
// the reported hardware, applying the overrides in sel. A forced backend
// the hardware cannot run is an error naming the backend, the platform and
// the reason (ErrUnsupportedBackend), unless sel.AllowFallback.
func Select(r *Report, sel SelectOptions) (Selection, error) {
	if r == nil {
		return Selection{}, errors.New("detect: select: nil report")
	}
	att := strings.ToLower(strings.TrimSpace(sel.Attention))
	switch att {
	case "":
		att = AttentionMLA
	case AttentionMLA, AttentionDSA:
	default:
		return Selection{}, fmt.Errorf("detect: select: attention %q: %w (want %q or %q)", sel.Attention, ErrUnknownAttention, AttentionMLA, AttentionDSA)
	}
	tp := sel.TPSize
	if tp == 0 && sel.Config != nil {
		tp = sel.Config.TPSize
	}
	if tp == 0 {
		tp = r.TPSize
	}
	if tp == 0 {
		tp = 1
	}
	if tp < 0 {
		return Selection{}, fmt.Errorf("detect: select: tp size %d is negative", tp)
	}
	rep := *r
	if rep.Platform == "" {
		rep.Platform = choosePlatform(rep.Devices)
	}
	s := Selection{Platform: rep.Platform, Attention: att, TPSize: tp}
	def := defaultBackend(&rep, att, tp)

	var cfg Config
	if sel.Config != nil {
		cfg = *sel.Config
	}
	type layer struct {
		source        string
		phase, common string
	}
	pick := func(layers []layer) (string, string) {
		for _, l := range layers {
			for _, v := range []string{l.phase, l.common} {
				v = strings.TrimSpace(v)
				if _, served := sel.Served[v]; served {
					if _, known := backendRequirements()[v]; !known {
						return v, l.source
					}
				}
				if v != "" {
					return normalizeBackend(v), l.source
				}
			}
		}
		return def, SourceDefault
	}
	var psrc, dsrc string
	s.Prefill, psrc = pick([]layer{{SourceFlag, sel.PrefillBackend, sel.Backend}, {SourceEnv, "", sel.Env}, {SourceConfig, cfg.PrefillBackend, cfg.Backend}})
	s.Decode, dsrc = pick([]layer{{SourceFlag, sel.DecodeBackend, sel.Backend}, {SourceEnv, "", sel.Env}, {SourceConfig, cfg.DecodeBackend, cfg.Backend}})
	s.PrefillSource, s.DecodeSource = psrc, dsrc

	check := func(phase string, name, source *string) error {
		var good bool
		var why string
		q, known := backendRequirements()[*name]
		hw, served := sel.Served[*name]
		switch {
		case known:
			good, why = q.Satisfied(rep)
		case served:
			good, why = core.SupportsAny(hw, rep.HostInfo())
		default:
			return fmt.Errorf("detect: %s backend %q (from %s): %w; known: %s", phase, *name, *source, ErrUnknownBackend, strings.Join(knownBackends(sel.Served), ", "))
		}
		if good && phase == "prefill" && *name == "intel_xpu" {
			good, why = false, "intel_xpu runs decode only for MLA models (sglang rejects it for prefill); use triton for prefill"
		}
		if good {
			return nil
		}
		if *source != SourceDefault && !sel.AllowFallback {
			return fmt.Errorf("detect: %s backend %q (from %s) cannot run on platform %s: %s: %w", phase, *name, *source, rep.Platform, why, ErrUnsupportedBackend)
		}
		s.Warnings = append(s.Warnings, fmt.Sprintf("%s backend %s (from %s) cannot run on platform %s: %s; falling back to %s", phase, *name, *source, rep.Platform, why, fallbackBackend))
		*name, *source = fallbackBackend, SourceFallback
		return nil
	}
	if err := check("prefill", &s.Prefill, &s.PrefillSource); err != nil {
		return Selection{}, err
	}
	if err := check("decode", &s.Decode, &s.DecodeSource); err != nil {
		return Selection{}, err
	}
	return s, nil
}

// defaultBackend is sglang's default attention backend for a DeepSeek
// model on the report's platform; docs/hardware.md cites the source.
func defaultBackend(r *Report, attention string, tp int) string {
	switch r.Platform {
	case PlatformCUDA:
		if attention == AttentionDSA {
			return "dsa"
		}
		lo := 0
		for _, d := range r.usableOn(PlatformCUDA) {
			if c := d.capability(); c > 0 && (lo == 0 || c < lo) {
				lo = c
			}
		}
		switch lo / 10 {
		case 9: // is_hopper_with_cuda_12_3 / is_sm90_supported
			return "fa3"
		case 10: // is_sm100_supported: sm100 and sm103
			return "trtllm_mla"
		}
		return "triton"
	case PlatformHIP:
		if attention == AttentionDSA {
			return "dsa"
		}
		if tp < 1 {
			tp = 1
		}
		// model_config.get_num_kv_heads(tp_size): aiter handles 16 or 128.
		if heads := max(1, deepseekHeads/tp); heads == 16 || heads == 128 {
			return "aiter"
		}
		return "triton"
	case PlatformNPU:
		return "ascend"
	case PlatformXPU:
		if attention == AttentionDSA {
			return "dsa"
		}
		return "triton"
	}
	if r.CPU.AMX && r.CPU.Arch == "amd64" {
		return "intel_amx"
	}
	return "torch_native"
}

// defaults computes Report.DefaultBackend with no overrides: the backend
// Select picks, and sglang's own choice where that differs (sglang's
// default that this hardware cannot run, which Select replaces by triton).
func defaults(r *Report) DefaultBackend {
	var out DefaultBackend
	sg := SGLangDefault{}
	var why []string
	for _, att := range []string{AttentionMLA, AttentionDSA} {
		sglang := defaultBackend(r, att, r.TPSize)
		name := sglang
		if s, err := Select(r, SelectOptions{Attention: att}); err == nil {
			name = s.Prefill
		}
		if name != sglang {
			reason := "attnplug's requirement table refuses it here"
			if q, ok := backendRequirements()[sglang]; ok {
				if good, w := q.Satisfied(*r); !good {
					reason = w
				}
			}
			why = append(why, fmt.Sprintf("%s: sglang picks %s, which cannot run here (%s); attnplug falls back to %s", att, sglang, reason, name))
		}
		if att == AttentionMLA {
			out.MLA, sg.MLA = name, sglang
		} else {
			out.DSA, sg.DSA = name, sglang
		}
	}
	if len(why) > 0 {
		sg.Reason = strings.Join(why, "; ")
		out.SGLangDefault = &sg
	}
	return out
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// orUnknown shows "" as "unknown".
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Forced returns the backends o forces, without the hardware (attnplug
// serve --match-hardware=false), with Select's precedence per phase: the
// phase's flag, Backend, Env, the config file's phase, its backend; triton
// where none is given. Nothing is checked.
func Forced(o SelectOptions) (prefill, decode string) {
	first := func(vals ...string) string {
		for _, v := range vals {
			if v != "" {
				return v
			}
		}
		return fallbackBackend
	}
	var cb, cp, cd string
	if o.Config != nil {
		cb, cp, cd = o.Config.Backend, o.Config.PrefillBackend, o.Config.DecodeBackend
	}
	return first(o.PrefillBackend, o.Backend, o.Env, cp, cb), first(o.DecodeBackend, o.Backend, o.Env, cd, cb)
}
