package core_test

import (
	"errors"
	"testing"

	"github.com/attnplug/attnplug/core"
)

func TestHardwareSupports(t *testing.T) {
	cuda := core.HostInfo{Platform: core.PlatformCUDA, ComputeCapability: 90}
	tests := []struct {
		name    string
		hw      core.Hardware
		info    core.HostInfo
		want    bool
		wantWhy string
	}{
		{"zero_runs_anywhere", core.Hardware{}, core.HostInfo{}, true, ""},
		{"platform_listed", core.Hardware{Platforms: []core.Platform{core.PlatformHIP, core.PlatformCUDA}}, cuda, true, ""},
		{"platform_not_listed", core.Hardware{Platforms: []core.Platform{core.PlatformCUDA, core.PlatformHIP}}, core.HostInfo{Platform: core.PlatformNPU},
			false, "needs platform cuda or hip, host is npu"},
		{"min_capability_equal", core.Hardware{MinCapability: 90}, cuda, true, ""},
		{"min_capability_below", core.Hardware{MinCapability: 100}, cuda, false, "needs compute capability >= 10.0, host has 9.0"},
		{"min_capability_no_gpu", core.Hardware{MinCapability: 80}, core.HostInfo{}, false, "needs compute capability >= 8.0, host has none"},
		{"max_capability_equal", core.Hardware{MaxCapability: 90}, cuda, true, ""},
		{"max_capability_above", core.Hardware{MinCapability: 80, MaxCapability: 89}, cuda, false, "needs compute capability <= 8.9, host has 9.0"},
		{"arch_listed", core.Hardware{Archs: []string{"gfx90a", "gfx942"}}, core.HostInfo{Archs: []string{"gfx1100", "gfx942"}}, true, ""},
		{"arch_not_listed", core.Hardware{Archs: []string{"gfx942"}}, core.HostInfo{Archs: []string{"gfx1100"}}, false, "needs a device of arch gfx942, host has gfx1100"},
		{"amx_present", core.Hardware{NeedsAMX: true}, core.HostInfo{AMX: true}, true, ""},
		{"amx_missing", core.Hardware{NeedsAMX: true}, core.HostInfo{Platform: core.PlatformCPU}, false, "needs a CPU with usable Intel AMX"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.hw.Supports(tt.info)
			if got != tt.want || why != tt.wantWhy {
				t.Errorf("Supports: got %v %q, want %v %q", got, why, tt.want, tt.wantWhy)
			}
		})
	}
}

func TestSupportsAny(t *testing.T) {
	npu := core.HostInfo{Platform: core.PlatformNPU}
	cudaOnly := core.Hardware{Platforms: []core.Platform{core.PlatformCUDA}}
	npuOnly := core.Hardware{Platforms: []core.Platform{core.PlatformNPU}}
	if ok, why := core.SupportsAny(nil, npu); !ok || why != "" {
		t.Errorf("empty list: got %v %q, want true", ok, why)
	}
	if ok, _ := core.SupportsAny([]core.Hardware{cudaOnly, npuOnly}, npu); !ok {
		t.Errorf("second entry matches: got false, want true")
	}
	xpuOnly := core.Hardware{Platforms: []core.Platform{core.PlatformXPU}}
	if ok, why := core.SupportsAny([]core.Hardware{cudaOnly, xpuOnly}, npu); ok || why != "needs platform cuda, host is npu" {
		t.Errorf("no entry matches: got %v %q, want false and the first entry's reason", ok, why)
	}
}

func TestRuleBackendConfigure(t *testing.T) {
	ctx := testContext(t)
	rule := func(name string, hw ...core.Hardware) core.Rule {
		r := constRule(name, core.MLA)
		r.Hardware = hw
		return r
	}
	cudaOnly := core.Hardware{Platforms: []core.Platform{core.PlatformCUDA}}
	npu := core.HostInfo{Platform: core.PlatformNPU}
	tests := []struct {
		name    string
		rules   []core.Rule
		wantErr string
	}{
		{"no_hardware_runs_anywhere", []core.Rule{rule("a")}, ""},
		{"one_name_runs", []core.Rule{rule("a", cudaOnly), rule("b")}, ""},
		{"no_name_runs", []core.Rule{rule("a", cudaOnly), rule("b", core.Hardware{NeedsAMX: true})},
			"refused: fam cannot run on this host (a: needs platform cuda, host is npu; b: needs a CPU with usable Intel AMX)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := core.NewRuleBackend("fam", "1.0.0", nil, tt.rules...)
			if err != nil {
				t.Fatal(err)
			}
			var c core.Configurer = b
			err = c.Configure(ctx, npu)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Configure: got %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, core.ErrRefused) {
				t.Errorf("Configure: got %v, want ErrRefused %q", err, tt.wantErr)
			}
		})
	}
	// The description carries the hardware.
	b, _ := core.NewRuleBackend("fam", "1.0.0", nil, rule("a", cudaOnly))
	d, _ := b.Describe(ctx)
	if len(d.Handlers[0].Hardware) != 1 || d.Handlers[0].Hardware[0].Platforms[0] != core.PlatformCUDA {
		t.Errorf("Describe: got hardware %+v, want [cuda]", d.Handlers[0].Hardware)
	}
}
