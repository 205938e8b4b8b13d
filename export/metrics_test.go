package export

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabeler(NewLabelSet([]string{"acme"}, 0), NewLabelSet(nil, 0)))
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = "acme", "llama", "chat", 200, 200
	rec.TTFT, rec.E2E = 50*time.Millisecond, 90*time.Millisecond
	rec.ITL = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond}
	rec.ISL, rec.OSL = 12, 4
	m.Begin(&rec)
	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("acme")); got != 1 {
		t.Fatalf("in flight %v", got)
	}
	m.Record(&rec)
	// A second request from an unconfigured tenant, non-streamed.
	var other meter.Record
	other.Reset()
	other.Tenant, other.Route, other.Outcome = "mallory", "other", meter.OutcomeClientError
	m.Begin(&other)
	m.Record(&other)

	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("acme")); got != 0 {
		t.Fatalf("in flight after the end %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", "llama", "chat", "ok")); got != 1 {
		t.Fatalf("requests ok %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(Other, "none", "other", "client_error")); got != 1 {
		t.Fatalf("unconfigured tenant not counted as other: %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			if h := mm.GetHistogram(); h != nil {
				counts[mf.GetName()] += h.GetSampleCount()
			}
		}
	}
	// One ITL observation per gap; TTFT, E2E only where known.
	if c := counts["goodput_inter_token_latency_seconds"]; c != 3 {
		t.Fatalf("itl observations %d, want one per gap (3)", c)
	}
	if c := counts["goodput_time_to_first_token_seconds"]; c != 1 {
		t.Fatalf("ttft observations %d, want 1 (the other request has none)", c)
	}
	if c := counts["goodput_input_tokens"]; c != 1 {
		t.Fatalf("isl observations %d", c)
	}
}

// Streamed requests are counted by how their OSL compares with their token
// events, and those with a multi-token event apart.
func TestMetricsTokenEvents(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), NewLabeler(NewLabelSet([]string{"acme"}, 0), NewLabelSet(nil, 0)))
	rec := func(osl, events int, src meter.UsageSource, tpe ...int) {
		var r meter.Record
		r.Reset()
		r.Tenant, r.Model, r.Route, r.Stream, r.Status, r.UpstreamStatus = "acme", "llama", "chat", true, 200, 200
		r.OSL, r.Events, r.UsageSource, r.TokensPerEvent = osl, events, src, tpe
		m.Begin(&r)
		m.Record(&r)
	}
	rec(10, 11, meter.UsageUpstream)           // below: a role chunk
	rec(10, 11, meter.UsageUpstream)           // below
	rec(10, 6, meter.UsageUpstream)            // above
	rec(3, 3, meter.UsageContinuous, 0, 2, 1)  // equal, with an event of 2 tokens
	rec(4, 4, meter.UsageUpstream)             // equal
	rec(4, 5, meter.UsageEstimate)             // estimated: not compared
	rec(meter.Unknown, 5, meter.UsageNone)     // no count
	rec(5, meter.Unknown, meter.UsageUpstream) // not a stream
	for _, c := range []struct {
		label string
		want  float64
	}{{"equal", 2}, {"above", 1}, {"below", 2}} {
		if got := testutil.ToFloat64(m.evTokens.WithLabelValues("acme", "llama", "chat", c.label)); got != c.want {
			t.Errorf("osl_vs_events=%s: %v, want %v", c.label, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.multiTok.WithLabelValues("acme", "llama", "chat")); got != 2 {
		t.Errorf("multi-token event requests %v, want 2", got)
	}
}

// The in-flight gauge returns to 0 for the label it was raised under, even
// when a reload changes the tenant's label while the request runs (the
// issue: the end recomputed the label and decremented another child).
func TestInFlightGaugeReloadMidRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	tenants := NewLabelSet([]string{"acme"}, 0)
	m := NewMetrics(reg, NewLabeler(tenants, NewLabelSet(nil, 0)))
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = "acme", "llama", "chat", 200, 200
	m.Begin(&rec)
	tenants.SetConfigured([]string{"beta"}) // acme removed by a reload
	m.Begin(&rec)                           // a second Begin (a sink called twice) counts nothing
	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("acme")); got != 1 {
		t.Fatalf("in flight during the request %v", got)
	}
	m.Record(&rec)
	for _, l := range []string{"acme", Other} {
		if got := testutil.ToFloat64(m.inFlight.WithLabelValues(l)); got != 0 {
			t.Errorf("in flight{tenant=%s} after the end: %v", l, got)
		}
	}
	// The counters use the label the request began with, as the gauge
	// and the request log do, though acme is no longer configured.
	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", "llama", "chat", "ok")); got != 1 {
		t.Fatalf("requests{tenant=acme} %v", got)
	}
}

