package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/wire"
)

// slowAfter is how many Dispatch calls the suite makes before it holds
// their median against the latency budget.
const slowAfter = 64

// slowSample is how many requests of each name a plugin over its latency
// budget is asked, so that the suite stays fast.
const slowSample = 64

// coverage asks every name its fixed requests (GenerateRequests, a sample
// of them with MaxRequests) and its probes, one Dispatch each.
func (s *suite) coverage(ctx context.Context, c *Check) {
	n := len(s.desc.Handlers)
	s.cov.names = s.desc.Handlers
	s.cov.plans = make([]*core.KeyPlan, n)
	s.cov.requests, s.cov.origins, s.cov.answers = make([][]core.Request, n), make([][]origin, n), make([][]answer, n)
	s.cov.started = time.Now()
	total, ok, fixed, probes := 0, 0, 0, 0
	for i, h := range s.cov.names {
		s.cov.plans[i], _ = h.Reads.Plan()
		grid := sample(GenerateRequests(h.Name, h.Reads), s.opts.MaxRequests)
		reqs, from := grid, make([]origin, len(grid))
		for j := range from {
			from[j].base = -1
		}
		if !s.cov.slow {
			// One stream a name: the same seed probes each name the same way.
			rng := rand.New(rand.NewPCG(s.opts.Seed, uint64(i)))
			pr, po := probeRequests(h.Name, &h.Reads, s.cov.plans[i], rng, max(0, s.opts.Probes), len(grid))
			reqs, from = append(reqs, pr...), append(from, po...)
		} else {
			reqs, from = sample(grid, slowSample), from[:min(len(from), slowSample)]
		}
		answers := make([]answer, len(reqs))
		for j := range answers {
			answers[j].err = errNotAsked
		}
		asked := 0
		for j := range reqs {
			if s.dead != nil || (s.cov.slow && asked >= slowSample) {
				break
			}
			m, d, err := s.dispatch(ctx, &reqs[j])
			answers[j] = answer{method: m, err: err, at: time.Since(s.cov.started)}
			total++
			asked++
			if err != nil {
				c.problem("%s: %s: %v", h.Name, describe(&reqs[j]), err)
				continue
			}
			ok++
			s.cov.latency = append(s.cov.latency, d)
			if len(s.cov.latency)%baselineEvery == 0 {
				s.measureBaseline(ctx)
			}
			if len(s.cov.latency) == slowAfter && s.overBudget() {
				s.cov.slow = true
			}
		}
		if s.cov.slow {
			reqs, from, answers = reqs[:asked], from[:asked], answers[:asked]
		}
		for _, o := range from {
			if o.base < 0 {
				fixed++
			}
		}
		probes += len(reqs)
		s.cov.requests[i], s.cov.origins[i], s.cov.answers[i] = reqs, from, answers
	}
	probes -= fixed
	s.report.Requests = ok
	if s.dead != nil {
		c.problem("stopped after %d requests: %v", total, s.dead)
	}
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("%d of %d requests not answered", total-ok, total)
		return
	}
	c.Detail = fmt.Sprintf("%s answered all %d requests: %d fixed (modes, graph flags, thresholds, capacity edges, platforms, boolean facts, declared constants) and %d random probes over every quantity (seed %d)",
		plural(len(s.cov.names), "name"), total, fixed, probes, s.opts.Seed)
	if s.cov.slow {
		c.Detail += fmt.Sprintf("; over the latency budget, so each name was asked %d requests only", slowSample)
	}
}

// baselineEvery is how many answered Dispatch calls the suite makes between
// two calls for a name the plugin does not serve: the plugin refuses those
// at once, so their time is the round trip itself, measured in the same
// run, under the same load, as the calls it is compared with.
const baselineEvery = 8

// measureBaseline times one call for an unserved name.
func (s *suite) measureBaseline(ctx context.Context) {
	req := core.NewRequest(noSuchName, core.ModeDecode)
	req.Runtime.Platform = core.PlatformCUDA
	if _, d, err := s.dispatch(ctx, &req); errors.Is(err, core.ErrUnknownBackend) {
		s.cov.baseline = append(s.cov.baseline, d)
	}
}

