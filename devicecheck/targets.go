package devicecheck

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// A benchmark's targets are data, not code: docs/bench/targets.json lists
// each target the kernels' issues set (what is asked, the rows it covers,
// the metric and the goal) with what the profiles of the kernels say
// limits it, the last word of the people who measured. attnplug bench
// --gpu --targets FILE judges a run against them (Judge), and the tests
// judge the recorded runs of docs/bench with the same file.

// Target is one target of the benchmark, as targets.json gives it.
type Target struct {
	// Text says what is asked, for people.
	Text string `json:"target"`
	// Metric is the JSON field of the rows that is judged:
	// of_copy_bandwidth, of_matmul_peak, tflop_s, us, speedup_vs_torch or
	// speedup_vs_bf16.
	Metric string `json:"metric"`
	// Goal is the value every row must reach: at least it, or with AtMost
	// (times) at most it.
	Goal   float64 `json:"goal"`
	AtMost bool    `json:"at_most,omitempty"`
	// Rows picks the rows the target covers.
	Rows RowSelector `json:"rows"`
	// LimitedBy is what the profiles of the kernels that run its rows say
	// limits them, and where the reports show it.
	LimitedBy string `json:"limited_by,omitempty"`
}

// RowSelector picks rows of a report: those of Table whose fields match
// every selector given.
type RowSelector struct {
	// Table is the report's table: decode, prefill or sparse_fp8.
	Table string `json:"table"`
	// Names are the rows' names; NamePrefix, a prefix of them.
	Names      []string `json:"names,omitempty"`
	NamePrefix string   `json:"name_prefix,omitempty"`
	// Heads and MinBatch bound the rows' heads and batch (0: any).
	Heads    int `json:"heads,omitempty"`
	MinBatch int `json:"min_batch,omitempty"`
	// MinQLen and MaxQLen bound the query tokens of a decode row's
	// requests (0: any): 1 for decode, more for an absorbed-MLA extend.
	MinQLen int `json:"min_q_len,omitempty"`
	MaxQLen int `json:"max_q_len,omitempty"`
}

// Goal is one target judged on one run: every row the target covers
// against its goal, as measured against the same run's floors and torch.
type Goal struct {
	Target string  `json:"target"`
	Metric string  `json:"metric"`
	Goal   float64 `json:"goal"`
	AtMost bool    `json:"at_most,omitempty"`
	// Rows are the rows judged, Min and Max their measured range, and
	// Worst the row farthest from the goal.
	Rows  []string `json:"rows"`
	Min   float64  `json:"min"`
	Max   float64  `json:"max"`
	Worst string   `json:"worst_row,omitempty"`
	// Met is whether every row reached the goal (and none is missing).
	Met bool `json:"met"`
	// ShortBy is how far the worst row is from the goal, as a fraction of
	// the goal: 0.04 is 4% short. 0 when met.
	ShortBy float64 `json:"short_by,omitempty"`
	// Missing are rows the target covers that report no figure: failed,
	// or no torch in the run.
	Missing []string `json:"missing,omitempty"`
	// LimitedBy is, for a target missed, the target's LimitedBy.
	LimitedBy string `json:"limited_by,omitempty"`
}

// tables are the report's tables a target may judge, with the metrics
// their rows have.
var tables = map[string][]string{
	"decode":     {"of_copy_bandwidth", "of_matmul_peak", "us", "speedup_vs_torch"},
	"prefill":    {"of_matmul_peak", "tflop_s", "us", "speedup_vs_torch"},
	"sparse_fp8": {"of_copy_bandwidth", "of_matmul_peak", "tflop_s", "us", "speedup_vs_bf16"},
}

