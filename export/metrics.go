// Package export turns per-request records into what operators read: the
// JSON Lines request log and Prometheus metrics.
package export

import (
	"sync"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// Bucket layouts. They resolve 5 ms from 10 ms inter-token gaps and 50 ms
// from 100 ms TTFT, as SLOs are written at that grain. Native histograms
// are exported too, for servers that scrape them.
var (
	ttftBuckets = []float64{.005, .01, .02, .03, .04, .05, .06, .07, .08, .09, .1, .125, .15, .2, .25, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60}
	itlBuckets  = []float64{.001, .002, .003, .004, .005, .006, .007, .008, .009, .01, .0125, .015, .02, .025, .03, .04, .05, .06, .075, .1, .15, .2, .3, .5, .75, 1, 2.5, 5}
	e2eBuckets  = []float64{.05, .1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600}
	tokBuckets  = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}
	ovhBuckets  = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}
)

const nativeFactor = 1.1

// Metrics exports records to Prometheus. Create it with NewMetrics; it
// implements proxy.Sink and proxy.GapSink.
type Metrics struct {
	labels *Labeler

	requests   *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	itl        *prometheus.HistogramVec
	tpot       *prometheus.HistogramVec
	e2e        *prometheus.HistogramVec
	inTok      *prometheus.HistogramVec
	outTok     *prometheus.HistogramVec
	inFlight   *prometheus.GaugeVec
	overhead   *prometheus.HistogramVec
	writeDelay *prometheus.HistogramVec
	evTokens   *prometheus.CounterVec // goodput_token_event_requests_total
	multiTok   *prometheus.CounterVec // goodput_multi_token_event_requests_total

	mu     sync.RWMutex
	series map[seriesKey]*series
}

type seriesKey struct{ tenant, model, route string }

// series holds the children of one label combination, looked up once.
type series struct {
	outcomes         [16]prometheus.Counter
	ttft, itl, tpot  prometheus.Observer
	e2e, inTok, outT prometheus.Observer
	overhead         prometheus.Observer
	writeDelay       prometheus.Observer
	evTokens         [4]prometheus.Counter // by meter.EventTokens (equal, above, below)
	multiTok         prometheus.Counter
}

// NewMetrics registers the gateway's metrics in reg. labels chooses the
// label values (see Labeler).
func NewMetrics(reg prometheus.Registerer, labels *Labeler) *Metrics {
	lbl := []string{"tenant", "model", "route"}
	h := func(name, help string, b []float64, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: b,
			NativeHistogramBucketFactor: nativeFactor, NativeHistogramMaxBucketNumber: 160,
			NativeHistogramMinResetDuration: time.Hour,
		}, labels)
	}
	m := &Metrics{
		labels: labels,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_requests_total", Help: "Requests that reached the gateway, by outcome (exactly one per request).",
		}, []string{"tenant", "model", "route", "outcome"}),
		ttft:       h("goodput_time_to_first_token_seconds", "Time from the gateway reading the request to the first token event.", ttftBuckets, lbl),
		itl:        h("goodput_inter_token_latency_seconds", "Gaps between consecutive token events; one observation per gap.", itlBuckets, lbl),
		tpot:       h("goodput_time_per_output_token_seconds", "(E2E - TTFT) / (OSL - 1), for requests with OSL > 1.", itlBuckets, lbl),
		e2e:        h("goodput_request_duration_seconds", "Time from the gateway reading the request to the last token event (or response end).", e2eBuckets, lbl),
		inTok:      h("goodput_input_tokens", "Prompt tokens per request (ISL).", tokBuckets, lbl),
		outTok:     h("goodput_output_tokens", "Generated tokens per request (OSL).", tokBuckets, lbl),
		overhead:   h("goodput_proxy_overhead_seconds", "Time the gateway added before handing the request to the upstream.", ovhBuckets, lbl),
		writeDelay: h("goodput_proxy_write_delay_seconds", "Per request, the longest time from reading an event from the upstream to writing it to the client.", ovhBuckets, lbl),
		evTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_token_event_requests_total",
			Help: "Streamed requests with token events and an output count from the engine, by how OSL compares with their number of token events (equal, above: some events carried several tokens, below: some carried none). ITL is one gap per token event.",
		}, append(lbl, "osl_vs_events")),
		multiTok: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "goodput_multi_token_event_requests_total",
			Help: "Streamed requests where an event is known to have carried several tokens (from the engine's running counts, or OSL above the token events); ITL gaps before such events span several tokens.",
		}, lbl),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "goodput_in_flight_requests", Help: "Requests in the gateway whose record is not yet written.",
		}, []string{"tenant"}),
		series: make(map[seriesKey]*series),
	}
	reg.MustRegister(m.requests, m.ttft, m.itl, m.tpot, m.e2e, m.inTok, m.outTok, m.overhead, m.writeDelay, m.evTokens, m.multiTok, m.inFlight)
	return m
}

