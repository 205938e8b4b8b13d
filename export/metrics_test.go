package export

import (
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, NewLabelSet([]string{"acme"}, 0), NewLabelSet(nil, 0))
	var rec meter.Record
	rec.Reset()
	rec.Tenant, rec.Model, rec.Route = "acme", "llama", "chat"
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