// Requests that are not inference (a model listing, a health check, a
// request refused for want of a valid key) are counted, but stay out of the
// latency and token histograms.
func TestMetricsNonInferenceNotInLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0)))
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Route, rec.Status = "acme", "other", 200
	rec.E2E, rec.Overhead, rec.WriteDelay = time.Millisecond, time.Microsecond, time.Microsecond
	m.Begin(&rec)
	m.Record(&rec)
	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", None, "other", "ok")); got != 1 {
		t.Fatalf("requests %v", got)
	}
	var unauth meter.Record
	unauth.Reset()
	unauth.Route, unauth.Status, unauth.Outcome = "chat", 401, meter.OutcomeUnauthorized
	unauth.E2E, unauth.Overhead = 79*time.Microsecond, time.Microsecond
	m.Begin(&unauth)
	m.Record(&unauth)
	if got := testutil.ToFloat64(m.requests.WithLabelValues(Other, None, "chat", "unauthorized")); got != 1 {
		t.Fatalf("unauthorized requests %v", got)
	}
	// A background request's acknowledgement: counted with the other
	// routes (goodput report counts a route's requests as its arrivals).
	var deferred meter.Record
	deferred.Reset()
	deferred.Tenant, deferred.Route, deferred.Status, deferred.Deferred = "acme", "responses", 200, true
	deferred.E2E, deferred.Overhead = time.Millisecond, time.Microsecond
	m.Begin(&deferred)
	m.Record(&deferred)
	if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", None, "other", "ok")); got != 2 {
		t.Fatalf("requests of route other %v, want the pass-through and the acknowledgement", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			if h := mm.GetHistogram(); h != nil && h.GetSampleCount() > 0 {
				t.Errorf("%s observed a request that is not inference", mf.GetName())
			}
		}
	}
}

// A gap observed while the stream runs (proxy.GapSink) lands in the series
// of the request's labels, the same its end uses.
func TestMetricsGapUsesTheRequestsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0)))
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = "acme", "llama", "chat", 200, 200
	rec.ITL = []time.Duration{time.Millisecond}
	m.Begin(&rec)
	m.Gap(&rec, 2*time.Millisecond)
	m.Record(&rec)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "goodput_inter_token_latency_seconds" {
			continue
		}
		if n := len(mf.GetMetric()); n != 1 {
			t.Fatalf("%d ITL series, want the request's one", n)
		}
		if c := mf.GetMetric()[0].GetHistogram().GetSampleCount(); c != 2 {
			t.Fatalf("%d gaps observed", c)
		}
	}
}

// Sinks only read: exporting a judged record leaves every field of it as
// the judge wrote it (the JSON line is the record's whole content).
func TestSinksOnlyRead(t *testing.T) {
	lab := NewLabeler(NewLabelSet([]string{"acme"}, 0), NewLabelSet(nil, 0))
	m := NewMetrics(prometheus.NewRegistry(), lab)
	var buf bytes.Buffer
	l := NewRequestLog(&buf, nil, time.Hour, func(string, ...any) {})
	defer l.Close()
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = "acme", "llama", "chat", 200, 200
	rec.Stream, rec.Outcome, rec.UsageSource = true, meter.OutcomeOK, meter.UsageUpstream
	rec.TTFT, rec.TTFTContent, rec.E2E, rec.TPOT = 50*time.Millisecond, 55*time.Millisecond, 90*time.Millisecond, 13*time.Millisecond
	rec.ITL = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond}
	rec.MaxITL, rec.Events, rec.ISL, rec.OSL = 25*time.Millisecond, 4, 12, 4
	rec.SLO, rec.Judged, rec.Good, rec.MissReasons = "interactive", true, false, []string{"ttft"}
	for _, s := range []interface{ Begin(*meter.Record) }{m, l} {
		s.Begin(&rec)
	}
	before := string(rec.AppendJSON(nil))
	m.Record(&rec)
	if after := string(rec.AppendJSON(nil)); after != before {
		t.Fatalf("the metrics sink changed the record:\n%s\n%s", before, after)
	}
	l.Record(&rec)
	if after := string(rec.AppendJSON(nil)); after != before {
		t.Fatalf("the request log changed the record:\n%s\n%s", before, after)
	}
}

