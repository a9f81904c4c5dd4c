package inproc

import (
	"fmt"

	"github.com/attnplug/attnplug/core"
	aiter "github.com/attnplug/attnplug/plugins/aiter/rules"
	ascend "github.com/attnplug/attnplug/plugins/ascend/rules"
	dsa "github.com/attnplug/attnplug/plugins/dsa/rules"
	fa3 "github.com/attnplug/attnplug/plugins/fa3/rules"
	flashinfer "github.com/attnplug/attnplug/plugins/flashinfer/rules"
	intelxpu "github.com/attnplug/attnplug/plugins/intel_xpu/rules"
	"github.com/hashicorp/go-hclog"
)

// Backends builds every plugin's backend with the plugin's own factory,
// in this process: what a Go host registers as in-process backends
// (registry.Config.Backends) to serve every name without a plugin binary.
func Backends(logger hclog.Logger) ([]core.Backend, error) {
	var out []core.Backend
	for _, f := range []func(hclog.Logger) (core.Backend, error){fa3.New, flashinfer.New, aiter.New, ascend.New, dsa.New, intelxpu.New} {
		b, err := f(logger)
		if err != nil {
			return nil, fmt.Errorf("in-process backend: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// Rules returns every plugin's rules and the triton rules, by name: the
// rules themselves, called as sglang calls its handlers, for benchmarks
// that compare the cost of a dispatch with the cost of the rules.
func Rules() map[string]core.Rule {
	rules := map[string]core.Rule{}
	for _, set := range [][]core.Rule{fa3.Rules(), flashinfer.Rules(), aiter.Rules(), ascend.Rules(), dsa.Rules(), intelxpu.Rules(), {core.TritonRule()}} {
		for _, r := range set {
			rules[r.Name] = r
		}
	}
	return rules
}
