package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/compare/comparetest"
	"github.com/goodput/goodput/slo"
)

// bucketCounts counts values per bucket of inclusive upper bounds, with
// one more bucket above the last bound.
func bucketCounts(bounds []float64, values []float64) []float64 {
	out := make([]float64, len(bounds)+1)
	for _, v := range values {
		out[sort.SearchFloat64s(bounds, v)]++
	}
	return out
}

// profileOf builds the profile object of drawn requests as the gateway
// would serve it: histograms on the profile's token buckets, percentiles,
// arrival rate, gamma shape and concurrency.
func profileOf(reqs []comparetest.Request) *slo.WorkProfile {
	bounds := make([]float64, len(slo.TokenBucketBounds))
	for i, b := range slo.TokenBucketBounds {
		bounds[i] = float64(b)
	}
	var isl, osl, starts, ends []float64
	for _, r := range reqs {
		isl = append(isl, float64(r.ISL))
		osl = append(osl, float64(r.OSL))
		starts = append(starts, r.Start)
		ends = append(ends, r.Start+r.E2E())
	}
	dist := func(xs []float64) slo.TokenDist {
		d := sampleDist(append([]float64(nil), xs...))
		td := slo.TokenDist{Count: uint64(len(xs)), Mean: d.Mean(), Min: Num(d.Samples[0]), Max: Num(d.Samples[len(xs)-1]),
			P50: d.Quantile(0.5), P90: d.Quantile(0.9), P95: d.Quantile(0.95), P99: d.Quantile(0.99)}
		for _, c := range bucketCounts(bounds, xs) {
			td.Buckets = append(td.Buckets, uint64(c))
		}
		return td
	}
	s := newSide("", "")
	s.setArrivals(starts, "")
	s.setConcurrency(starts, ends, "")
	return &slo.WorkProfile{
		Requests: uint64(len(reqs)), Measured: uint64(len(reqs)), Arrivals: uint64(len(reqs)),
		ArrivalRate:  s.ArrivalRate,
		InterArrival: slo.InterArrival{Count: uint64(len(reqs) - 1), GammaShape: s.Burstiness},
		ISL:          dist(isl), OSL: dist(osl),
		Concurrency: slo.Concurrency{Mean: s.ConcMean, Peak: int(s.ConcPeak)},
	}
}

