package compare

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/goodput/goodput/compare/comparetest"
	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/internal/promtest"
)

// The Prometheus source against a real Prometheus scraping the gateway's
// own metrics (export.Metrics) for RAG-shaped records.
func TestRealPrometheusSource(t *testing.T) {
	promtest.Binary(t) // skips without the binary, except in CI
	reg := prometheus.NewRegistry()
	m := export.NewMetrics(reg, export.NewLabeler(export.NewLabelSet([]string{"acme"}, 0), export.NewLabelSet([]string{"llama-3-8b"}, 0)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	go srv.Serve(ln)
	defer srv.Close()
	prom := promtest.Start(t, promtest.Config{Jobs: map[string][]string{"goodput": {ln.Addr().String()}}, Interval: time.Second})
	start := time.Now()

	reqs := comparetest.Draw(comparetest.RAG, 1)
	record := func(rs []comparetest.Request) {
		for _, r := range rs {
			rec := comparetest.Record(r, "acme", "llama-3-8b")
			m.Begin(rec)
			m.Record(rec)
		}
	}
	ctx := context.Background()
	// Wait until Prometheus holds the request counter at n: its own state
	// is the barrier (bounded: a scrape a second).
	seen := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			v, _, err := prom.API.Query(ctx, `sum(goodput_requests_total{tenant="acme"})`, time.Now())
			if err == nil {
				if vec, ok := v.(model.Vector); ok && len(vec) == 1 && float64(vec[0].Value) == n {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus did not see %v requests in 30s (last answer %v, %v)", n, v, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// One request, scraped, then the rest: a series born in the window
	// counts from zero, one seen before counts its growth.
	record(reqs[:1])
	seen(1)
	record(reqs[1:])
	seen(float64(len(reqs)))

	rl, err := ReadReal(ctx, prom.URL, RealOptions{Filter: Filter{Tenant: "acme"}, Window: time.Since(start) + 2*time.Second, Step: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("from Prometheus: %d completed, ISL p50 %v, OSL p50 %v, TTFT p50 %v ms", rl.Requests, rl.ISL.Quantile(0.5), rl.OSL.Quantile(0.5), rl.TTFT.Quantile(0.5))
	if rl.Requests != len(reqs) || rl.ISL.Count() != Num(len(reqs)) || rl.ISL.Form() != "histogram" {
		t.Errorf("%d completed, ISL count %v (%s); want %d, exact counter increases", rl.Requests, rl.ISL.Count(), rl.ISL.Form(), len(reqs))
	}
	if p := float64(rl.ISL.Quantile(0.5)); p < 2048 || p > 4096 {
		t.Errorf("ISL p50 %v, want within the 2048–4096 bucket", p)
	}
	// The arrivals here are a test's, not traffic: only the distributions
	// are checked.
	tol := Tolerances{MaxKS: 0.2}
	chat, err := ReadBench("chat.json", comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 2), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(chat, rl, SLO{}, tol); r.Pass || r.ISLKS.Method != "buckets" {
		t.Errorf("chat vs RAG from Prometheus: pass %v, KS %+v", r.Pass, r.ISLKS)
	}
	replay, err := ReadBench("replay.json", comparetest.BenchJSON(comparetest.Draw(comparetest.RAG, 3), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(replay, rl, SLO{}, tol); !r.Pass {
		t.Errorf("replay vs RAG from Prometheus failed:\n%s", text(t, r))
	}
}
