package devicecheck

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// targetsFile is the targets of the benchmark, as the repository keeps them.
const targetsFile = "../docs/bench/targets.json"

func loadTargets(t *testing.T) []Target {
	t.Helper()
	ts, err := LoadTargets(targetsFile)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func goalOf(t *testing.T, goals []Goal, prefix string) Goal {
	t.Helper()
	for _, g := range goals {
		if strings.HasPrefix(g.Target, prefix) {
			return g
		}
	}
	t.Fatalf("no target %q among %d", prefix, len(goals))
	return Goal{}
}

// TestJudge judges a made-up run against the repository's targets: a
// target is met only when every row it covers reaches the goal, its
// shortfall is the worst row's, a ceiling (times) is judged the other way
// round, a row without a figure leaves the target unmet and named, and a
// target without rows in the run is left out.
func TestJudge(t *testing.T) {
	rep := &Report{
		Decode: []BenchResult{
			{Name: "h16_b1_s4096", Heads: 16, Batch: 1, US: 9.7, OfCopy: 0.12},
			{Name: "h16_b16_s4096", Heads: 16, Batch: 16, OfCopy: 0.58},
			{Name: "h16_b64_s4096", Heads: 16, Batch: 64, OfCopy: 0.90},
			{Name: "h128_b1_s4096", Heads: 128, Batch: 1, US: 11.5},
			{Name: "h128_b64_s4096", Heads: 128, Batch: 64, OfMatmul: 0.85},
			{Name: "h128_b128_s4096", Heads: 128, Batch: 128, Error: "check failed"},
			// Extends: judged by their own target, not the decode ones'.
			{Name: "h16_extend_b16_q130", Heads: 16, Batch: 16, QLen: 130, OfCopy: 0.10, VsTorch: 3.6},
			{Name: "h128_extend_b1_q2048", Heads: 128, Batch: 1, QLen: 2048, OfMatmul: 0.52, VsTorch: 1.4},
		},
		Prefill: []PrefillResult{
			{Name: "h128_prefill_4k", VsTorch: 0.96},
			{Name: "h128_prefill_8k", VsTorch: 1.03},
			{Name: "h128_prefill_16k", VsTorch: 1.05},
			{Name: "h16_prefill_1k"}, // torch did not run
		},
	}
	goals := Judge(rep, loadTargets(t))
	if len(goals) != 7 {
		t.Fatalf("%d targets judged, want the 7 with rows: %+v", len(goals), goals)
	}
	if g := goalOf(t, goals, "absorbed-MLA extend"); g.Met || g.Worst != "h128_extend_b1_q2048" || len(g.Rows) != 2 ||
		math.Abs(g.ShortBy-(1-1.4/1.5)) > 1e-12 {
		t.Errorf("extend: %+v", g)
	}
	g := goalOf(t, goals, "MLA decode, 16 heads")
	if g.Met || g.Worst != "h16_b16_s4096" || math.Abs(g.ShortBy-(1-0.58/0.85)) > 1e-12 || g.Min != 0.58 || g.Max != 0.90 || len(g.Rows) != 2 {
		t.Errorf("16-head decode: %+v", g)
	}
	if g := goalOf(t, goals, "MLA decode, batch 1, 4096 cached, 16 heads"); g.Met || math.Abs(g.ShortBy-(9.7/7-1)) > 1e-12 {
		t.Errorf("16-head batch 1 (at most 7 us): %+v", g)
	}
	if g := goalOf(t, goals, "MLA decode, batch 1, 4096 cached, 128 heads"); !g.Met || g.ShortBy != 0 {
		t.Errorf("128-head batch 1 at 11.5 us of 12: %+v", g)
	}
	if g := goalOf(t, goals, "MLA decode, 128 heads"); g.Met || len(g.Missing) != 1 || g.Missing[0] != "h128_b128_s4096" || g.Min != 0.85 {
		t.Errorf("128-head decode with a failed row: %+v", g)
	}
	if g := goalOf(t, goals, "prefill, 128 heads"); g.Met || g.Worst != "h128_prefill_4k" || math.Abs(g.ShortBy-0.04) > 1e-12 {
		t.Errorf("128-head prefill: %+v", g)
	}
	if g := goalOf(t, goals, "prefill, 16 heads"); g.Met || len(g.Missing) != 1 || g.Min != 0 || g.Max != 0 {
		t.Errorf("16-head prefill without torch: %+v", g)
	}
	// A target missed says what limits it; one met or not judged does not.
	for _, g := range goals {
		if missed := !g.Met && len(g.Missing) == 0; missed != (g.LimitedBy != "") {
			t.Errorf("%s: met %v, missing %v, limited by %q", g.Target, g.Met, g.Missing, g.LimitedBy)
		}
	}
	rep.Goals = goals
	var b bytes.Buffer
	rep.writeGoals(&b)
	for _, want := range []string{"missed by 32% (worst: h16_b16_s4096)", "11.5 us .. 11.5 us: met", "not judged: no figure for h16_prefill_1k",
		"    limited by a layer's fixed cost"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestJudgeRecordedRun judges the committed report of a whole run on an
// H200 (docs/bench) against the repository's targets: every target is
// judged, and each verdict agrees with its rows as the report records
// them.
func TestJudgeRecordedRun(t *testing.T) {
	targets := loadTargets(t)
	data, err := os.ReadFile("../docs/bench/h200-2026-12-04-combine.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	goals := Judge(&rep, targets)
	judged := map[string]bool{}
	for _, g := range goals {
		judged[g.Target] = true
	}
	for _, tg := range targets {
		// (The extend rows came after that run.)
		if !judged[tg.Text] && tg.Rows.MinQLen == 0 {
			t.Errorf("%s: not judged on a whole run", tg.Text)
		}
	}
	for _, g := range goals {
		if len(g.Missing) > 0 || len(g.Rows) == 0 {
			t.Errorf("%s: rows %v, missing %v", g.Target, g.Rows, g.Missing)
		}
		if g.Met == (g.LimitedBy != "") {
			t.Errorf("%s: met %v, limited by %q", g.Target, g.Met, g.LimitedBy)
		}
		met := g.Min >= g.Goal
		if g.AtMost {
			met = g.Max <= g.Goal
		}
		if met != g.Met || (g.Met != (g.ShortBy == 0)) {
			t.Errorf("%s: range %v..%v against %v, met %v, short by %v", g.Target, g.Min, g.Max, g.Goal, g.Met, g.ShortBy)
		}
	}
	// That run's sparse prefill was at 364-375 TFLOP/s (48-50% of the
	// matmul peak), and its 128-head prefill at 0.46-0.53x torch.
	if g := goalOf(t, goals, "sparse prefill"); g.Met || g.Min < 364 || g.Max > 376 {
		t.Errorf("sparse prefill: %+v", g)
	}
	if g := goalOf(t, goals, "prefill, 128 heads"); g.Met || g.ShortBy < 0.4 {
		t.Errorf("128-head prefill of the mma.sync kernel: %+v", g)
	}
}

// TestTargetsFileIsChecked: LoadTargets refuses a file with a target it
// cannot judge, naming the target and the field.
func TestTargetsFileIsChecked(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"targets":[{"target":"x","metric":"us","goal":1,"rows":{"table":"nope","heads":1}}]}`, `rows.table "nope"`},
		{`{"targets":[{"target":"x","metric":"tb_s","goal":1,"rows":{"table":"decode","heads":1}}]}`, `metric "tb_s"`},
		{`{"targets":[{"target":"x","metric":"us","goal":0,"rows":{"table":"decode","heads":1}}]}`, `goal 0`},
		{`{"targets":[{"target":"x","metric":"us","goal":1,"rows":{"table":"decode"}}]}`, `whole decode table`},
		{`{"targets":[{"target":"x","metric":"us","goal":1,"rows":{"table":"decode","min_q_len":4,"max_q_len":2}}]}`, `min_q_len 4 and max_q_len 2`},
		{`{"targets":[{"target":"x","metric":"us","goal":1,"rows":{"table":"decode","heads":1},"extra":1}]}`, `unknown field "extra"`},
	} {
		f := filepath.Join(t.TempDir(), "targets.json")
		if err := os.WriteFile(f, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTargets(f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.body, err, tc.want)
		}
	}
}
