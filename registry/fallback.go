package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/attnplug/attnplug/core"
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
// process, because of err, or refuses it under Config.Strict. Either way
// it is logged, once per streak (fallbackLog). rt is the route req went
// to; the fallback is the plugin's when a plugin serves it.
func (r *Registry) fallback(req *core.Request, rt *route, err error) (core.Answer, error) {
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{reason: ReasonCrashed, err: err}
	}
	plugin := ""
	if rt.down == nil && !rt.unknown {
		plugin = rt.be.family()
	}
	msg := f.Error()
	what := "falling back to the triton rules"
	if r.cfg.Strict {
		what = "refusing requests (strict)"
	}
	r.fallbacks.record(req.Backend, plugin, f.reason, msg, what, r.cfg.Strict)
	if r.cfg.Strict {
		return core.Answer{}, fmt.Errorf("%w: %s (strict: no fallback to triton)", core.ErrRefused, msg)
	}
	// The triton rules answer every valid request, and req is valid.
	m, _ := r.triton.conn.Dispatch(context.Background(), req)
	return core.Answer{Method: m, Handler: core.TritonName, Plugin: r.triton.family(), Fallback: msg}, nil
}

// refusal makes a backend's own refusal of what (the request, the batch)
// a failure to fall back for; other errors of a call pass as they are.
func refusal(err error, be backend, what string) error {
	if errors.Is(err, core.ErrInvalidRequest) {
		return &failure{reason: ReasonRefused, err: fmt.Errorf("plugin %s refused %s: %w", be.family(), what, err)}
	}
	return err
}

func (r *Registry) succeeded(be backend) {
	r.fallbacks.recovered(be.family())
	be.succeeded()
}