// A scrape stays small whatever model names clients send: a 1 MiB model
// is counted under "other" (the issue: every scrape carried it, in every
// series, and grew from 89 KB to 220 MB); a 200-byte one keeps its name.
func TestMetricsLongModelIsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0)))
	huge, long200 := strings.Repeat("m", 1<<20), strings.Repeat("x", 200)
	for _, model := range []string{huge, long200} {
		var rec meter.Record
		rec.Reset()
		rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = "acme", model, "chat", 200, 200
		rec.TTFT, rec.E2E, rec.ISL, rec.OSL = 50*time.Millisecond, 90*time.Millisecond, 12, 4
		m.Begin(&rec)
		m.Record(&rec)
	}
	rr := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	scrape := rr.Body
	// About 80 KB: every histogram bucket line carries the 200-byte name.
	if scrape.Len() > 256<<10 || strings.Contains(scrape.String(), huge[:MaxLabelBytes+1]) {
		t.Fatalf("a scrape of two requests is %d bytes", scrape.Len())
	}
	for _, model := range []string{Other, long200} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("acme", model, "chat", "ok")); got != 1 {
			t.Errorf("requests{model=%.20q…} = %v, want 1", model, got)
		}
	}
}

// A client naming 33 tenants and 33 models (header tenants, an engine that
// ignores the model) made one set of about 210 series per pair: 1,089
// pairs on a route. With the pairs bounded (4 × max_values by default),
// the series are at most those of 128 pairs and one pair with "other" per
// tenant.
func TestMetricsSeriesBoundedByPairs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabeler(NewLabelSet(nil, 0), NewLabelSet(nil, 0)))
	send := func(tenant, model string) {
		var rec meter.Record
		rec.Reset()
		rec.Tenant, rec.Model, rec.Route, rec.Status, rec.UpstreamStatus = tenant, model, "chat", 200, 200
		rec.TTFT, rec.E2E = 50*time.Millisecond, 90*time.Millisecond
		rec.ITL = []time.Duration{5 * time.Millisecond}
		rec.ISL, rec.OSL = 12, 2
		m.Begin(&rec)
		m.Record(&rec)
	}
	series := func() (n int, pairs map[[2]string]bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		pairs = map[[2]string]bool{}
		for _, mf := range mfs {
			for _, mm := range mf.GetMetric() {
				var p [2]string
				for _, lp := range mm.GetLabel() {
					switch lp.GetName() {
					case "tenant":
						p[0] = lp.GetValue()
					case "model":
						p[1] = lp.GetValue()
					}
				}
				if p[1] == "" {
					continue // not a series of a pair
				}
				pairs[p] = true
				n++
			}
		}
		return n, pairs
	}
	send("t0", "m0")
	perPair, _ := series()
	for i := 0; i < 33; i++ {
		for j := 0; j < 33; j++ {
			send(fmt.Sprintf("t%d", i), fmt.Sprintf("m%d", j))
		}
	}
	n, pairs := series()
	others := 0
	for p := range pairs {
		if p[1] == Other {
			others++
		}
	}
	if own := len(pairs) - others; own > 4*32 || others > 33 {
		t.Fatalf("%d pairs of their own and %d with model other, want at most 128 and 33", own, others)
	}
	if n > len(pairs)*perPair {
		t.Fatalf("%d series for %d pairs of %d series each", n, len(pairs), perPair)
	}
	t.Logf("%d series (%d a pair), %d pairs", n, perPair, len(pairs))
}
