package registry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry/backend"
	"github.com/hashicorp/go-hclog"
)

// fallbackLog logs fallbacks without flooding: the first fallback of a
// name for a reason is a warning with the full error, the ones after it
// are counted, and the count is logged when the plugin answers again and
// when the registry closes.
type fallbackLog struct {
	log    hclog.Logger
	active atomic.Int32 // open streaks; zero makes recovered free

	mu      sync.Mutex
	streaks map[streakKey]*streak
	total   int64
	refused int64
}

// maxStreaks bounds the open streaks, one per name and reason.
const maxStreaks = 1024

type streakKey struct {
	backend string
	reason  Reason
}

type streak struct {
	plugin string
	count  int64
}

// record counts a fallback of backend for reason; the first of a streak is
// logged with msg, the error, and what, what the host does instead.
// refused counts a request refused rather than answered another way.
func (l *fallbackLog) record(backend, plugin string, reason Reason, msg, what string, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if refused {
		l.refused++
	} else {
		l.total++
	}
	k := streakKey{backend, reason}
	if s := l.streaks[k]; s != nil {
		s.count++
		return
	}
	if len(l.streaks) >= maxStreaks {
		return // names without end (strict refusals of made-up names): counted only
	}
	if l.streaks == nil {
		l.streaks = map[streakKey]*streak{}
	}
	l.streaks[k] = &streak{plugin: plugin, count: 1}
	l.active.Add(1)
	l.log.Warn(what, "backend", backend, "plugin", plugin, "reason", string(reason), "error", msg)
}

// recovered closes the streaks of plugin after it answered.
func (l *fallbackLog) recovered(plugin string) {
	if l.active.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, s := range l.streaks {
		if s.plugin == plugin && plugin != "" {
			l.log.Info("plugin answering again", "backend", k.backend, "plugin", plugin, "reason", string(k.reason), "fallbacks", s.count)
			delete(l.streaks, k)
			l.active.Add(-1)
		}
	}
}

func (l *fallbackLog) summary() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, s := range l.streaks {
		if s.count > 1 {
			l.log.Warn("fallbacks still open at close", "backend", k.backend, "plugin", s.plugin, "reason", string(k.reason), "count", s.count)
		}
	}
	if l.total > 0 || l.refused > 0 {
		l.log.Info("fallback summary", "fell_back", l.total, "refused", l.refused)
	}
}

// fallback answers req by the fallback backend, the triton rules in
// process, asked through the same call as any backend (fallbackRoute),
// because of why, or refuses it under Config.Strict. Either way it is
// recorded (fellBack). rt is the route req went to. When the triton rules
// cannot answer either (ctx ended, a panic), the error says so.
func (r *Registry) fallback(ctx context.Context, req *core.Request, rt *route, why backend.Outcome) (core.Answer, error) {
	msg := why.Error()
	what := "falling back to the triton rules"
	if r.cfg.Strict {
		what = "refusing requests (strict)"
	}
	r.fellBack(req.Backend, rt, why, what, r.cfg.Strict)
	if r.cfg.Strict {
		return core.Answer{}, fmt.Errorf("%w: %s (strict: no fallback to triton)", core.ErrRefused, msg)
	}
	fb := r.fallbackRoute
	m, s, err := r.ask(ctx, fb, req)
	switch {
	case err != nil:
		return core.Answer{}, err
	case s.verdict != answered:
		return core.Answer{}, fmt.Errorf("%w: %s; the triton rules failed too: %w", core.ErrUnavailable, msg, s.o)
	}
	a := fb.answer(m)
	a.Fallback = msg
	return a, nil
}

// fellBack is the one recorder of fallbacks, of dispatches and of device
// code alike: it counts a request of name that rt's backend could not
// answer, because of why, and logs the first of a streak with instead,
// what the host does instead; refused counts a request refused rather
// than answered another way. The streak is the backend's when one serves
// the name (it closes when the backend answers again), else the name's.
func (r *Registry) fellBack(name string, rt *route, why backend.Outcome, instead string, refused bool) {
	plugin := ""
	if rt.serves() {
		plugin = rt.family
	}
	r.fallbacks.record(name, plugin, why.Reason, why.Error(), instead, refused)
}
