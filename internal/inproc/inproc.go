package inproc

import (
	"github.com/attnplug/attnplug/core"
	aiter "github.com/attnplug/attnplug/plugins/aiter/rules"
	ascend "github.com/attnplug/attnplug/plugins/ascend/rules"
	dsa "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3 "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinfer "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	intelxpu "github.com/attnplug/attnplug/plugins/intel_xpu/rules"
)

// Rules returns every plugin's rules and the triton rules, by name.
func Rules() map[string]core.Rule {
	rules := map[string]core.Rule{}
	for _, set := range [][]core.Rule{fa3.Rules(), flashinfer.Rules(), aiter.Rules(), ascend.Rules(), dsa.Rules(), intelxpu.Rules(), {core.TritonRule()}} {
		for _, r := range set {
			rules[r.Name] = r
		}
	}
	return rules
}

// Decider decides requests by the linked rules, with the triton rules for
// names none serves, as sglang's registry does.
type Decider struct{ rules map[string]core.Rule }

// NewDecider returns a Decider over Rules.
func NewDecider() *Decider { return &Decider{rules: Rules()} }

// Decide returns the method for req and the name whose rules decided.
func (d *Decider) Decide(req *core.Request) (core.Method, string) {
	if r, ok := d.rules[req.Backend]; ok {
		return r.Decide(req), r.Name
	}
	return core.TritonDecide(req), core.TritonName
}
