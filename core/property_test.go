package core_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/ruletest"
	aiter "github.com/attnplug/attnplug/plugins/aiter/rules"
	ascend "github.com/attnplug/attnplug/plugins/ascend/rules"
	dsa "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3 "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinfer "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	xpu "github.com/attnplug/attnplug/plugins/intel_xpu/rules"
)

// allRules is every rule of this module: the triton rules, the shared rules
// as Rules, and every plugin's.
func allRules() []core.Rule {
	rules := []core.Rule{
		core.TritonRule(),
		{Name: "mla_subtype", Decide: core.MLASubtype, Reads: core.Reads{Facts: core.MLASubtypeReads}, Methods: core.MLASubtypeMethods()},
	}
	for _, v := range cprVariants {
		rules = append(rules, core.Rule{Name: "chunked_prefix_" + v.name, Decide: v.rule.Decide, Reads: v.rule.Reads(), Methods: v.rule.Methods()})
	}
	for _, rs := range [][]core.Rule{aiter.Rules(), ascend.Rules(), dsa.Rules(), fa3.Rules(), flashinfer.Rules(), xpu.Rules()} {
		rules = append(rules, rs...)
	}
	return rules
}

// randomRequests returns n valid requests drawn by ruletest.Random from a
// small domain, so that many share a key: the values sit on and around
// every threshold the rules compare against.
func randomRequests(n int, seed uint64) []core.Request {
	return ruletest.Random(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ruletest.Domain{
		Names:       []string{"property"},
		ComputeCaps: []int{0, 80, 90, 90, 100, 103, 109, 110},
		KVDTypes:    []string{"", "auto", "bf16", "fp8_e4m3", "fp16", "fp8_e5m2"},
		Counts:      []int{0, 1, 2},
		PrefixSums:  []int64{0, 1, 100, 8191, 8192, 8193, 10000},
		Extends:     []int64{0, 1, 100, 8192},
		Capacities:  []int64{0, 100, 8192, 8193, 16384, 131072},
		Thresholds:  []int64{0, 1, 100, 8192, 8193},
	}, n)
}

// checkRule reports the first pair of requests with equal keys under the
// rule's Reads and different answers, or an answer outside its Methods.
func checkRule(rule core.Rule, reqs []core.Request) error {
	type seen struct {
		m core.Method
		i int
	}
	byKey := make(map[core.Key]seen)
	for i := range reqs {
		q := &reqs[i]
		m := rule.Decide(q)
		if !slices.Contains(rule.Methods, m) {
			return fmt.Errorf("request %+v: answer %v is not in the declared methods %v", *q, m, rule.Methods)
		}
		k := rule.Reads.Key(q)
		if s, ok := byKey[k]; ok {
			if s.m != m {
				return fmt.Errorf("requests %+v and %+v share key %#x under %v but get %v and %v",
					reqs[s.i], *q, k, rule.Reads.Facts, s.m, m)
			}
			continue
		}
		byKey[k] = seen{m, i}
	}
	return nil
}

// TestRulesReadOnlyWhatTheyDeclare: for every rule, requests with equal
// keys under the declared Reads get equal answers, and every answer is
// declared.
func TestRulesReadOnlyWhatTheyDeclare(t *testing.T) {
	reqs := randomRequests(4000, 1)
	for _, rule := range allRules() {
		t.Run(rule.Name, func(t *testing.T) {
			if !rule.Reads.Cacheable() {
				t.Fatalf("Reads %+v: got not Cacheable, want Cacheable", rule.Reads)
			}
			if err := checkRule(rule, reqs); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRulesDeclareNoUnusedFact checks the declarations are tight: dropping
// any one declared fact lets two requests of one key get different answers.
// It also shows that checkRule can fail.
func TestRulesDeclareNoUnusedFact(t *testing.T) {
	reqs := randomRequests(4000, 2)
	for _, rule := range allRules() {
		for _, f := range factNames {
			if rule.Reads.Facts&f.fact == 0 {
				continue
			}
			t.Run(rule.Name+"/without_"+f.name, func(t *testing.T) {
				// The whole reads, as a host that knows no conditions keys by.
				lying := rule
				lying.Reads.Facts &^= f.fact
				lying.Reads.Conditions = nil
				if err := checkRule(lying, reqs); err == nil {
					t.Errorf("rule %s declared without %s: got no counterexample, want one (is %s read at all?)", rule.Name, f.name, f.name)
				}
			})
		}
		for i, c := range rule.Reads.Conditions {
			for _, f := range factNames {
				if c.Reads.Facts&f.fact == 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s/when_%s_without_%s", rule.Name, c.When, f.name), func(t *testing.T) {
					lying := rule
					lying.Reads.Conditions = slices.Clone(rule.Reads.Conditions)
					lying.Reads.Conditions[i].Reads.Facts &^= f.fact
					if err := checkRule(lying, reqs); err == nil {
						t.Errorf("rule %s's condition %s without %s: got no counterexample, want one", rule.Name, c, f.name)
					}
				})
			}
		}
	}
}

func TestCheckRuleCatchesLies(t *testing.T) {
	reqs := randomRequests(500, 3)
	tests := []struct {
		name string
		rule core.Rule
	}{
		{"reads_undeclared_fact", core.Rule{
			Name: "tbo_reader", Reads: core.Reads{Facts: core.FactMode},
			Decide: func(r *core.Request) core.Method {
				if r.Runtime.TwoBatchOverlap {
					return core.MHA
				}
				return core.MLA
			},
			Methods: []core.Method{core.MHA, core.MLA},
		}},
		{"reads_raw_length", core.Rule{
			Name: "length_reader", Reads: core.Reads{Facts: core.FactPrefixSumZero},
			Decide: func(r *core.Request) core.Method {
				if r.Batch.PrefixSum() > 100 {
					return core.MHA
				}
				return core.MLA
			},
			Methods: []core.Method{core.MHA, core.MLA},
		}},
		{"undeclared_method", core.Rule{
			Name: "fused", Decide: core.MLASubtype, Reads: core.Reads{Facts: core.MLASubtypeReads},
			Methods: []core.Method{core.MLA},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkRule(tt.rule, reqs); err == nil {
				t.Errorf("checkRule: got nil, want a counterexample")
			}
		})
	}
}

// TestKeyWithSumsIsKey checks KeyWithSums, given the batch's sums, is Key.
func TestKeyWithSumsIsKey(t *testing.T) {
	reqs := randomRequests(2000, 4)
	readsList := []core.Reads{
		{Facts: core.AllFacts},
		{Facts: core.FactMode, PrefixSumAtLeast: []int64{1, 8192}, SeqSumAtMost: []int64{100, 131072}},
	}
	for _, rule := range allRules() {
		readsList = append(readsList, rule.Reads)
	}
	for _, reads := range readsList {
		for i := range reqs {
			q := &reqs[i]
			if got, want := reads.KeyWithSums(q, q.Batch.PrefixSum(), q.Batch.SeqSum()), reads.Key(q); got != want {
				t.Fatalf("reads %v, request %+v: KeyWithSums %#x, Key %#x", reads.Facts, *q, got, want)
			}
		}
	}
}
