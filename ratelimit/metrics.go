package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// otherTenant is the tenant label used for a tenant that is not (or no longer)
// configured, so that label values stay bounded.
const otherTenant = "other"

// Metrics are the rate limiter's Prometheus metrics:
//
//	goodput_ratelimit_decisions_total{tenant,limit,decision}  counter; decision is
//	    "allowed" or "denied", limit is the limit that decided ("none" for an
//	    ordinary admission, "backend" when on_backend_error did)
//	goodput_ratelimit_backend_errors_total{backend}           counter
//	goodput_ratelimit_decision_seconds{backend}               histogram of one backend decision
//	goodput_ratelimit_remaining{tenant,limit}                 gauge: capacity left at the most
//	    constrained level after the latest decision ("requests", "tokens", "concurrency")
//	goodput_ratelimit_queued_requests{tenant}                 gauge: requests waiting in the
//	    queue (max_queue_wait) on this replica
//	goodput_ratelimit_backend_up{backend}                     gauge: 1 while decisions reach
//	    the backend, 0 during an outage (Redis only)
//
// Children are created per configured tenant (per tenant label value,
// with WithTenantLabel) at its first decision, and looked up without
// Prometheus label hashing on the hot path. Children of a tenant
// removed by a reload are kept (counters must not go back).
type Metrics struct {
	backend       string
	decisions     *prometheus.CounterVec
	backendErrors prometheus.Counter
	latency       prometheus.Observer
	remaining     *prometheus.GaugeVec
	queued        *prometheus.GaugeVec

	mu      sync.Mutex // serialises SetTenants
	tenants atomic.Pointer[map[string]*tenantSlot]
	other   *tenantMetrics
	otherS  *tenantSlot // other's slot, its children made
	// label, if not nil, is the tenant label value of a tenant (its name,
	// or otherTenant for one the configured label values leave out).
	label func(tenant string) string
}

// tenantSlot holds a configured tenant's children, made with its first
// decision: a tenant that sends nothing has no series (20,000 tenants had
// 200,000 series, 15 MB a scrape, before any request, and a remaining
// capacity of 0 each).
type tenantSlot struct {
	once sync.Once
	name string
	tm   *tenantMetrics
	gone bool // a reload removed the tenant (guarded by Metrics.mu)
}

type tenantMetrics struct {
	name string
	// gone: a reload removed the tenant (guarded by Metrics.mu). Its
	// gauges made from then on (by a decision that began before the
	// reload) are not exported: they would stand frozen.
	gone      bool
	allowed   [numLimitKinds]prometheus.Counter // limitNone and limitBackend are set
	denied    [numLimitKinds]prometheus.Counter // all but limitNone are set
	queued    prometheus.Gauge
	remOnce   [3]sync.Once
	remaining [3]prometheus.Gauge // requests, tokens, concurrency: made with the first decision under that limit
}

// newMetrics registers the metrics in reg, for a limiter whose Name is
// backend.
func newMetrics(reg prometheus.Registerer, backend string) (*Metrics, error) {
	m := &Metrics{
		backend: backend,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_ratelimit_decisions_total",
			Help: "Admission decisions by tenant, deciding limit (none, requests, tokens, concurrency, backend) and decision (allowed, denied).",
		}, []string{"tenant", "limit", "decision"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goodput_ratelimit_remaining",
			Help: "Capacity left at the tenant's most constrained level after its latest decision on this replica (requests, tokens, concurrency).",
		}, []string{"tenant", "limit"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goodput_ratelimit_queued_requests",
			Help: "Requests of the tenant waiting in this replica's queue for capacity (max_queue_wait).",
		}, []string{"tenant"}),
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "goodput_ratelimit_backend_errors_total",
		Help: "Admissions and reconciliations the rate limiting backend did not decide: failed calls, and those not made while its breaker is open.",
	}, []string{"backend"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "goodput_ratelimit_decision_seconds",
		Help:    "Time taken by one admission decision of the backend.",
		Buckets: []float64{1e-6, 5e-6, 25e-6, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, .01, .025, .05, .1, .25, 1},
	}, []string{"backend"})
	for _, c := range []prometheus.Collector{m.decisions, m.remaining, m.queued, errs, lat} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.backendErrors = errs.WithLabelValues(backend)
	m.latency = lat.WithLabelValues(backend)
	m.other = m.newTenant(otherTenant)
	m.otherS = &tenantSlot{name: otherTenant, tm: m.other}
	m.otherS.once.Do(func() {})
	empty := map[string]*tenantSlot{}
	m.tenants.Store(&empty)
	return m, nil
}