func profileJSON(t *testing.T) []byte {
	t.Helper()
	p := slo.ProfileSnapshot{
		Format: slo.ProfileFormat, Version: slo.ProfileVersion, Window: "1h", WindowSeconds: 3570,
		TokenBuckets: slo.TokenBucketBounds,
		Tenants: []slo.TenantProfile{
			{Tenant: "acme", Profile: profileOf(comparetest.Draw(comparetest.RAG, 1)),
				Models: []slo.ModelProfile{{Model: "llama-3-8b", Profile: profileOf(comparetest.Draw(comparetest.RAG, 4))}}},
			{Tenant: "globex", Profile: profileOf(comparetest.Draw(comparetest.Chat, 5))},
		},
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProfileSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, profileJSON(t), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ReadReal(ctx, path, RealOptions{}); err == nil || !strings.Contains(err.Error(), "2 tenants (acme, globex): choose one with --tenant") {
		t.Errorf("two tenants, no --tenant: %v", err)
	}
	if _, err := ReadReal(ctx, path, RealOptions{Filter: Filter{Tenant: "acme", Model: "gpt"}}); err == nil || !strings.Contains(err.Error(), `no model "gpt"`) {
		t.Errorf("unknown model: %v", err)
	}
	rl, err := ReadReal(ctx, path, RealOptions{Filter: Filter{Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if rl.Kind != KindProfile || rl.Requests != 400 || rl.ISL.Form() != "histogram" || !known(rl.Burstiness) || !known(rl.ConcMean) {
		t.Fatalf("profile side: %+v", rl)
	}
	syn, err := ReadBench("chat.json", comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 2), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tol := DefaultTolerances()
	tol.MaxAttainmentDiff = 0.1
	r := Compare(syn, rl, SLO{TTFT: 100}, tol)
	if r.Pass || r.ISLKS.Method != "buckets" || float64(r.ISLKS.D) < 0.99 {
		t.Errorf("chat vs RAG profile: pass %v, ISL KS %+v", r.Pass, r.ISLKS)
	}
	if !hasFinding(r, "prefill is understated") || !hasFinding(r, "queueing is understated") {
		t.Errorf("findings %q", r.Findings)
	}
	if c := check(t, r, "attainment difference"); c.Skipped == "" {
		t.Errorf("a profile has no latencies, yet attainment was checked: %+v", c)
	}
	if c := check(t, r, "ISL KS"); !strings.Contains(c.Detail, "lower bound") {
		t.Errorf("bucketed KS not called a lower bound: %+v", c)
	}

	replay, err := ReadBench("replay.json", comparetest.BenchJSON(comparetest.Draw(comparetest.RAG, 3), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The model's series, drawn with another seed.
	m, err := ReadReal(ctx, path, RealOptions{Filter: Filter{Tenant: "acme", Model: "llama-3-8b"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(replay, m, SLO{}, DefaultTolerances()); !r.Pass {
		t.Errorf("replay vs the profile of the same distribution failed:\n%s", text(t, r))
	}

	// The same profile from a gateway's admin listener.
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.String())
		mu.Unlock()
		if r.URL.Path != "/admin/api/profile" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(profileJSON(t))
	}))
	defer srv.Close()
	u, err := ReadReal(ctx, srv.URL+"/admin/api/profile", RealOptions{Filter: Filter{Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if u.Kind != KindProfile || u.Requests != 400 || len(asked) != 1 || !strings.Contains(asked[0], "window=1h") || !strings.Contains(asked[0], "tenant=acme") {
		t.Errorf("profile URL: kind %q, %d requests, asked %q", u.Kind, u.Requests, asked)
	}
	if _, err := ReadReal(ctx, srv.URL+"/admin/api/profile", RealOptions{Window: 2 * time.Hour}); err == nil || !strings.Contains(err.Error(), "5m, 1h or 24h") {
		t.Errorf("--window 2h on a profile: %v", err)
	}
	if _, err := ReadReal(ctx, srv.URL+"/x/admin/api/profile", RealOptions{}); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("404: %v", err)
	}
	// The URL's own window holds unless --window is given (it was
	// replaced by the default 1h, silently).
	asked = nil
	if _, err := ReadReal(ctx, srv.URL+"/admin/api/profile?window=5m", RealOptions{Filter: Filter{Tenant: "acme"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReal(ctx, srv.URL+"/admin/api/profile?window=5m", RealOptions{Filter: Filter{Tenant: "acme"}, Window: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || !strings.Contains(asked[0], "window=5m") || !strings.Contains(asked[1], "window=24h") {
		t.Errorf("asked %q: want the URL's 5m, then --window's 24h", asked)
	}
	if _, err := ReadReal(ctx, srv.URL+"/admin/api/profile", RealOptions{Filter: Filter{RequestIDPrefix: "bench-"}}); err == nil || !strings.Contains(err.Error(), "request log") {
		t.Errorf("a request id prefix on a profile: %v", err)
	}
}

// A request log's records of one benchmark run are selected by their
// request ids' prefix, less the run's calibration and warm-up requests:
// other traffic in the same log (a curl before the run) halved the rate.
func TestRequestLogRequestIDPrefix(t *testing.T) {
	rec := func(id string, sec int) string {
		return fmt.Sprintf(`{"time":"2026-01-05T10:00:%02dZ","request_id":%q,"tenant":"acme","model":"m","route":"chat","stream":true,"outcome":"ok","isl":10,"osl":5,"ttft_ms":100,"e2e_ms":180,"tpot_ms":20,"itl_ms":[20,20,20,20]}`, sec, id)
	}
	log := strings.Join([]string{
		rec("curl-1", 0), rec("run1-calibrate-0", 10), rec("run1-warmup-0", 11),
		rec("run1-0", 20), rec("run1-1", 21), rec("run1-2", 22), rec("run2-0", 30),
	}, "\n")
	// A prefix several runs share still leaves their calibration out.
	if s, err := ReadRequestLog("log", strings.NewReader(log), Filter{RequestIDPrefix: "run"}); err != nil {
		t.Fatal(err)
	} else if s.Requests != 4 {
		t.Errorf("prefix run: %d requests, want the 4 measured ones of both runs", s.Requests)
	}
	// A profile (in any layout) has no request ids: the prefix is refused,
	// not ignored.
	if _, err := ReadProfile("profile.json", profileJSON(t), Filter{RequestIDPrefix: "run1-"}); err == nil {
		t.Error("a request id prefix on a profile was ignored")
	}
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{Tenant: "acme", RequestIDPrefix: "run1-"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 3 || float64(s.ArrivalRate) != 1 {
		t.Errorf("%d requests at %v req/s, want run1's 3 measured ones, 1 a second", s.Requests, s.ArrivalRate)
	}
}

// The bucket bounds of the gateway's histograms (export/metrics.go).
var (
	promTokBounds = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}
	promTTFTB     = []float64{.005, .01, .02, .03, .04, .05, .06, .07, .08, .09, .1, .125, .15, .2, .25, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60}
	promITLB      = []float64{.001, .002, .003, .004, .005, .006, .007, .008, .009, .01, .0125, .015, .02, .025, .03, .04, .05, .06, .075, .1, .15, .2, .3, .5, .75, 1, 2.5, 5}
	promE2EB      = []float64{.05, .1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600}
)

// fakePrometheus answers the query API with figures of drawn requests, as
// a Prometheus scraping a gateway that served them would.
type fakePrometheus struct {
	reqs          []comparetest.Request
	failed        int
	neverInFlight bool // the in-flight samples all saw 0 (a step longer than the run)
	// poison, when set, replaces every value of the answers to the
	// queries it matches (path and query) with poisonV, as a broken or
	// hostile Prometheus would answer.
	poison  func(path, query string) bool
	poisonV string
	mu      sync.Mutex
	queries []string
}

func sample(labels map[string]string, v float64) map[string]any {
	return map[string]any{"metric": labels, "value": []any{1767607200.0, fmt.Sprint(v)}}
}

func (f *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.FormValue("query")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	answer := func(typ string, result []any) {
		if f.poison != nil && f.poison(r.URL.Path, q) {
			for _, x := range result {
				x := x.(map[string]any)
				if v, ok := x["value"].([]any); ok {
					v[1] = f.poisonV
				}
				if vs, ok := x["values"].([]any); ok {
					for _, v := range vs {
						v.([]any)[1] = f.poisonV
					}
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": typ, "result": result}})
	}
	var isl, osl, ttft, tpot, itl, e2e, starts []float64
	for _, rq := range f.reqs {
		isl, osl = append(isl, float64(rq.ISL)), append(osl, float64(rq.OSL))
		ttft, e2e = append(ttft, rq.TTFT), append(e2e, rq.E2E())
		tpot = append(tpot, (rq.E2E()-rq.TTFT)/float64(rq.OSL-1))
		itl = append(itl, rq.Gaps...)
		starts = append(starts, rq.Start)
	}
	buckets := func(bounds, xs []float64) []any {
		var out []any
		c := 0.0
		counts := bucketCounts(bounds, xs)
		for i, b := range bounds {
			c += counts[i]
			out = append(out, sample(map[string]string{"le": fmt.Sprint(b)}, c))
		}
		return append(out, sample(map[string]string{"le": "+Inf"}, float64(len(xs))))
	}
	switch {
	case r.URL.Path == "/api/v1/query_range":
		// The request counter, sampled every step from the first arrival.
		start, _ := time.Parse(time.RFC3339Nano, r.FormValue("start"))
		if start.IsZero() {
			var sec float64
			fmt.Sscan(r.FormValue("start"), &sec)
			start = time.Unix(0, int64(sec*1e9))
		}
		var step float64
		fmt.Sscan(strings.TrimSuffix(r.FormValue("step"), "s"), &step)
		var values []any
		for i := 0; ; i++ {
			at := start.Add(time.Duration(float64(i) * step * 1e9))
			if at.After(comparetest.Epoch.Add(time.Duration(starts[len(starts)-1] * 1e9))) {
				break
			}
			n := sort.SearchFloat64s(starts, at.Sub(comparetest.Epoch).Seconds())
			values = append(values, []any{float64(at.UnixNano()) / 1e9, fmt.Sprint(n)})
		}
		answer("matrix", []any{map[string]any{"metric": map[string]string{}, "values": values}})
	case strings.Contains(q, "sum by (outcome)"):
		answer("vector", []any{sample(map[string]string{"outcome": "ok"}, float64(len(f.reqs))), sample(map[string]string{"outcome": "upstream_error"}, float64(f.failed))})
	case strings.Contains(q, promISL+"_bucket"):
		answer("vector", buckets(promTokBounds, isl))
	case strings.Contains(q, promOSL+"_bucket"):
		answer("vector", buckets(promTokBounds, osl))
	case strings.Contains(q, promTTFT+"_bucket"):
		answer("vector", buckets(promTTFTB, ttft))
	case strings.Contains(q, promTPOT+"_bucket"):
		answer("vector", buckets(promITLB, tpot))
	case strings.Contains(q, promITL+"_bucket"):
		answer("vector", buckets(promITLB, itl))
	case strings.Contains(q, promE2E+"_bucket"):
		answer("vector", buckets(promE2EB, e2e))
	case strings.Contains(q, promInFlight) && f.neverInFlight:
		answer("vector", []any{sample(map[string]string{"q": "mean"}, 0), sample(map[string]string{"q": "peak"}, 0)})
	case strings.Contains(q, promInFlight):
		answer("vector", []any{sample(map[string]string{"q": "mean"}, 6.5), sample(map[string]string{"q": "peak"}, 17)})
	default:
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data", "error": "unexpected query " + q})
	}
}

func TestPrometheusSource(t *testing.T) {
	reqs := comparetest.Draw(comparetest.RAG, 1)
	fp := &fakePrometheus{reqs: reqs, failed: 4}
	srv := httptest.NewServer(fp)
	defer srv.Close()
	span := reqs[len(reqs)-1].Start
	window := time.Duration(span * 1e9).Round(time.Second)
	now := comparetest.Epoch.Add(window)
	rl, err := ReadReal(context.Background(), srv.URL, RealOptions{Filter: Filter{Tenant: "acme"}, Window: window, Step: 10 * time.Second, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if rl.Kind != KindPrometheus || rl.Requests != 400 || float64(rl.Failed) != 4 {
		t.Errorf("side: kind %q, %d completed, %v failed", rl.Kind, rl.Requests, rl.Failed)
	}
	if want := 404 / window.Seconds(); math.Abs(float64(rl.ArrivalRate)-want) > 1e-9 {
		t.Errorf("rate %v, want %v", rl.ArrivalRate, want)
	}
	if float64(rl.ConcMean) != 6.5 || float64(rl.ConcPeak) != 17 {
		t.Errorf("concurrency %v / %v", rl.ConcMean, rl.ConcPeak)
	}
	if k := float64(rl.Burstiness); !(k > 0 && k < 0.7) {
		t.Errorf("burstiness k = %v from per-step counts of arrivals drawn with k 0.3: want well below 1", k)
	}
	if p50 := float64(rl.ISL.Quantile(0.5)); p50 < 2048 || p50 > 4096 {
		t.Errorf("ISL p50 from buckets = %v, want within the 2048–4096 bucket", p50)
	}
	for _, q := range fp.queries {
		if strings.Contains(q, "goodput_") && !strings.Contains(q, `tenant="acme"`) {
			t.Errorf("query without the tenant: %s", q)
		}
	}

	syn, err := ReadBench("chat.json", comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 2), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := Compare(syn, rl, SLO{TTFT: 100, TPOT: 25}, DefaultTolerances())
	if r.Pass || r.ISLKS.Method != "buckets" || float64(r.ISLKS.D) < 0.99 || !hasFinding(r, "prefill is understated") {
		t.Errorf("chat vs RAG fleet: pass %v, KS %+v, findings %q", r.Pass, r.ISLKS, r.Findings)
	}
	// From histograms the attainment is a range that holds the exact one.
	exact := Attainment{}
	if lg, err := ReadRequestLog("log", strings.NewReader(string(comparetest.RequestLog(reqs, "acme", "m"))), Filter{}); err == nil {
		exact = lg.attainment(SLO{TTFT: 100, TPOT: 25}, false)
	} else {
		t.Fatal(err)
	}
	a := r.AttainReal
	if !(a.Low <= exact.Low+1e-9 && exact.Low <= a.High+1e-9) {
		t.Errorf("attainment from histograms %+v does not hold the exact %v", a, exact.Low)
	}
	replay, err := ReadBench("replay.json", comparetest.BenchJSON(comparetest.Draw(comparetest.RAG, 3), nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(replay, rl, SLO{}, DefaultTolerances()); !r.Pass {
		t.Errorf("replay vs the fleet's histograms failed:\n%s", text(t, r))
	}

	// Not a Prometheus server.
	html := httptest.NewServer(http.NotFoundHandler())
	defer html.Close()
	if _, err := ReadReal(context.Background(), html.URL, RealOptions{}); err == nil || !strings.Contains(err.Error(), "Prometheus") {
		t.Errorf("a server that is not Prometheus: %v", err)
	}
	// No traffic: a clear error, not a comparison with nothing.
	empty := httptest.NewServer(&fakePrometheus{})
	defer empty.Close()
	if _, err := ReadReal(context.Background(), empty.URL, RealOptions{}); err == nil || !strings.Contains(err.Error(), "no goodput_requests_total") {
		t.Errorf("no traffic: %v", err)
	}
}

// A run shorter than the sampling step: every sample of the in-flight gauge
// saw 0 though requests came. Concurrency is unknown, with a note saying
// why, not 0 (which made a false finding against the benchmark's).
func TestPrometheusConcurrencyNeverSampled(t *testing.T) {
	reqs := comparetest.Draw(comparetest.RAG, 1)
	srv := httptest.NewServer(&fakePrometheus{reqs: reqs, neverInFlight: true})
	defer srv.Close()
	window := time.Duration(reqs[len(reqs)-1].Start * 1e9).Round(time.Second)
	rl, err := ReadReal(context.Background(), srv.URL, RealOptions{Filter: Filter{Tenant: "acme"}, Window: window, Step: time.Minute, Now: comparetest.Epoch.Add(window)})
	if err != nil {
		t.Fatal(err)
	}
	if known(rl.ConcMean) || known(rl.ConcPeak) {
		t.Errorf("concurrency %v / %v, want unknown", rl.ConcMean, rl.ConcPeak)
	}
	if !strings.Contains(strings.Join(rl.Notes, " "), "set --prom-step to the scrape interval") {
		t.Errorf("notes %q", rl.Notes)
	}
}

// A background request's acknowledgement (deferred) is not an inference
// request: the comparison leaves it out, as the gateway's judge does.
func TestRequestLogSkipsDeferred(t *testing.T) {
	log := `{"time":"2026-01-05T10:00:00Z","request_id":"a","tenant":"acme","model":"m","route":"responses","stream":false,"outcome":"ok","isl":10,"osl":5,"e2e_ms":180}
{"time":"2026-01-05T10:00:01Z","request_id":"b","tenant":"acme","model":"m","route":"responses","stream":false,"deferred":true,"outcome":"ok","e2e_ms":0.3}`
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 1 {
		t.Errorf("%d requests, want 1: the acknowledgement is not one", s.Requests)
	}
}

// Ollama's model loads and unloads (model_op) are no inference requests
// either: a load's seconds are not a latency of the workload.
func TestRequestLogSkipsModelLoads(t *testing.T) {
	log := `{"time":"2026-01-05T10:00:00Z","request_id":"a","tenant":"acme","model":"llama3","route":"ollama_generate","stream":true,"outcome":"ok","isl":10,"osl":5,"ttft_ms":40,"e2e_ms":180}
{"time":"2026-01-05T10:00:01Z","request_id":"b","tenant":"acme","model":"llama3","route":"ollama_generate","stream":true,"model_op":"load","outcome":"ok","e2e_ms":4200}
{"time":"2026-01-05T10:00:02Z","request_id":"c","tenant":"acme","model":"llama3","route":"ollama_chat","stream":true,"model_op":"unload","outcome":"ok","e2e_ms":3}`
	s, err := ReadRequestLog("log", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 1 {
		t.Errorf("%d requests, want 1: a load or an unload is not one", s.Requests)
	}
}

// A profile's arrival rate is taken from its gaps (1 / the mean gap: the
// rate from the first arrival to the last, as a request log's and a
// bench's are), not its arrival_rate_per_second, which counts the window's
// idle time too: 300 requests sent at 50 a second 20 s after the gateway
// started had 8.67 a second over the window, and compare judged a bench of
// the same traffic 6 times too fast.
func TestProfileRateFromItsGaps(t *testing.T) {
	wp := profileOf(comparetest.Draw(comparetest.Chat, 5))
	wp.Arrivals, wp.ArrivalRate = 300, 300/34.6
	wp.InterArrival = slo.InterArrival{Count: 299, Mean: 0.02, StdDev: 0.02, CV: 1, GammaShape: 1}
	p := slo.ProfileSnapshot{
		Format: slo.ProfileFormat, Version: slo.ProfileVersion, Window: "5m", WindowSeconds: 34.6,
		TokenBuckets: slo.TokenBucketBounds,
		Tenants:      []slo.TenantProfile{{Tenant: "acme", Profile: wp}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadProfile("profile.json", b, Filter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(s.ArrivalRate)-50) > 1e-9 || !strings.Contains(s.RateFrom, "mean gap") {
		t.Fatalf("rate %v from %q, want 50 from the mean gap", s.ArrivalRate, s.RateFrom)
	}
	// With no gap, the window's rate is all there is.
	wp.Arrivals, wp.ArrivalRate, wp.InterArrival = 1, 1/34.6, slo.InterArrival{Mean: slo.Num(math.NaN())}
	b, _ = json.Marshal(p)
	if s, err = ReadProfile("profile.json", b, Filter{Tenant: "acme"}); err != nil || math.Abs(float64(s.ArrivalRate)-1/34.6) > 1e-9 {
		t.Fatalf("one arrival: %v, %v", s.ArrivalRate, err)
	}
}

// A profile that bench --profile refuses (bucket bounds that do not
// increase, a joint cell out of range, histograms of another length) is
// refused here too, and so is one with figures no gateway writes: compare
// read them, and printed an ISL mean of -100 or 1e+308, a burstiness of -1.
func TestProfileFiguresChecked(t *testing.T) {
	var base map[string]any
	if err := json.Unmarshal(profileJSON(t), &base); err != nil {
		t.Fatal(err)
	}
	acme := func(doc map[string]any) map[string]any {
		for _, ten := range doc["tenants"].([]any) {
			if tm := ten.(map[string]any); tm["tenant"] == "acme" {
				return tm["profile"].(map[string]any)
			}
		}
		t.Fatal("no tenant acme")
		return nil
	}
	for _, c := range []struct {
		name string
		edit func(doc, p map[string]any)
		want string
	}{
		{"bounds down", func(doc, p map[string]any) { doc["token_bucket_bounds"] = []any{16, 8, 4} }, "token_bucket_bounds are not increasing"},
		{"no bounds", func(doc, p map[string]any) { doc["token_bucket_bounds"] = []any{} }, "no token_bucket_bounds"},
		{"joint cell out of range", func(doc, p map[string]any) {
			p["isl_osl"] = []any{map[string]any{"isl_bucket": 99, "osl_bucket": -1, "count": 1}}
		}, "isl_osl cell (99, -1) out of range"},
		{"negative ISL", func(doc, p map[string]any) { p["isl"].(map[string]any)["mean"] = -100 }, "tenant acme: isl.mean is -100"},
		{"huge OSL", func(doc, p map[string]any) { p["osl"].(map[string]any)["p99"] = 1e308 }, "tenant acme: osl.p99 is 1e+308"},
		{"negative rate", func(doc, p map[string]any) { p["arrival_rate_per_second"] = -5 }, "arrival_rate_per_second is -5"},
		{"negative gamma", func(doc, p map[string]any) { p["inter_arrival"].(map[string]any)["gamma_shape"] = -1 }, "inter_arrival.gamma_shape is -1"},
		{"negative concurrency", func(doc, p map[string]any) { p["concurrency"].(map[string]any)["mean"] = -3 }, "concurrency.mean is -3"},
		{"negative window", func(doc, p map[string]any) { doc["window_seconds"] = -5 }, "window_seconds is -5"},
	} {
		var doc map[string]any
		b, _ := json.Marshal(base)
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		c.edit(doc, acme(doc))
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ReadProfile("p.json", data, Filter{Tenant: "acme"})
		var ie *InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want an input error with %q", c.name, err, c.want)
		}
	}
	if _, err := ReadProfile("p.json", profileJSON(t), Filter{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
}