// ruleTime is the median Dispatch call less the median round trip (the
// baseline): the time the plugin's rules take, on whatever machine.
func (s *suite) ruleTime() time.Duration {
	if len(s.cov.latency) == 0 {
		return 0
	}
	var rt time.Duration
	if len(s.cov.baseline) > 0 {
		rt = median(s.cov.baseline)
	}
	return max(0, median(s.cov.latency)-rt)
}

// overBudget reports whether the rules' time so far is over the latency
// budget.
func (s *suite) overBudget() bool {
	return s.opts.LatencyBudget > 0 && s.ruleTime() > s.opts.LatencyBudget
}

func median(ds []time.Duration) time.Duration {
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[len(c)/2]
}

// determinismSample is how many requests of each name the determinism
// check asks again one by one in its first round; the batch check asks all
// of them again.
const determinismSample = 512

// determinismRounds and determinismGap: the check asks an eighth of its
// sample again in later rounds, at least determinismGap apart, so that an
// answer that changes with the time of day is asked at several times.
const (
	determinismRounds = 3
	determinismGap    = 150 * time.Millisecond
)

// determinism asks requests again, one by one: a fixed sample of each
// name's, spread over its whole set, in reverse order, then part of it
// again in later rounds spread over time.
func (s *suite) determinism(ctx context.Context, c *Check) {
	if s.answered() == 0 {
		c.Status, c.Detail = Skip, "not run: no answers"
		return
	}
	n := 0
	var last time.Time
	for round := range determinismRounds {
		if round > 0 {
			if s.cov.slow {
				break
			}
			if wait := determinismGap - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
		}
		last = time.Now()
		for i := len(s.cov.names) - 1; i >= 0 && s.dead == nil; i-- {
			step := max(1, len(s.cov.requests[i])/determinismSample)
			if round > 0 {
				step *= 8
			}
			for j := len(s.cov.requests[i]) - 1; j >= 0 && s.dead == nil; j -= step {
				first := s.cov.answers[i][j]
				if first.err != nil {
					continue
				}
				m, _, err := s.dispatch(ctx, &s.cov.requests[i][j])
				n++
				now := time.Since(s.cov.started)
				switch {
				case err != nil:
					c.problem("%s: %s: answered %s, then failed: %v", s.cov.names[i].Name, describe(&s.cov.requests[i][j]), first.method, err)
				case m != first.method:
					c.problem("%s: %s: answered %s at +%s, then %s at +%s: an answer must depend on the request alone, not on the time or the calls before it",
						s.cov.names[i].Name, describe(&s.cov.requests[i][j]), first.method, first.at.Round(time.Millisecond), m, now.Round(time.Millisecond))
				}
			}
		}
	}
	if s.dead != nil {
		c.problem("stopped after %d requests: %v", n, s.dead)
	}
	if c.Status == Fail {
		c.Detail = "the same request got different answers"
		return
	}
	c.Detail = fmt.Sprintf("%d requests asked again one by one, in reverse order and in %d rounds %s apart: same answers (the batch check asks all again)",
		n, determinismRounds, determinismGap)
}

// reads checks that requests a host cannot tell apart by their key got the
// same answer. Each pair that did not (a probe and its base first, then
// any two requests of a key class) is explained: the suite walks from one
// to the other and names the quantity read and its threshold (explain).
func (s *suite) reads(ctx context.Context, c *Check) {
	if s.answered() == 0 {
		c.Status, c.Detail = Skip, "not run: no answers"
		return
	}
	classes, checked, explained := 0, 0, 0
	var uncacheable []string
	for i, h := range s.cov.names {
		plan := s.cov.plans[i]
		if plan == nil {
			uncacheable = append(uncacheable, h.Name)
			continue
		}
		reqs, answers := s.cov.requests[i], s.cov.answers[i]
		keys := make([]core.Key, len(reqs))
		first := map[core.Key]int{}
		var pairs [][2]int // requests of one key with other answers
		inConflict := map[core.Key]bool{}
		for j, a := range answers {
			if a.err != nil {
				continue
			}
			checked++
			k := plan.Key(&reqs[j])
			keys[j] = k
			f, ok := first[k]
			if !ok {
				first[k] = j
				continue
			}
			if answers[f].method != a.method && !inConflict[k] {
				inConflict[k] = true
				pairs = append(pairs, [2]int{f, j})
			}
		}
		classes += len(first)
		// A probe differs from its base in one quantity: the pairs that
		// explain best come first.
		var probes [][2]int
		for j, o := range s.cov.origins[i] {
			if o.base >= 0 && answers[o.base].err == nil && answers[j].err == nil &&
				answers[o.base].method != answers[j].method && keys[o.base] == keys[j] {
				probes = append(probes, [2]int{o.base, j})
			}
		}
		seen := map[string]bool{}
		for _, p := range append(probes, pairs...) {
			if explained >= maxProblems {
				break
			}
			msg := s.explain(ctx, i, reqs[p[0]], reqs[p[1]], answers[p[0]].method, answers[p[1]].method)
			// One report per quantity read: the words before its value.
			head := msg[:strings.IndexFunc(msg+":", func(r rune) bool { return r == ':' || r == ',' || (r >= '0' && r <= '9') })]
			if seen[head] {
				continue
			}
			seen[head] = true
			explained++
			c.problem("%s", msg)
		}
		if n := len(pairs); n > 0 {
			c.problem("%s: %d key classes hold requests with different answers", h.Name, n)
		}
	}
	if c.Status == Fail {
		c.Detail = "the declared reads are not honest: a host caching by them would answer wrongly"
		return
	}
	c.Detail = fmt.Sprintf("%d answers in %d key classes: one answer per class; no probe changed an answer without changing its key", checked, classes)
	if len(uncacheable) > 0 {
		c.Detail += "; not cacheable, not checked: " + strings.Join(uncacheable, ", ")
	}
}