func (m *Metrics) newTenant(name string) *tenantMetrics {
	tm := &tenantMetrics{name: name}
	for _, k := range []LimitKind{limitNone, limitBackend} {
		tm.allowed[k] = m.decisions.WithLabelValues(name, k.String(), "allowed")
	}
	for _, k := range []LimitKind{limitRequests, limitTokens, limitConcurrency, limitBackend} {
		tm.denied[k] = m.decisions.WithLabelValues(name, k.String(), "denied")
	}
	tm.queued = m.queued.WithLabelValues(name)
	return tm
}

// unexported is a gauge of a removed tenant's, made after its removal:
// set, and never exported.
func unexported() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "goodput_ratelimit_removed_tenant"})
}

// SetTenants gives new tenants their slots; the children of each are made
// with its first decision (tenant).
func (m *Metrics) SetTenants(_ time.Time, tenants []TenantConfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.tenants.Load()
	nm := make(map[string]*tenantSlot, len(tenants))
	for i := range tenants {
		name := tenants[i].Name
		if !utf8.ValidString(name) || m.label != nil && m.label(name) != name {
			// The Prometheus client refuses (panics on) a label value
			// that is not UTF-8; YAML lets one through as !!binary. A
			// tenant the configured label values leave out counts under
			// other, as in every other metric.
			nm[name] = m.otherS
			continue
		}
		if ts := old[name]; ts != nil && ts != m.otherS {
			nm[name] = ts
		} else {
			nm[name] = &tenantSlot{name: name}
		}
	}
	m.tenants.Store(&nm)
	// A removed tenant's gauges go: frozen at their last values, they
	// showed a capacity and a queue of a tenant that is no more (an
	// operator's probe, after tenants came and went over reloads). Its
	// counters stay, as counters do; its requests still queued count on
	// in children no longer exported.
	for name, ts := range old {
		if _, kept := nm[name]; !kept && ts != m.otherS {
			ts.gone = true
			if ts.tm != nil {
				ts.tm.gone = true
			}
			m.remaining.DeletePartialMatch(prometheus.Labels{"tenant": name})
			m.queued.DeleteLabelValues(name)
		}
	}
}

// tenant returns the children of a configured tenant, made at its first
// call, or other's.
func (m *Metrics) tenant(name string) *tenantMetrics {
	ts := (*m.tenants.Load())[name]
	if ts == nil {
		return m.other
	}
	return m.slotMetrics(ts)
}

// slotMetrics returns the children of ts, made at its first call.
func (m *Metrics) slotMetrics(ts *tenantSlot) *tenantMetrics {
	ts.once.Do(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		ts.tm = m.newTenant(ts.name)
		if ts.gone {
			// Removed before its first use (a decision begun before the
			// reload): its counters count on, its queue is not exported.
			ts.tm.gone = true
			m.queued.DeleteLabelValues(ts.name)
			ts.tm.queued = unexported()
		}
	})
	return ts.tm
}

// registerBackendUp registers goodput_ratelimit_backend_up{backend}: 1 while
// decisions reach the backend, 0 during an outage (on_backend_error decides
// meanwhile).
func (m *Metrics) registerBackendUp(reg prometheus.Registerer, healthy func() bool) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "goodput_ratelimit_backend_up",
		Help:        "1 while rate-limit decisions reach the backend, 0 while it fails and on_backend_error decides.",
		ConstLabels: prometheus.Labels{"backend": m.backend},
	}, func() float64 {
		if healthy() {
			return 1
		}
		return 0
	}))
}

// observeLatency records one backend decision's duration.
func (m *Metrics) observeLatency(d time.Duration) { m.latency.Observe(d.Seconds()) }

// observeBackendError counts one failed backend call.
func (m *Metrics) observeBackendError() { m.backendErrors.Inc() }

// observeRemaining updates the tenant's remaining-capacity gauges of the
// limits it has: a gauge is made with the first decision under its limit,
// so that a tenant without a token limit, say, has no tokens gauge (it
// read 0, which a dashboard shows as exhausted; found by review).
func (m *Metrics) observeRemaining(tm *tenantMetrics, d *Decision) {
	for i, q := range [3]*Quota{&d.Requests, &d.Tokens, &d.Concurrency} {
		if q.Limit > 0 {
			m.remainingGauge(tm, i).Set(float64(q.Remaining))
		}
	}
}

var remainingKinds = [3]LimitKind{limitRequests, limitTokens, limitConcurrency}

func (m *Metrics) remainingGauge(tm *tenantMetrics, i int) prometheus.Gauge {
	tm.remOnce[i].Do(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if tm.gone {
			tm.remaining[i] = unexported()
			return
		}
		tm.remaining[i] = m.remaining.WithLabelValues(tm.name, remainingKinds[i].String())
	})
	return tm.remaining[i]
}

// observeDecision counts a request's final decision.
func (m *Metrics) observeDecision(tm *tenantMetrics, d *Decision) {
	var c prometheus.Counter
	if d.Allowed {
		c = tm.allowed[d.Limit]
	} else {
		c = tm.denied[d.Limit]
	}
	if c != nil {
		c.Inc()
	}
}
