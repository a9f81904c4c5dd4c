package engine

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/registry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the Prometheus metrics of attnplug serve.
type metrics struct {
	reg        *registry.Registry
	reference  map[string]bool
	registry   *prometheus.Registry
	dispatches *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	swaps      *prometheus.CounterVec
	rejections *prometheus.CounterVec
}

func newMetrics(reg *registry.Registry) *metrics {
	m := &metrics{
		reg:       reg,
		reference: map[string]bool{},
		registry:  prometheus.NewRegistry(),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnplug_dispatches_total", Help: "Requests answered, by backend name, method and answering plugin.",
		}, []string{"backend", "method", "plugin"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnplug_fallbacks_total", Help: "Requests answered by the triton rules although a plugin serves the name, by reason.",
		}, []string{"backend", "reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnplug_refused_total", Help: "Requests not decided, by kind (invalid, refused, other).",
		}, []string{"kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "attnplug_rpc_duration_seconds", Help: "Time to answer one Dispatch or DispatchBatch call.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"rpc"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnplug_plugin_swaps_total", Help: "Plugin changes of reloads, by plugin and action (swapped, added, removed, rejected, takeover, unquarantined).",
		}, []string{"plugin", "action"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnplug_plugin_swap_rejections_total", Help: "New plugin binaries a reload refused to switch to, by plugin and reason (a refused reload counts for every plugin that keeps serving: dir_missing, dir_insecure, dir_empty).",
		}, []string{"plugin", "reason"}),
	}
	for _, n := range registry.ReferenceNames() {
		m.reference[n] = true
	}
	m.registry.MustRegister(m.dispatches, m.fallbacks, m.refusals, m.latency, m.swaps, m.rejections, pluginCollector{reg})
	return m
}

func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return mux
}

// label bounds the backend label to the names sglang registers and the
// names the plugins serve now (a reload may add some): request names are
// input, and every other one counts as "other".
func (m *metrics) label(backend string) string {
	if m.reference[backend] {
		return backend
	}
	if _, _, ok := m.reg.Handler(backend); ok {
		return backend
	}
	return "other"
}

func (m *metrics) dispatched(backend string, a core.Answer) {
	b := m.label(backend)
	m.dispatches.WithLabelValues(b, a.Method.String(), a.Plugin).Inc()
	if a.Fallback != "" {
		reason, _, _ := strings.Cut(a.Fallback, ":")
		m.fallbacks.WithLabelValues(b, reason).Inc()
	}
}

func (m *metrics) refused(err error) {
	kind := "other"
	switch {
	case errors.Is(err, core.ErrInvalidRequest):
		kind = "invalid"
	case errors.Is(err, core.ErrRefused):
		kind = "refused"
	}
	m.refusals.WithLabelValues(kind).Inc()
}

func (m *metrics) observe(rpc string, d time.Duration, _ int) {
	m.latency.WithLabelValues(rpc).Observe(d.Seconds())
}

func (m *metrics) swapped(c registry.Change) {
	m.swaps.WithLabelValues(c.Plugin, c.Action).Inc()
	if c.Action == "rejected" {
		m.rejections.WithLabelValues(c.Plugin, rejectionKind(c.Reason)).Inc()
	}
}

// reloadRefused counts a refused reload as the rejection of every plugin
// that keeps serving, with the directory's problem as the reason
// (dir_missing, dir_insecure, dir_empty).
func (m *metrics) reloadRefused(r *registry.ReloadRefusal) {
	for _, p := range r.Kept {
		m.rejections.WithLabelValues(p, r.Kind).Inc()
	}
}

// rejectionKind names the class of a rejection reason, for a bounded label.
func rejectionKind(reason string) string {
	switch {
	case strings.Contains(reason, "stay with plugin"):
		return "takeover"
	case strings.Contains(reason, "self-test"):
		return "self_test"
	case strings.Contains(reason, "no longer serves"):
		return "names_dropped"
	case strings.Contains(reason, "calls itself"):
		return "wrong_family"
	case strings.Contains(reason, "lock file"):
		return "lock_file"
	case strings.Contains(reason, "did not start"), strings.Contains(reason, "start:"):
		return "start_failed"
	}
	return "other"
}

// pluginCollector reports the plugins' state at every scrape, one series
// per plugin family: a family listed twice (a binary refused beside the
// one that serves) must never make a scrape fail on a duplicate.
type pluginCollector struct{ reg *registry.Registry }

var (
	restartsDesc = prometheus.NewDesc("attnplug_plugin_restarts_total", "Restarts of a plugin process after a failure.", []string{"plugin"}, nil)
	upDesc       = prometheus.NewDesc("attnplug_plugin_up", "1 when a plugin process is running.", []string{"plugin", "status"}, nil)
)

func (c pluginCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- restartsDesc
	ch <- upDesc
}

func (c pluginCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, p := range c.reg.Plugins() {
		if p.SHA256 == "" || seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(p.Restarts), p.Name)
		up := 0.0
		if p.Status == registry.StatusRunning {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, p.Name, string(p.Status))
	}
}
