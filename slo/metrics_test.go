package slo

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// gather returns every sample of reg as "name{k=v,...}" → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(lv)
			key := mf.GetName() + "{" + strings.Join(lv, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// series names a sample as gather does: labels sorted.
func series(name string, labels ...string) string {
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

func TestMetricsCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cl := testClasses()
	k := Key{"acme", "llama", "interactive"}
	for _, rec := range []*meter.Record{
		stream(200*ms, 40*ms, 40*ms),               // good, 3 tokens
		stream(100*ms, 10*ms, 10*ms, 10*ms, 10*ms), // good, 5 tokens
		stream(600*ms, 60*ms, 60*ms),               // ttft + tpot, 3 tokens
		with(stream(700*ms), func(r *meter.Record) { r.Outcome = meter.OutcomeClientAbort }), // aborted + ttft, 1 token
		failed(meter.OutcomeRateLimited),
		failed(meter.OutcomeUpstreamError),
	} {
		m.Observe(k, rec, judge(rec, cl["interactive"]))
	}
	m.Observe(Key{"beta", "llama", "batch"}, stream(time.Second), judge(stream(time.Second), cl["batch"]))
	m.setObjective("acme", "interactive", 0.99)
	m.setObjective("beta", "batch", 0.9)

	got := gather(t, reg)
	acme := func(name string, extra ...string) string {
		return series(name, append([]string{"tenant=acme", "model=llama", "slo=interactive"}, extra...)...)
	}
	want := map[string]float64{
		acme("goodput_slo_requests_total", "result=good"):                                              2,
		acme("goodput_slo_requests_total", "result=miss"):                                              4,
		acme("goodput_slo_misses_total", "reason=ttft"):                                                2,
		acme("goodput_slo_misses_total", "reason=tpot"):                                                1,
		acme("goodput_slo_misses_total", "reason=aborted"):                                             1,
		acme("goodput_slo_misses_total", "reason=rate_limited"):                                        1,
		acme("goodput_slo_misses_total", "reason=error"):                                               1,
		acme("goodput_slo_misses_total", "reason=itl"):                                                 0, // pre-created
		acme("goodput_slo_misses_total", "reason=deadline"):                                            0,
		acme("goodput_slo_misses_total", "reason=e2e"):                                                 0,
		acme("goodput_good_output_tokens_total"):                                                       8,
		acme("goodput_output_tokens_total"):                                                            12,
		series("goodput_slo_requests_total", "tenant=beta", "model=llama", "slo=batch", "result=good"): 1,
		series("goodput_slo_requests_total", "tenant=beta", "model=llama", "slo=batch", "result=miss"): 0,
		series("goodput_slo_objective", "tenant=acme", "slo=interactive"):                              0.99,
		series("goodput_slo_objective", "tenant=beta", "slo=batch"):                                    0.9,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	// requests{result} adds up to every request: failures are never dropped.
	if got[acme("goodput_slo_requests_total", "result=good")]+got[acme("goodput_slo_requests_total", "result=miss")] != 6 {
		t.Error("requests do not add up to 6")
	}

	m.resetObjectives()
	if _, ok := gather(t, reg)[series("goodput_slo_objective", "tenant=beta", "slo=batch")]; ok {
		t.Error("ResetObjectives kept a gauge")
	}
	if _, err := newMetrics(reg); err == nil {
		t.Error("registering twice should fail")
	}
}

func TestMetricsObserveDoesNotAllocate(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"acme", "llama", "interactive"}
	rec := stream(600*ms, 60*ms, 60*ms)
	v := judge(rec, testClasses()["interactive"])
	m.Observe(k, rec, v)
	if n := testenv.AllocsPerRun(100, func() { m.Observe(k, rec, v) }); n != 0 {
		t.Fatalf("Metrics.Observe allocates %v", n)
	}
}

func BenchmarkMetricsObserve(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	k := Key{"acme", "llama", "interactive"}
	rec := stream(600*ms, 60*ms, 60*ms)
	v := judge(rec, testClasses()["interactive"])
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(k, rec, v)
	}
}
