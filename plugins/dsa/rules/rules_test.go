package rules_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/plugins/dsa/rules"
	"github.com/hashicorp/go-hclog"
)

type opt func(*core.Request)

func mk(mode core.ForwardMode, opts ...opt) core.Request {
	r := core.NewRequest("", mode)
	r.Runtime.Platform = core.PlatformCUDA
	r.Batch.MaxChunkCapacity = 131072
	for _, o := range opts {
		o(&r)
	}
	return r
}

func lens(p, s []int64) opt {
	return func(r *core.Request) { r.Batch.ExtendPrefixLens, r.Batch.SeqLens = p, s }
}

func capacity(c int64) opt { return func(r *core.Request) { r.Batch.MaxChunkCapacity = c } }

var (
	hip           opt = func(r *core.Request) { r.Runtime.Platform = core.PlatformHIP }
	fusedDecode   opt = func(r *core.Request) { r.Layer.ROCmFusedDecodeMLA = true }
	amxFused      opt = func(r *core.Request) { r.Layer.IntelAMX, r.Layer.FusedQKVAProjWithMQA = true, true }
	piecewise     opt = func(r *core.Request) { r.Runtime.PiecewiseCUDAGraph = true }
	breakable     opt = func(r *core.Request) { r.Runtime.BreakableCUDAGraph = true }
	deterministic opt = func(r *core.Request) { r.Runtime.DeterministicInference = true }
	prefillCP     opt = func(r *core.Request) { r.Batch.MLAPrefillCP = true }
	noRagged      opt = func(r *core.Request) { r.Layer.FlashinferMLADisableRagged = true }
	noChunked     opt = func(r *core.Request) { r.Layer.DisableChunkedPrefixCache = true }
	useDSA        opt = func(r *core.Request) { r.Layer.UseDSA = true }
	dsaUseMHA     opt = func(r *core.Request) { r.Runtime.DSAUseMHA = true }
	tbo           opt = func(r *core.Request) { r.Runtime.TwoBatchOverlap = true }
	fresh             = lens([]int64{0, 0}, []int64{1024, 2048})
)

func backend(t *testing.T) core.Backend {
	t.Helper()
	b, err := rules.New(hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type testCase struct {
	name string
	req  core.Request
	want core.Method
}

// check runs every case through decide and through the plugin's backend
// under each of names.
func check(t *testing.T, tests []testCase, decide func(*core.Request) core.Method, names ...string) {
	t.Helper()
	ctx := testContext(t)
	b := backend(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req
			if got := decide(&r); got != tt.want {
				t.Errorf("Decide: got %v, want %v", got, tt.want)
			}
			for _, name := range names {
				r.Backend = name
				if got, err := b.Dispatch(ctx, &r); err != nil || got != tt.want {
					t.Errorf("Dispatch(%s): got %v, %v, want %v, nil", name, got, err, tt.want)
				}
			}
		})
	}
}

// describe returns the plugin's description and checks its name, version,
// handler names and that every handler's Reads are cacheable.
func describe(t *testing.T, wantName string, wantHandlers ...string) *core.Description {
	t.Helper()
	d, err := backend(t).Describe(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != wantName || d.Version != rules.Version {
		t.Errorf("Describe: got %q %q, want %s %s", d.Name, d.Version, wantName, rules.Version)
	}
	var names []string
	for _, h := range d.Handlers {
		names = append(names, h.Name)
		if !h.Reads.Cacheable() {
			t.Errorf("%s: Reads not Cacheable", h.Name)
		}
		if len(h.Methods) == 0 {
			t.Errorf("%s: no methods declared", h.Name)
		}
	}
	if !slices.Equal(names, wantHandlers) {
		t.Errorf("handler names: got %v, want %v", names, wantHandlers)
	}
	return d
}

func TestDecideDSA(t *testing.T) {
	tests := []testCase{
		{"use_mha_one_shot_extend", mk(core.ModeExtend, dsaUseMHA, fresh), core.MHAOneShot},
		{"use_mha_one_shot_decode", mk(core.ModeDecode, dsaUseMHA), core.MHAOneShot},
		{"use_mha_one_shot_piecewise_graph", mk(core.ModeDecode, dsaUseMHA, piecewise, breakable), core.MHAOneShot},
		{"use_mha_one_shot_two_batch_overlap", mk(core.ModeExtend, dsaUseMHA, tbo), core.MHAOneShot},
		{"use_mha_one_shot_over_capacity", mk(core.ModeExtend, dsaUseMHA, fresh, capacity(0)), core.MHAOneShot},
		{"no_use_mha_mla_fresh_prefill", mk(core.ModeExtend, fresh), core.MLA},
		{"no_use_mha_mla_two_batch_overlap", mk(core.ModeExtend, tbo, fresh), core.MLA},
		{"no_use_mha_mla_hip_fused_decode", mk(core.ModeDecode, hip, fusedDecode), core.MLA},
		{"no_use_mha_mla_amx", mk(core.ModeDecode, amxFused), core.MLA},
		{"no_use_mha_mla_use_dsa_layer", mk(core.ModeExtend, useDSA), core.MLA},
	}
	check(t, tests, rules.DecideDSA, "dsa", "nsa")
}

// TestDecideDSAEveryMode: the per-batch choice decides, whatever the mode or
// graph.
func TestDecideDSAEveryMode(t *testing.T) {
	for _, mode := range core.ForwardModes() {
		for _, graph := range []opt{func(*core.Request) {}, piecewise, breakable} {
			r := mk(mode, graph, dsaUseMHA)
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
	d := describe(t, "dsa", "dsa", "nsa")
	dsa, _ := d.Handler("dsa")
	nsa, _ := d.Handler("nsa")
	if dsa.AliasOf != "" || dsa.Deprecated != "" {
		t.Errorf("dsa: got alias %q deprecated %q, want neither", dsa.AliasOf, dsa.Deprecated)
	}
	if nsa.AliasOf != "dsa" || nsa.Deprecated == "" {
		t.Errorf("nsa: got alias %q deprecated %q, want an alias of dsa, deprecated", nsa.AliasOf, nsa.Deprecated)
	}
	for _, h := range []core.HandlerInfo{dsa, nsa} {
		if h.Reads.Facts != core.FactDSAUseMHA || !slices.Equal(h.Methods, []core.Method{core.MHAOneShot, core.MLA}) {
			t.Errorf("%s: got reads %v methods %v, want dsa_use_mha and [MHA_ONE_SHOT MLA]", h.Name, h.Reads.Facts, h.Methods)
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
	ctx := testContext(t)
	for _, name := range []string{"dsa", "nsa", "nsa", "dsa", "nsa"} {
		r := mk(core.ModeDecode)
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