// maxMutations is how many changed requests the suite keeps to report.
const maxMutations = 20

// noteResult keeps a call whose request the rules changed.
func (s *suite) noteResult(req *core.Request, err error) {
	if err != nil && strings.Contains(err.Error(), wire.ErrRequestChanged.Error()) && len(s.mutations) < maxMutations {
		s.mutations = append(s.mutations, fmt.Sprintf("%s: %s: %v", req.Backend, describe(req), err))
	}
}

// mutation reports the calls whose request the rules changed: the suite
// compares each request before and after the call of a backend in its
// process; for a plugin the SDK's server (wire.Main) does, when the suite
// starts the plugin.
func (s *suite) mutation(_ context.Context, c *Check) {
	for _, m := range s.mutations {
		c.problem("%s", m)
	}
	if c.Status == Fail {
		c.Detail = "the rules change the requests they are given: a rule must read its request and leave it as it is"
		return
	}
	if s.inProcess() {
		c.Detail = "no call changed its request (the suite compared each request before and after the call)"
		return
	}
	c.Detail = "no call changed its request (the SDK's server compared each request before and after the rules; a plugin not built on wire.Main is not checked)"
}

// latencyCheck reports the distribution of single Dispatch calls and holds
// the median against the budget and the p99 against MaxP99.
func (s *suite) latencyCheck(_ context.Context, c *Check) {
	if len(s.cov.latency) == 0 {
		c.Status, c.Detail = Skip, "not run: no answered Dispatch calls"
		return
	}
	ds := slices.Clone(s.cov.latency)
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	l := Latency{Samples: len(ds), P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
	s.report.Latency = l
	c.Detail = fmt.Sprintf("Dispatch p50 %s, p99 %s, max %s over %d calls", round(l.P50), round(l.P99), round(l.Max), l.Samples)
	if len(s.cov.baseline) > 0 {
		c.Detail += fmt.Sprintf("; the round trip alone (a name it does not serve) p50 %s over %d calls", round(median(s.cov.baseline)), len(s.cov.baseline))
	}
	if b := s.opts.LatencyBudget; b > 0 {
		if rt := s.ruleTime(); rt > b {
			c.problem("the rules take %s a call (the median call, %s, less the round trip), over the latency budget of %s: a host asks the plugin on every request its cache cannot answer, and a correct plugin's rules take well under a tenth of it", round(rt), round(l.P50), b)
		} else {
			c.Detail += fmt.Sprintf("; the rules' %s a call is within the budget of %s", round(rt), b)
		}
	}
	if s.opts.MaxP99 > 0 {
		if l.P99 > s.opts.MaxP99 {
			c.problem("p99 %s is above the limit of %s", round(l.P99), s.opts.MaxP99)
		} else {
			c.Detail += fmt.Sprintf(" (limit for the p99 %s)", s.opts.MaxP99)
		}
	}
	if s.cov.slow {
		c.problem("found over the budget after its first %d calls: each name was then asked %d requests only, so other checks saw less", slowAfter, slowSample)
	}
}
