package slo

import (
	"sync"

	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the SLO counters, the source of truth for attainment and
// goodput (docs/MEASURES.md, SLOs): they add up across gateway replicas in
// Prometheus, and the recording and alerting rules in deploy/prometheus are built on them.
//
//	goodput_slo_requests_total{tenant,model,slo,result="good|miss"}
//	goodput_slo_misses_total{tenant,model,slo,reason}
//	goodput_good_output_tokens_total{tenant,model,slo}
//	goodput_output_tokens_total{tenant,model,slo}
//	goodput_slo_objective{tenant,slo}
//
// The objective gauge lets the rules compute burn rates per (tenant, slo)
// without repeating the configuration in Prometheus.
//
// Children are created once per (tenant, model, slo), all results and reasons
// at once so that every series exists from its first request (rate() over a
// missing series is empty, not 0), and cached: after the first request of a
// series, Observe does a map lookup of the Key and atomic adds, with no
// label lookup and no allocation. Safe for concurrent use.
type Metrics struct {
	requests   *prometheus.CounterVec
	misses     *prometheus.CounterVec
	goodTokens *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	objective  *prometheus.GaugeVec

	mu     sync.RWMutex
	series map[Key]*Series
}

// Series holds the counters of one (tenant, model, slo); callers that keep
// it avoid even the map lookup of Metrics.Observe.
type Series struct {
	good, miss         prometheus.Counter
	reasons            [numReasons]prometheus.Counter
	goodTokens, tokens prometheus.Counter
}

// newMetrics creates the counters and registers them with reg.
func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	l := []string{"tenant", "model", "slo"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_slo_requests_total",
			Help: "Requests judged against their tenant's SLO class, by result (good or miss). Failed requests are misses; a client that left before the first byte counts only if its wait broke a bound.",
		}, append(l, "result")),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_slo_misses_total",
			Help: "SLO misses by reason; a miss with several reasons counts once for each.",
		}, append(l, "reason")),
		goodTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_good_output_tokens_total",
			Help: "Output tokens of requests that met their SLO (goodput in tokens).",
		}, l),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_output_tokens_total",
			Help: "Output tokens of every judged request with a known output count.",
		}, l),
		objective: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goodput_slo_objective",
			Help: "Objective (target fraction of good requests) of each tenant's SLO class.",
		}, []string{"tenant", "slo"}),
		series: map[Key]*Series{},
	}
	for _, c := range []prometheus.Collector{m.requests, m.misses, m.goodTokens, m.tokens, m.objective} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// For returns the counters of k, creating them on first use.
func (m *Metrics) For(k Key) *Series {
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[k]; s != nil {
		return s
	}
	s = &Series{
		good:       m.requests.WithLabelValues(k.Tenant, k.Model, k.SLO, "good"),
		miss:       m.requests.WithLabelValues(k.Tenant, k.Model, k.SLO, "miss"),
		goodTokens: m.goodTokens.WithLabelValues(k.Tenant, k.Model, k.SLO),
		tokens:     m.tokens.WithLabelValues(k.Tenant, k.Model, k.SLO),
	}
	for r := Reason(0); r < numReasons; r++ {
		s.reasons[r] = m.misses.WithLabelValues(k.Tenant, k.Model, k.SLO, reasonNames[r])
	}
	m.series[k] = s
	return s
}

// Observe counts one judged request in the series k.
func (m *Metrics) Observe(k Key, rec *meter.Record, v Verdict) { m.For(k).Observe(rec, v) }

// Observe counts one judged request: its result, each miss reason, and its
// output tokens (OSL; nothing when unknown).
func (s *Series) Observe(rec *meter.Record, v Verdict) {
	if v.Good {
		s.good.Inc()
	} else {
		s.miss.Inc()
		for r := Reason(0); r < numReasons; r++ {
			if v.Reasons.has(r) {
				s.reasons[r].Inc()
			}
		}
	}
	if rec.OSL > 0 {
		n := float64(rec.OSL)
		s.tokens.Add(n)
		if v.Good {
			s.goodTokens.Add(n)
		}
	}
}

// setObjective exports the objective of a tenant's class. Call it for every
// (tenant, class) a tenant can be judged against (see resolver.classes) at
// start and on reload; the burn-rate rules need it.
func (m *Metrics) setObjective(tenant, slo string, objective float64) {
	m.objective.WithLabelValues(tenant, slo).Set(objective)
}

// resetObjectives removes every exported objective (before re-exporting the
// objectives of a reloaded configuration).
func (m *Metrics) resetObjectives() { m.objective.Reset() }