// LoadTargets reads the targets of file (docs/bench/targets.json's form:
// {"targets": [...]}). Every target must name a table and a metric of its
// rows, a positive goal and at least one selector.
func LoadTargets(file string) ([]Target, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		About   string   `json:"about"`
		Targets []Target `json:"targets"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i, t := range doc.Targets {
		metrics, ok := tables[t.Rows.Table]
		switch {
		case t.Text == "":
			return nil, fmt.Errorf("%s: target %d: no text", file, i)
		case !ok:
			return nil, fmt.Errorf("%s: target %q: rows.table %q is not decode, prefill or sparse_fp8", file, t.Text, t.Rows.Table)
		case !slices.Contains(metrics, t.Metric):
			return nil, fmt.Errorf("%s: target %q: metric %q is not one of the %s rows' (%s)", file, t.Text, t.Metric, t.Rows.Table, strings.Join(metrics, ", "))
		case !(t.Goal > 0) || math.IsInf(t.Goal, 0):
			return nil, fmt.Errorf("%s: target %q: goal %v is not a positive number", file, t.Text, t.Goal)
		case t.Rows.MinQLen < 0 || t.Rows.MaxQLen < 0 || (t.Rows.MaxQLen > 0 && t.Rows.MinQLen > t.Rows.MaxQLen):
			return nil, fmt.Errorf("%s: target %q: rows.min_q_len %d and max_q_len %d select no row", file, t.Text, t.Rows.MinQLen, t.Rows.MaxQLen)
		case len(t.Rows.Names) == 0 && t.Rows.NamePrefix == "" && t.Rows.Heads == 0 && t.Rows.MinBatch == 0 && t.Rows.MinQLen == 0:
			return nil, fmt.Errorf("%s: target %q: rows select the whole %s table: name them, or give a prefix, heads, min_batch or min_q_len", file, t.Text, t.Rows.Table)
		}
	}
	return doc.Targets, nil
}

// goalRow is one row's figure under a target's metric; ok is false when
// the row reports none.
type goalRow struct {
	name  string
	value float64
	ok    bool
}

// rowFields is a row as its JSON fields: its name, heads and batch, its
// error, and its figures.
type rowFields struct {
	name               string
	heads, batch, qlen int
	failed             bool
	figures            map[string]float64
}

// rowsOf returns the rows of rep's table.
func rowsOf(rep *Report, table string) []rowFields {
	var out []rowFields
	add := func(name string, heads, batch, qlen int, failed bool, row any) {
		data, _ := json.Marshal(row)
		var m map[string]any
		json.Unmarshal(data, &m)
		f := map[string]float64{}
		for k, v := range m {
			if x, ok := v.(float64); ok {
				f[k] = x
			}
		}
		out = append(out, rowFields{name, heads, batch, qlen, failed, f})
	}
	switch table {
	case "decode":
		for _, r := range rep.Decode {
			add(r.Name, r.Heads, r.Batch, int(max(r.QLen, 1)), r.Error != "", r)
		}
	case "prefill":
		for _, r := range rep.Prefill {
			add(r.Name, r.Heads, 0, 0, r.Error != "", r)
		}
	case "sparse_fp8":
		for _, r := range rep.Quant {
			add(r.Name, r.Heads, r.Batch, 1, r.Error != "", r)
		}
	}
	return out
}

// rows are the rows of rep that t covers, under its metric.
func (t Target) rows(rep *Report) []goalRow {
	s := t.Rows
	var out []goalRow
	for _, r := range rowsOf(rep, s.Table) {
		if (len(s.Names) > 0 && !slices.Contains(s.Names, r.name)) || !strings.HasPrefix(r.name, s.NamePrefix) ||
			(s.Heads > 0 && r.heads != s.Heads) || (s.MinBatch > 0 && r.batch < s.MinBatch) ||
			(s.MinQLen > 0 && r.qlen < s.MinQLen) || (s.MaxQLen > 0 && r.qlen > s.MaxQLen) {
			continue
		}
		v := r.figures[t.Metric]
		out = append(out, goalRow{r.name, v, !r.failed && v > 0})
	}
	return out
}

// Judge judges rep's rows against targets. A target none of whose rows the
// run has (a run of some shapes only) is left out.
func Judge(rep *Report, targets []Target) []Goal {
	var out []Goal
	for _, t := range targets {
		rows := t.rows(rep)
		if len(rows) == 0 {
			continue
		}
		g := Goal{Target: t.Text, Metric: t.Metric, Goal: t.Goal, AtMost: t.AtMost, Met: true, Min: math.Inf(1), Max: math.Inf(-1)}
		// short is a row's shortfall as a fraction of the goal (<= 0: met).
		short := func(v float64) float64 {
			if t.AtMost {
				return v/t.Goal - 1
			}
			return 1 - v/t.Goal
		}
		worst := math.Inf(-1)
		for _, r := range rows {
			g.Rows = append(g.Rows, r.name)
			if !r.ok {
				g.Missing = append(g.Missing, r.name)
				g.Met = false
				continue
			}
			g.Min, g.Max = math.Min(g.Min, r.value), math.Max(g.Max, r.value)
			if s := short(r.value); s > worst {
				worst, g.Worst = s, r.name
			}
		}
		if len(g.Missing) == len(rows) {
			g.Min, g.Max = 0, 0
		}
		if worst > 0 {
			g.Met, g.ShortBy, g.LimitedBy = false, worst, t.LimitedBy
		}
		out = append(out, g)
	}
	return out
}

// writeGoals writes rep's judged targets for people.
func (rep *Report) writeGoals(w io.Writer) {
	if len(rep.Goals) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTargets (every row of each, against this run's floors and torch)\n")
	for _, g := range rep.Goals {
		verdict := "met"
		switch {
		case len(g.Missing) > 0:
			verdict = fmt.Sprintf("not judged: no figure for %s", strings.Join(g.Missing, ", "))
		case !g.Met:
			verdict = fmt.Sprintf("missed by %.0f%% (worst: %s)", 100*g.ShortBy, g.Worst)
		}
		fmt.Fprintf(w, "  %-86s %s .. %s: %s\n", g.Target, formatMetric(g.Metric, g.Min), formatMetric(g.Metric, g.Max), verdict)
		if g.LimitedBy != "" {
			fmt.Fprintf(w, "    limited by %s\n", g.LimitedBy)
		}
	}
}

// formatMetric writes v as its metric reads.
func formatMetric(metric string, v float64) string {
	switch metric {
	case "us":
		return fmt.Sprintf("%.1f us", v)
	case "speedup_vs_torch", "speedup_vs_bf16":
		return fmt.Sprintf("%.2fx", v)
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