func (m *Metrics) get(rec *meter.Record) *series {
	route := rec.Route
	if rec.Deferred || rec.ModelOp != meter.ModelOpNone {
		// A background request's acknowledgement, or a model's load or
		// unload, is not an inference request: counted with the other
		// routes, so that a route's requests are its arrivals (goodput
		// report reads them so).
		route = meter.APIOther.String()
	}
	k := seriesKey{rec.Labels.Tenant, rec.Labels.Model, route}
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.series[k]; s != nil {
		return s
	}
	s = &series{
		ttft:       m.ttft.WithLabelValues(k.tenant, k.model, k.route),
		itl:        m.itl.WithLabelValues(k.tenant, k.model, k.route),
		tpot:       m.tpot.WithLabelValues(k.tenant, k.model, k.route),
		e2e:        m.e2e.WithLabelValues(k.tenant, k.model, k.route),
		inTok:      m.inTok.WithLabelValues(k.tenant, k.model, k.route),
		outT:       m.outTok.WithLabelValues(k.tenant, k.model, k.route),
		overhead:   m.overhead.WithLabelValues(k.tenant, k.model, k.route),
		writeDelay: m.writeDelay.WithLabelValues(k.tenant, k.model, k.route),
		multiTok:   m.multiTok.WithLabelValues(k.tenant, k.model, k.route),
	}
	for _, e := range []meter.EventTokens{meter.EventTokensEqual, meter.EventTokensAbove, meter.EventTokensBelow} {
		s.evTokens[e] = m.evTokens.WithLabelValues(k.tenant, k.model, k.route, e.String())
	}
	for _, o := range meter.Outcomes() {
		s.outcomes[o] = m.requests.WithLabelValues(k.tenant, k.model, k.route, o.String())
	}
	m.series[k] = s
	return s
}

// Record exports one finished record: every request counts in
// goodput_requests_total; only inference requests (rec.Inference) enter the
// latency and token histograms.
func (m *Metrics) Record(rec *meter.Record) {
	if g := rec.Live.Gauge; g != nil {
		g.Dec()
		rec.Live.Gauge = nil
	}
	m.labels.End(rec)
	s := m.get(rec)
	s.outcomes[rec.Outcome].Inc()
	if !rec.Inference() || rec.Outcome == meter.OutcomeUnauthorized {
		// Not an inference request (docs/MEASURES.md): a pass-through, or
		// a request without a valid key, whose few microseconds would
		// count in the latency figures of the "other" tenant.
		return
	}
	if rec.TTFT >= 0 {
		s.ttft.Observe(rec.TTFT.Seconds())
	}
	// The gaps a record keeps; the later ones (a stream of more than
	// meter.MaxKeptGaps+1 token events) were observed as they came (Gap).
	for _, g := range rec.ITL {
		s.itl.Observe(g.Seconds())
	}
	if rec.TPOT >= 0 {
		s.tpot.Observe(rec.TPOT.Seconds())
	}
	if rec.E2E >= 0 {
		s.e2e.Observe(rec.E2E.Seconds())
	}
	if rec.ISL >= 0 {
		s.inTok.Observe(float64(rec.ISL))
	}
	if rec.OSL >= 0 {
		s.outT.Observe(float64(rec.OSL))
	}
	if rec.Overhead >= 0 {
		s.overhead.Observe(rec.Overhead.Seconds())
	}
	if rec.WriteDelay >= 0 {
		s.writeDelay.Observe(rec.WriteDelay.Seconds())
	}
	if e := rec.EventTokens(); e != meter.EventTokensUnknown {
		s.evTokens[e].Inc()
		if rec.MultiTokenEvents() {
			s.multiTok.Inc()
		}
	}
}

// Gap observes one inter-token gap that the record will not keep one by
// one (proxy.GapSink): with the kept gaps observed at Record, the ITL
// histogram counts every gap of every stream exactly, however long.
//
// The record's labels are chosen here already: its status is known once
// its tokens flow, and they are the ones its end will use.
func (m *Metrics) Gap(rec *meter.Record, gap time.Duration) {
	m.labels.End(rec)
	m.get(rec).itl.Observe(gap.Seconds())
}

// Begin counts a request in flight for its tenant. The gauge child is kept
// on the record, so that its end decrements the same child whatever changed
// in between. A tenant without a label slot yet counts as "other".
func (m *Metrics) Begin(rec *meter.Record) {
	if rec.Live.Gauge != nil {
		return // counted already
	}
	m.labels.Begin(rec)
	t := rec.Live.Tenant
	if rec.Live.TentativeTenant {
		// A gauge child is never deleted: only admitted values get one.
		t = Other
	}
	g := m.inFlight.WithLabelValues(t)
	g.Inc()
	rec.Live.Gauge = g
}
