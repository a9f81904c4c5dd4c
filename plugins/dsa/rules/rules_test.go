package rules_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/core"
	rt "github.com/attnplug/attnplug/internal/ruletest"
	"github.com/attnplug/attnplug/plugins/dsa/rules"
	"github.com/hashicorp/go-hclog"
)

func TestDecideDSA(t *testing.T) {
	tests := []rt.Case{
		{Name: "use_mha_one_shot_extend", Req: rt.Req(core.ModeExtend, rt.DSAUseMHA, rt.Fresh), Want: core.MHAOneShot},
		{Name: "use_mha_one_shot_decode", Req: rt.Req(core.ModeDecode, rt.DSAUseMHA), Want: core.MHAOneShot},
		{Name: "use_mha_one_shot_piecewise_graph", Req: rt.Req(core.ModeDecode, rt.DSAUseMHA, rt.Piecewise, rt.Breakable), Want: core.MHAOneShot},
		{Name: "use_mha_one_shot_two_batch_overlap", Req: rt.Req(core.ModeExtend, rt.DSAUseMHA, rt.TBO), Want: core.MHAOneShot},
		{Name: "use_mha_one_shot_over_capacity", Req: rt.Req(core.ModeExtend, rt.DSAUseMHA, rt.Fresh, rt.Capacity(0)), Want: core.MHAOneShot},
		{Name: "no_use_mha_mla_fresh_prefill", Req: rt.Req(core.ModeExtend, rt.Fresh), Want: core.MLA},
		{Name: "no_use_mha_mla_two_batch_overlap", Req: rt.Req(core.ModeExtend, rt.TBO, rt.Fresh), Want: core.MLA},
		{Name: "no_use_mha_mla_hip_fused_decode", Req: rt.Req(core.ModeDecode, rt.HIP, rt.FusedDecode), Want: core.MLA},
		{Name: "no_use_mha_mla_amx", Req: rt.Req(core.ModeDecode, rt.AMXFused), Want: core.MLA},
		{Name: "no_use_mha_mla_use_dsa_layer", Req: rt.Req(core.ModeExtend, rt.UseDSA), Want: core.MLA},
	}
	rt.Check(t, rt.Backend(t, rules.New), tests, rules.DecideDSA, "dsa", "nsa")
}

// TestDecideDSAEveryMode: the per-batch choice decides, whatever the mode or
// graph.
func TestDecideDSAEveryMode(t *testing.T) {
	for _, mode := range core.ForwardModes() {
		for _, graph := range []rt.Opt{func(*core.Request) {}, rt.Piecewise, rt.Breakable} {
			r := rt.Req(mode, graph, rt.DSAUseMHA)
			if got := rules.DecideDSA(&r); got != core.MHAOneShot {
				t.Errorf("%s with dsa_use_mha: got %v, want MHA_ONE_SHOT", mode, got)
			}
			r.Runtime.DSAUseMHA = false
			if got := rules.DecideDSA(&r); got != core.MLA {
				t.Errorf("%s without dsa_use_mha: got %v, want MLA", mode, got)
			}
		}
	}
}

func TestNewDescribes(t *testing.T) {
	d := rt.Describe(t, rt.Backend(t, rules.New), "dsa", rules.Version, "dsa", "nsa")
	dsa, _ := d.Handler("dsa")
	nsa, _ := d.Handler("nsa")
	if dsa.AliasOf != "" || dsa.Deprecated != "" {
		t.Errorf("dsa: got alias %q deprecated %q, want neither", dsa.AliasOf, dsa.Deprecated)
	}
	if nsa.AliasOf != "dsa" || nsa.Deprecated == "" {
		t.Errorf("nsa: got alias %q deprecated %q, want an alias of dsa, deprecated", nsa.AliasOf, nsa.Deprecated)
	}
	for _, h := range []core.HandlerInfo{dsa, nsa} {
		if want := rules.ReadsAt(rules.DefaultDenseKVLenThreshold); !reflect.DeepEqual(h.Reads, want) || !slices.Equal(h.Methods, []core.Method{core.MHAOneShot, core.MLA}) {
			t.Errorf("%s: got reads %+v methods %v, want %+v and [MHA_ONE_SHOT MLA]", h.Name, h.Reads, h.Methods, want)
		}
	}
}

// TestNSALogsDeprecationOnce checks the deprecated alias warns once through
// the plugin's logger, and the current name never.
func TestNSALogsDeprecationOnce(t *testing.T) {
	var buf bytes.Buffer
	b, err := rules.New(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := rt.Context(t)
	for _, name := range []string{"dsa", "nsa", "nsa", "dsa", "nsa"} {
		r := rt.Req(core.ModeDecode)
		r.Backend = name
		if m, err := b.Dispatch(ctx, &r); err != nil || m != core.MLA {
			t.Fatalf("Dispatch(%s): got %v, %v, want MLA, nil", name, m, err)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "deprecated backend name"); n != 1 {
		t.Errorf("warnings: got %d, want 1 in %q", n, out)
	}
	if !strings.Contains(out, "backend=nsa") || !strings.Contains(out, "use=dsa") {
		t.Errorf("warning %q: want backend=nsa and use=dsa", out)
	}
}
