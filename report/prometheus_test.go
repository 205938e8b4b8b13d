package report

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goodput/goodput/internal/testenv"
)

// ExactIncrease is checked by the real PromQL engine of promtool: a series
// present at both ends counts exactly, and so does one that went away during
// the range; a series created during the range counts from zero, and so
// does one whose replica restarted between the range's start and its next
// scrape; a series that reset during the range falls back to increase().
func TestExactIncreasePromQL(t *testing.T) {
	expr := "sum by (i) (" + ExactIncrease(selector("c", "acme"), promDuration(10*time.Minute)) + ")"
	test := fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # Present before the range: 5 at 10m, 12 at 20m. increase() would
      # extrapolate; the exact growth is 7.
      - series: 'c{tenant="acme",i="old"}'
        values: '0 1 2 3 4 5 5 5 5 5 5 6 7 8 9 10 11 12 12 12 12'
      # Created at 15m with 3 already counted (the first scrape after the
      # first requests): the exact growth is 6; increase() would drop the 3.
      - series: 'c{tenant="acme",i="new"}'
        values: '_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 3 4 5 6 6 6'
      # A replica that went away at 14m (its last value 8): exact growth 3.
      - series: 'c{tenant="acme",i="gone"}'
        values: '0 1 2 3 4 5 5 5 5 5 5 6 7 8 8 stale'
      # Reset during the range: increase() handles it.
      - series: 'c{tenant="acme",i="reset"}'
        values: '0 0 0 0 0 0 0 0 0 0 10 11 12 1 2 3 3 3 3 3 3'
      # A replica restarted between the period's start (2000 at 9m, the
      # value offset 10m finds) and the next scrape (295 at 11m), then grew
      # to 1195: counting from 0 after the drop, as increase() counts a
      # reset, the growth is 1195 (last minus start is -805).
      - series: 'c{tenant="acme",i="restart_at_start"}'
        values: '1100 1200 1300 1400 1500 1600 1700 1800 1900 2000 _ 295 395 495 595 695 795 895 995 1095 1195'
      # Another tenant: not selected.
      - series: 'c{tenant="globex",i="old"}'
        values: '0 100 200 300 400 500 600 700 800 900 1000 1100 1200 1300 1400 1500 1600 1700 1800 1900 2000'
    promql_expr_test:
      - expr: %q
        eval_time: 20m
        exp_samples:
          - labels: '{i="old"}'
            value: 7
          - labels: '{i="new"}'
            value: 6
          - labels: '{i="gone"}'
            value: 3
          - labels: '{i="reset"}'
            value: 5
          - labels: '{i="restart_at_start"}'
            value: 1195
      # A step of 1m across the restart (a point of the series, an hour):
      # 295 counted from 0, not 295 - 2000.
      - expr: %q
        eval_time: 11m
        exp_samples:
          - labels: '{}'
            value: 295
      # What increase() says of the new series: it loses most of the 3.
      - expr: 'sum by (i) (increase(c{tenant="acme",i="new"}[10m]))'
        eval_time: 20m
        exp_samples:
          - labels: '{i="new"}'
            value: 3.3000000000000003
`, expr, "sum("+ExactIncrease(`c{i="restart_at_start"}`, promDuration(time.Minute))+")")
	testenv.PromtoolTest(t, test)
}

// The series' queries, in the real PromQL engine: each point is the
// growth over the step before it, of the tenant's series only.
func TestSeriesQueriesPromQL(t *testing.T) {
	pq := promQueries{tenant: "acme", rng: promDuration(time.Minute)}
	testenv.PromtoolTest(t, fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'goodput_slo_requests_total{tenant="acme",model="m",slo="i",result="good"}'
        values: '0 10 20 30 40'
      - series: 'goodput_slo_requests_total{tenant="acme",model="m",slo="i",result="miss"}'
        values: '0 0 0 5 5'
      - series: 'goodput_slo_requests_total{tenant="globex",model="m",slo="i",result="miss"}'
        values: '0 100 200 300 400'
      - series: 'goodput_time_to_first_token_seconds_bucket{tenant="acme",model="m",le="0.5"}'
        values: '0 10 20 30 40'
      - series: 'goodput_time_to_first_token_seconds_bucket{tenant="acme",model="m",le="1"}'
        values: '0 10 20 40 50'
      - series: 'goodput_time_to_first_token_seconds_bucket{tenant="acme",model="m",le="+Inf"}'
        values: '0 10 20 40 50'
      - series: 'goodput_time_to_first_token_seconds_bucket{tenant="globex",model="m",le="0.5"}'
        values: '0 0 0 0 0'
      - series: 'goodput_time_to_first_token_seconds_bucket{tenant="globex",model="m",le="+Inf"}'
        values: '0 100 200 300 400'
    promql_expr_test:
      - expr: %q
        eval_time: 3m
        exp_samples:
          - labels: '{result="good"}'
            value: 10
          - labels: '{result="miss"}'
            value: 5
      # 3m: 10 of 20 at most 0.5 s, the rest at most 1 s.
      - expr: %q
        eval_time: 3m
        exp_samples:
          - labels: '{q="p50"}'
            value: 0.5
          - labels: '{q="p99"}'
            value: 0.99
      # 2m: every one at most 0.5 s.
      - expr: %q
        eval_time: 2m
        exp_samples:
          - labels: '{q="p50"}'
            value: 0.25
          - labels: '{q="p99"}'
            value: 0.495
`, pq.attainmentSeries(), pq.quantileSeries(metricTTFT), pq.quantileSeries(metricTTFT)))
}

func TestPromDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour:                          "3600000ms",
		1500 * time.Microsecond:            "2ms",
		0:                                  "1ms",
		28 * 24 * time.Hour:                "2419200000ms",
		time.Second + 400*time.Microsecond: "1000ms",
	} {
		if got := promDuration(d); got != want {
			t.Errorf("PromDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := selector("m", `a"b`); got != `m{tenant="a\"b"}` {
		t.Errorf("Selector quoting: %s", got)
	}
}

// fakeProm answers the report's queries with canned results and records
// them.
type fakeProm struct {
	t       *testing.T
	mu      sync.Mutex
	queries []url2
	hourly  bool
	// poison, when set, replaces every value of the answers to the queries
	// it matches (path and query) with v, as a broken or hostile
	// Prometheus would answer.
	poison *poison
}

type poison struct {
	match func(path, query string) bool
	v     string
}

// apply replaces every value of a query's data with p.v.
func (p *poison) apply(data map[string]any) map[string]any {
	b, _ := json.Marshal(data)
	var out map[string]any
	json.Unmarshal(b, &out)
	for _, r := range out["result"].([]any) {
		r := r.(map[string]any)
		if v, ok := r["value"].([]any); ok {
			v[1] = p.v
		}
		if vs, ok := r["values"].([]any); ok {
			for _, v := range vs {
				v.([]any)[1] = p.v
			}
		}
	}
	return out
}

type url2 struct{ path, query, time, start, end, step string }

// apiTime is how the API client writes a time parameter: Unix seconds.
func apiTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.Unix())+float64(t.Nanosecond())/1e9, 'f', -1, 64)
}

func vec(samples ...any) []map[string]any {
	var out []map[string]any
	for i := 0; i < len(samples); i += 2 {
		out = append(out, map[string]any{"metric": samples[i], "value": []any{1.0, strconv.FormatFloat(samples[i+1].(float64), 'g', -1, 64)}})
	}
	return out
}

type lbl = map[string]string

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		f.t.Errorf("%s %s: the report should POST its queries", r.Method, r.URL.Path)
	}
	r.ParseForm()
	q := r.PostForm.Get("query")
	f.mu.Lock()
	f.queries = append(f.queries, url2{r.URL.Path, q, r.PostForm.Get("time"), r.PostForm.Get("start"), r.PostForm.Get("end"), r.PostForm.Get("step")})
	f.mu.Unlock()
	var data map[string]any
	switch {
	case r.URL.Path == "/api/v1/query_range" && r.PostForm.Get("step") != "3600":
		data = f.series(q)
	case r.URL.Path == "/api/v1/query_range":
		f.hourly = true
		// Whole hours 10–11 and 11–12: points at 11:00 and 12:00.
		h11 := float64(time.Date(2026, 1, 5, 11, 0, 0, 0, time.UTC).Unix())
		h12 := h11 + 3600
		series := func(m lbl, v11, v12 float64) map[string]any {
			return map[string]any{"metric": m, "values": [][]any{{h11, strconv.FormatFloat(v11, 'g', -1, 64)}, {h12, strconv.FormatFloat(v12, 'g', -1, 64)}}}
		}
		data = map[string]any{"resultType": "matrix", "result": []any{
			series(lbl{"result": "good"}, 60, 40), series(lbl{"result": "miss"}, 0, 10),
			series(lbl{"reason": "ttft"}, 0, 8), series(lbl{"reason": "error"}, 0, 3),
		}}
	case strings.HasPrefix(q, "sum by (result)"): // the clipped hour 09:30–10:00
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"result": "good"}, 35.0, lbl{"result": "miss"}, 5.0, lbl{"reason": "error"}, 5.0)}
	case strings.HasPrefix(q, "sum by (slo, model, result)"):
		data = map[string]any{"resultType": "vector", "result": vec(
			lbl{"slo": "interactive", "model": "llama", "result": "good"}, 90.0,
			lbl{"slo": "interactive", "model": "llama", "result": "miss"}, 10.0,
			lbl{"slo": "batch", "model": "mistral", "result": "good"}, 45.0,
			lbl{"slo": "batch", "model": "mistral", "result": "miss"}, 5.0)}
	case strings.HasPrefix(q, "max by (slo)"):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"slo": "interactive"}, 0.99, lbl{"slo": "batch"}, 0.9)}
	case strings.HasPrefix(q, "sum by (reason)"):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"reason": "ttft"}, 8.0, lbl{"reason": "error"}, 8.0, lbl{"reason": "e2e"}, 1.0)}
	case strings.Contains(q, metricTokenEvents):
		data = map[string]any{"resultType": "vector", "result": vec(
			lbl{"osl_vs_events": "equal"}, 10.0, lbl{"osl_vs_events": "above"}, 3.0, lbl{"osl_vs_events": "below"}, 80.0, lbl{"kind": "multi"}, 4.0)}
	case strings.Contains(q, metricGoodTokens):
		data = map[string]any{"resultType": "vector", "result": vec(
			lbl{"kind": "good", "model": "llama"}, 9000.0, lbl{"kind": "all", "model": "llama"}, 10000.0,
			lbl{"kind": "good", "model": "mistral"}, 900.0, lbl{"kind": "all", "model": "mistral"}, 1000.0)}
	case strings.Contains(q, "histogram_quantile") && strings.Contains(q, metricTTFT):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"q": "p50"}, 0.1, lbl{"q": "p90"}, 0.3, lbl{"q": "p95"}, 0.4, lbl{"q": "p99"}, 0.9,
			lbl{"q": "count"}, 140.0, lbl{"q": "sum"}, 21.0)}
	case strings.Contains(q, "histogram_quantile") && strings.Contains(q, metricITL):
		// No observation at all: NaN quantiles, zero count.
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"q": "p50"}, 0.0, lbl{"q": "count"}, 0.0, lbl{"q": "sum"}, 0.0)}
	case strings.Contains(q, "histogram_quantile") && strings.Contains(q, metricInputTokens):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"q": "p50"}, 500.0, lbl{"q": "count"}, 150.0, lbl{"q": "sum"}, 90000.0)}
	case strings.Contains(q, "histogram_quantile"):
		data = map[string]any{"resultType": "vector", "result": []any{}}
	case strings.HasPrefix(q, "sum by (le)") && strings.Contains(q, metricInputTokens):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"le": "+Inf"}, 150.0, lbl{"le": "256.0"}, 20.0, lbl{"le": "1024.0"}, 150.0, lbl{"le": "512.0"}, 100.0)}
	case strings.HasPrefix(q, "sum by (le)"):
		data = map[string]any{"resultType": "vector", "result": []any{}}
	case strings.Contains(q, metricRequests+"{"):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{}, 152.0)}
	case strings.Contains(q, metricInFlight):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{"q": "mean"}, 2.5, lbl{"q": "p95"}, 6.0, lbl{"q": "peak"}, 9.0)}
	case strings.HasPrefix(q, "count(resets"):
		data = map[string]any{"resultType": "vector", "result": vec(lbl{}, 1.0)}
	default:
		f.t.Errorf("unexpected query %q", q)
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data", "error": "unexpected"})
		return
	}
	if f.poison != nil && f.poison.match(r.URL.Path, q) {
		data = f.poison.apply(data)
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data, "warnings": []string{"be careful"}})
}

// The time series of TestFromPrometheusFake: a one-minute step from 09:31
// to 12:00. Every step has 10 good requests, but 11:00 also has 5 misses
// and 10:00 no request at all; TTFT p50 is 100 ms and p99 500 ms, but 2 s
// at 11:00 and NaN (no observation) at 10:00; ITL has no series.
var (
	seriesFirst = time.Date(2026, 1, 5, 9, 31, 0, 0, time.UTC)
	seriesMiss  = time.Date(2026, 1, 5, 11, 0, 0, 0, time.UTC)
	seriesGap   = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
)

func (f *fakeProm) series(q string) map[string]any {
	stream := func(m lbl, v func(time.Time) string) map[string]any {
		var vals [][]any
		for t := seriesFirst; !t.After(seriesMiss.Add(time.Hour)); t = t.Add(time.Minute) {
			if s := v(t); s != "" {
				vals = append(vals, []any{float64(t.Unix()), s})
			}
		}
		return map[string]any{"metric": m, "values": vals}
	}
	matrix := func(ss ...any) map[string]any {
		return map[string]any{"resultType": "matrix", "result": append([]any{}, ss...)}
	}
	switch {
	case strings.HasPrefix(q, "sum by (result)") && strings.Contains(q, metricSLORequests):
		return matrix(
			stream(lbl{"result": "good"}, func(t time.Time) string {
				if t.Equal(seriesGap) {
					return ""
				}
				return "10"
			}),
			stream(lbl{"result": "miss"}, func(t time.Time) string {
				if t.Equal(seriesMiss) {
					return "5"
				}
				return ""
			}))
	case strings.Contains(q, "histogram_quantile") && strings.Contains(q, metricTTFT):
		v := func(normal string) func(time.Time) string {
			return func(t time.Time) string {
				switch {
				case t.Equal(seriesGap):
					return "NaN"
				case t.Equal(seriesMiss) && normal == "0.5":
					return "2"
				}
				return normal
			}
		}
		return matrix(stream(lbl{"q": "p50"}, v("0.1")), stream(lbl{"q": "p99"}, v("0.5")))
	case strings.Contains(q, "histogram_quantile") && strings.Contains(q, metricITL):
		return matrix()
	}
	f.t.Errorf("unexpected range query %q", q)
	return matrix()
}

// The series come from range queries with a step that gives 60 to 150
// points, each point the exact growth over its step.
func TestFromPrometheusSeries(t *testing.T) {
	fp := &fakeProm{t: t}
	srv := httptest.NewServer(fp)
	defer srv.Close()
	from := time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)
	to := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	r, err := FromPrometheus(context.Background(), srv.URL, Query{Tenant: "acme", From: from, To: to, Now: to})
	if err != nil {
		t.Fatal(err)
	}
	var ranges []string
	for _, q := range fp.queries {
		if q.path != "/api/v1/query_range" || q.step == "3600" {
			continue
		}
		ranges = append(ranges, q.query)
		if q.start != apiTime(seriesFirst) || q.end != apiTime(to) || q.step != "60" {
			t.Errorf("range %s to %s step %s, want %s to %s step 60: %s", q.start, q.end, q.step, apiTime(seriesFirst), apiTime(to), q.query)
		}
		if !strings.Contains(q.query, "[60000ms]") || !strings.Contains(q.query, "offset 60000ms") {
			t.Errorf("a point must be the exact growth over its step: %s", q.query)
		}
	}
	want := []string{
		"sum by (result) (" + ExactIncrease(selector(metricSLORequests, "acme"), "60000ms") + ")",
		`label_replace(histogram_quantile(0.5, sum by (le) (` + ExactIncrease(selector(metricTTFT+"_bucket", "acme"), "60000ms") + `)), "q", "p50", "", "")`,
		`histogram_quantile(0.99, sum by (le) (` + ExactIncrease(selector(metricITL+"_bucket", "acme"), "60000ms") + `))`,
	}
	if len(ranges) != 3 {
		t.Fatalf("%d range queries for the series, want 3: %q", len(ranges), ranges)
	}
	for i, w := range want {
		if !strings.Contains(ranges[i], w) {
			t.Errorf("range query %d:\n%s\nlacks\n%s", i, ranges[i], w)
		}
	}
	s := r.Series
	if s == nil {
		t.Fatal("no series")
	}
	if s.Step != 60 || len(s.Attainment) != 150 || len(s.Requests) != 150 || len(s.TTFTP50) != 150 || len(s.TTFTP99) != 150 || len(s.ITLP50) != 150 || len(s.ITLP99) != 150 {
		t.Fatalf("step %v, points %d %d %d %d %d %d", s.Step, len(s.Attainment), len(s.Requests), len(s.TTFTP50), len(s.TTFTP99), len(s.ITLP50), len(s.ITLP99))
	}
	if !s.Attainment[0].T.Equal(seriesFirst) || !s.Attainment[149].T.Equal(to) {
		t.Errorf("points from %v to %v", s.Attainment[0].T, s.Attainment[149].T)
	}
	at := func(ps []Point, tm time.Time) Num {
		for _, p := range ps {
			if p.T.Equal(tm) {
				return p.V
			}
		}
		t.Fatalf("no point at %v", tm)
		return 0
	}
	if v := at(s.Attainment, seriesMiss); v != Num(10.0/15) {
		t.Errorf("attainment at 11:00 = %v, want 2/3", v)
	}
	if v := at(s.Requests, seriesMiss); v != 15 {
		t.Errorf("requests at 11:00 = %v", v)
	}
	if v := at(s.Attainment, seriesGap); Known(v) || at(s.Requests, seriesGap) != 0 {
		t.Errorf("attainment at 10:00, without requests = %v, want unknown", v)
	}
	if v := at(s.Attainment, to); v != 1 {
		t.Errorf("attainment at 12:00 = %v", v)
	}
	if at(s.TTFTP99, seriesMiss) != 2 || at(s.TTFTP50, seriesMiss) != 0.1 || at(s.TTFTP99, to) != 0.5 || Known(at(s.TTFTP50, seriesGap)) {
		t.Errorf("TTFT: p99 %v at 11:00, p50 %v at 11:00, p99 %v at 12:00, p50 %v at 10:00",
			at(s.TTFTP99, seriesMiss), at(s.TTFTP50, seriesMiss), at(s.TTFTP99, to), at(s.TTFTP50, seriesGap))
	}
	for _, p := range append(s.ITLP50, s.ITLP99...) {
		if Known(p.V) {
			t.Fatalf("ITL without series has a point %v", p)
		}
	}
	md := render(t, r, "md")
	for _, w := range []string{
		"## Over the period",
		"150 steps of 1m; attainment per 1m from 66.67% (lowest at 11:00 UTC) to 100.00%; TTFT p50 100 ms to 100 ms",
		"TTFT p99 500 ms to 2 s (highest at 11:00 UTC); ITL p50 unknown; ITL p99 unknown.",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("Markdown lacks %q", w)
		}
	}
	page := render(t, r, "html")
	wellFormed(t, page)
	for _, w := range []string{"Attainment of acme per 1m (UTC)", "TTFT p50 and p99 of acme", "ITL p50 and p99 of acme", "<polyline points="} {
		if !strings.Contains(page, w) {
			t.Errorf("HTML lacks %q", w)
		}
	}
	js := render(t, r, "json")
	var doc struct {
		Series struct {
			Step       float64 `json:"step_seconds"`
			Attainment []struct {
				T time.Time `json:"t"`
				V *float64  `json:"v"`
			} `json:"attainment"`
			ITLP99 []map[string]any `json:"itl_p99_seconds"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Series.Step != 60 || len(doc.Series.Attainment) != 150 || len(doc.Series.ITLP99) != 150 || doc.Series.ITLP99[0]["v"] != nil {
		t.Errorf("JSON series: step %v, %d attainment points, %d ITL p99 points", doc.Series.Step, len(doc.Series.Attainment), len(doc.Series.ITLP99))
	}
	for _, p := range doc.Series.Attainment {
		if p.T.Equal(seriesGap) && p.V != nil || p.T.Equal(seriesMiss) && (p.V == nil || *p.V != 10.0/15) {
			t.Errorf("JSON attainment at %v: %v", p.T, p.V)
		}
	}
}

func TestSeriesStep(t *testing.T) {
	for period, want := range map[time.Duration]time.Duration{
		5 * time.Minute:      15 * time.Second, // fewer points: no step below a scrape interval
		150 * time.Minute:    time.Minute,
		151 * time.Minute:    2 * time.Minute,
		24 * time.Hour:       10 * time.Minute,
		7 * 24 * time.Hour:   2 * time.Hour,
		90 * 24 * time.Hour:  24 * time.Hour,
		400 * 24 * time.Hour: 3 * 24 * time.Hour,
	} {
		got := seriesStep(period)
		if got != want {
			t.Errorf("seriesStep(%v) = %v, want %v", period, got, want)
		}
		if n := period / got; period >= 15*time.Minute && (n < 60 || n > 150) {
			t.Errorf("period %v: %d points", period, n)
		}
	}
	// Every period from 15 minutes to a year gets 60 to 150 points.
	for p := 15 * time.Minute; p < 366*24*time.Hour; p = p * 21 / 20 {
		if n := p / seriesStep(p); n < 60 || n > 150 {
			t.Errorf("period %v: step %v, %d points", p, seriesStep(p), n)
		}
	}
}

func TestFromPrometheusFake(t *testing.T) {
	fp := &fakeProm{t: t}
	srv := httptest.NewServer(fp)
	defer srv.Close()
	from := time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)
	to := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	r, err := FromPrometheus(context.Background(), strings.Replace(srv.URL, "http://", "http://user:SecretPw@", 1), Query{Tenant: "acme", From: from, To: to, Now: to.Add(time.Minute), Worst: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A URL's password is not written into the report, which is shared.
	if b, _ := json.Marshal(r); strings.Contains(string(b), "SecretPw") || !strings.Contains(r.Source.URL, "user:xxxxx@") {
		t.Errorf("the report holds the URL's password: %s", b)
	}
	for _, q := range fp.queries {
		if !strings.Contains(q.query, `tenant="acme"`) {
			t.Errorf("query without the tenant: %s", q.query)
		}
		if q.path == "/api/v1/query" && q.time != apiTime(to) && !strings.HasPrefix(q.query, "sum by (result)") {
			t.Errorf("query at %s, want the period's end: %s", q.time, q.query)
		}
		if strings.Contains(q.query, "increase(") && !strings.Contains(q.query, "offset") {
			t.Errorf("counts must use ExactIncrease: %s", q.query)
		}
	}
	if !fp.hourly {
		t.Error("no range query for the hours")
	}
	exact := func(name string, got Num, want float64) {
		t.Helper()
		if float64(got) != want {
			t.Errorf("%s = %v, want %v", name, float64(got), want)
		}
	}
	near := func(name string, got Num, want float64) {
		t.Helper()
		if d := float64(got) - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", name, float64(got), want)
		}
	}
	exact("seconds", Num(r.Period.Seconds), 9000)
	exact("requests", r.SLO.Requests, 150)
	exact("good", r.SLO.Good, 135)
	exact("attainment", r.SLO.Attainment, 0.9)
	// Allowed misses per class: 100·0.01 + 50·0.1 = 6.
	near("allowed misses", r.SLO.AllowedMisses, 6)
	near("budget used", r.SLO.ErrorBudgetUsed, 15.0/6)
	near("objective", r.SLO.Objective, 1-6.0/150)
	if len(r.SLO.Classes) != 2 || r.SLO.Classes[0].Name != "batch" || r.SLO.Classes[0].Requests != 50 || r.SLO.Classes[0].Objective != 0.9 ||
		r.SLO.Classes[1].Name != "interactive" || r.SLO.Classes[1].Good != 90 {
		t.Errorf("classes %+v", r.SLO.Classes)
	}
	exact("ttft misses", r.SLO.MissReasons[0].Count, 8)
	exact("good output tokens", r.Goodput.GoodOutputTokens, 9900)
	exact("good tok/s", r.Goodput.GoodOutputTokensPerSecond, 1.1)
	exact("output tokens", r.Throughput.OutputTokens, 11000)
	if len(r.Models) != 2 || r.Models[0].Model != "llama" || r.Models[0].Requests != 100 || r.Models[0].Attainment != 0.9 ||
		r.Models[1].GoodOutputTokensPerSecond != 0.1 {
		t.Errorf("models %+v", r.Models)
	}
	if r.Latency.Method != "histogram" {
		t.Errorf("method %q", r.Latency.Method)
	}
	exact("ttft p99", r.Latency.TTFT.P99, 0.9)
	exact("ttft mean", r.Latency.TTFT.Mean, 0.15)
	exact("ttft count", r.Latency.TTFT.Count, 140)
	if Known(r.Latency.TTFT.Max) || Known(r.Latency.ITL.P50) || Known(r.Latency.ITL.Mean) || Known(r.Latency.TPOT.Count) {
		t.Errorf("max, percentiles of an empty histogram and a missing histogram must be unknown: %+v %+v %+v", r.Latency.TTFT, r.Latency.ITL, r.Latency.TPOT)
	}
	exact("itl count", r.Latency.ITL.Count, 0)
	te := r.Latency.TokenEvents
	exact("token-event requests", te.Requests, 93)
	exact("osl ≠ events", te.OSLNotEvents, 83)
	exact("osl above events", te.OSLAboveEvents, 3)
	exact("osl below events", te.OSLBelowEvents, 80)
	exact("multi-token", te.MultiTokenEvents, 4)
	exact("isl mean", r.Traffic.ISL.Mean, 600)
	exact("arrivals", r.Traffic.Arrivals, 152)
	exact("peak", r.Traffic.Concurrency.Peak, 9)
	var bks []string
	for _, b := range r.Traffic.ISL.Buckets {
		bks = append(bks, b.LE+":"+fmtCount(b.Count))
	}
	if strings.Join(bks, " ") != "256:20 512:80 1024:50 +Inf:0" {
		t.Errorf("ISL buckets %v", bks)
	}
	if r.Traffic.OSL.Buckets != nil || Known(r.Traffic.InterArrival.GammaShape) || r.Traffic.Shapes.Traffic != "unknown" {
		t.Errorf("unknowns: %+v", r.Traffic)
	}
	// Hours: 09:30–10:00 (40 requests, 87.5%), 10–11 (60, 100%), 11–12 (50, 80%).
	if len(r.Hours) != 3 {
		t.Fatalf("hours %+v", r.Hours)
	}
	for i, want := range []struct{ req, good float64 }{{40, 35}, {60, 60}, {50, 40}} {
		if float64(r.Hours[i].Requests) != want.req || float64(r.Hours[i].Good) != want.good {
			t.Errorf("hour %d: %+v, want %v", i, r.Hours[i], want)
		}
	}
	if len(r.WorstHours) != 2 || !r.WorstHours[0].Start.Equal(time.Date(2026, 1, 5, 11, 0, 0, 0, time.UTC)) ||
		reasonsText(r.WorstHours[0].Reasons) != "ttft (8), error (3)" || !r.WorstHours[1].Start.Equal(from) {
		t.Errorf("worst hours %+v", r.WorstHours)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"restarted during the period", "Prometheus warned: be careful", "histogram_quantile", "exact, not extrapolated"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestFromPrometheusErrors(t *testing.T) {
	// The bound at 2 MiB, not 64: sending and reading 64 MiB under the
	// race detector on a loaded machine ran past the client's timeout.
	defer func(m int) { maxBody = m }(maxBody)
	maxBody = 2 << 20
	mux := http.NewServeMux()
	mux.HandleFunc("/bad/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`))
	})
	mux.HandleFunc("/matrix/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
	})
	mux.HandleFunc("/big/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
		pad := []byte(strings.Repeat(" ", 1<<20))
		for i := 0; i <= maxBody>>20; i++ {
			if _, err := w.Write(pad); err != nil {
				return
			}
		}
		w.Write([]byte(`]}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	gone := httptest.NewServer(mux)
	gone.Close()
	q := Query{Tenant: "acme", From: now.Add(-time.Hour), To: now, Now: now}
	for _, c := range []struct{ base, want string }{
		{srv.URL + "/bad", "refused the query (HTTP 400, bad_data: parse error at char 3)"},
		{srv.URL + "/missing", "HTTP 404 and not the API's JSON (is this the base URL of a Prometheus server?)"},
		{srv.URL + "/matrix", `answered a "matrix" result, want "vector"`},
		{"http://", "Prometheus URL"},
		{srv.URL + "/big", "answer to " + srv.URL + "/big/api/v1/query is larger than 2 MiB"},
		{gone.URL, "cannot reach Prometheus at " + gone.URL + "/api/v1/query: "},
	} {
		_, err := FromPrometheus(context.Background(), c.base, q)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.base, err, c.want)
		}
	}
	// A period of more hours than the breakdown takes is refused before
	// any query (one from 1970 queried for a minute first).
	var asked atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
	defer counting.Close()
	long := Query{Tenant: "acme", From: time.Unix(0, 0), To: now, Now: now}
	if _, err := FromPrometheus(context.Background(), counting.URL, long); err == nil || !strings.Contains(err.Error(), "the hourly breakdown is limited to 11000") || asked.Load() != 0 {
		t.Errorf("a period from 1970: %v after %d queries, want it refused before any", err, asked.Load())
	}
	// A Prometheus without the tenant's series: zero requests, said so.
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := "vector"
		if r.URL.Path == "/api/v1/query_range" {
			rt = "matrix"
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":%q,"result":[]}}`, rt)
	}))
	defer empty.Close()
	r, err := FromPrometheus(context.Background(), empty.URL, Query{Tenant: "acme", From: now.Add(-3 * time.Hour), To: now, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// 07:30–08:00, 08–09, 09–10, 10:00–10:30.
	if r.SLO.Requests != 0 || Known(r.SLO.Attainment) || len(r.Hours) != 4 || len(r.WorstHours) != 0 {
		t.Errorf("no data: %+v hours %d worst %d", r.SLO, len(r.Hours), len(r.WorstHours))
	}
	if !strings.Contains(strings.Join(r.Notes, " "), "has no goodput_slo_requests_total series for tenant") {
		t.Errorf("notes %q", r.Notes)
	}
}

// Arrivals, in the real PromQL engine: the tenant's inference requests of
// every outcome, not the requests passed through unmetered (route other),
// which the gateway's profile does not count either.
func TestArrivalsQueryPromQL(t *testing.T) {
	pq := promQueries{tenant: "acme", rng: promDuration(5 * time.Minute)}
	testenv.PromtoolTest(t, fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'goodput_requests_total{tenant="acme",route="chat",model="m",outcome="ok"}'
        values: '0 10 20 30 40 50'
      - series: 'goodput_requests_total{tenant="acme",route="completions",model="m",outcome="rate_limited"}'
        values: '0 1 2 3 4 5'
      - series: 'goodput_requests_total{tenant="acme",route="other",model="none",outcome="ok"}'
        values: '0 7 14 21 28 35'
      - series: 'goodput_requests_total{tenant="globex",route="chat",model="m",outcome="ok"}'
        values: '0 100 200 300 400 500'
    promql_expr_test:
      - expr: %q
        eval_time: 5m
        exp_samples:
          - labels: '{}'
            value: 55
`, pq.arrivals()))
}

// A hostile server's bytes never reach the operator's terminal raw: a
// body, an API error, a warning and label values quoted in errors and in
// the report have ESC, other controls and invalid UTF-8 escaped (an ESC[2J
// in a 500 body cleared the screen).
func TestRemoteTextEscaped(t *testing.T) {
	const hostile = "\x1b[2J\x1b]0;title\x07 \u202e \xff"
	mux := http.NewServeMux()
	mux.HandleFunc("/body/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(hostile))
	})
	mux.HandleFunc("/refused/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data\x1b[2J", "error": hostile})
	})
	mux.HandleFunc("/labels/", func(w http.ResponseWriter, r *http.Request) {
		data := map[string]any{"resultType": "matrix", "result": []any{}}
		if strings.HasSuffix(r.URL.Path, "/api/v1/query") {
			data = map[string]any{"resultType": "vector", "result": vec(
				lbl{"slo": hostile, "model": hostile, "result": "good", "reason": hostile, "kind": "good"}, 1.0)}
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data, "warnings": []string{hostile}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	q := Query{Tenant: "acme", From: now.Add(-time.Hour), To: now, Now: now}
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u202e") || !utf8.ValidString(s) }
	for _, c := range []struct {
		name string
		read func() (*Report, error)
		want string
	}{
		{"a Prometheus 500", func() (*Report, error) { return FromPrometheus(context.Background(), srv.URL+"/body", q) }, `HTTP 500 and not the API's JSON: \x1b[2J\x1b]0;title\a \u202e \xff`},
		{"an admin API 500", func() (*Report, error) { return FromAdmin(context.Background(), srv.URL+"/body", q) }, `HTTP 500: \x1b[2J\x1b]0;title\a \u202e \xff`},
		{"a refused query", func() (*Report, error) { return FromPrometheus(context.Background(), srv.URL+"/refused", q) }, `(HTTP 400, bad_data\x1b[2J: \x1b[2J\x1b]0;title\a \u202e �)`}, // JSON decoding made \xff U+FFFD, printable
	} {
		_, err := c.read()
		if err == nil || raw(err.Error()) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want one with %q", c.name, err, c.want)
		}
	}
	r, err := FromPrometheus(context.Background(), srv.URL+"/labels", q)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"md", "html", "json"} {
		out := render(t, r, kind)
		if raw(out) {
			t.Errorf("the %s report holds the server's raw bytes", kind)
		}
		if kind == "md" && !strings.Contains(out, `Prometheus warned: \\x1b\[2J`) {
			t.Errorf("the Markdown report lacks the escaped warning:\n%s", out)
		}
	}
}

// Values no query can have (NaN, infinities, negative counts, counts past
// 2^53, an objective outside 0 to 1) are a malformed answer: an error
// naming the value, the series and the query, never a report (negative
// counts printed "Attainment 50.00% (-5 good of -10 requests)" and
// "Objective met: met"; 1e308 a 300-digit goodput).
func TestFromPrometheusBadValues(t *testing.T) {
	from := time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)
	to := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	prefix := func(p string) func(string, string) bool {
		return func(path, q string) bool { return path == "/api/v1/query" && strings.HasPrefix(q, p) }
	}
	has := func(path, sub string) func(string, string) bool {
		return func(pa, q string) bool { return pa == path && strings.Contains(q, sub) }
	}
	for _, c := range []struct {
		name  string
		match func(path, query string) bool
		v     string
		want  []string
	}{
		{"negative requests", prefix("sum by (slo, model, result)"), "-5",
			[]string{`answered -5 for {model="llama", result="good", slo="interactive"}, which cannot be a count (from 0 to 2^53); query: sum by (slo, model, result) (`}},
		{"NaN requests", prefix("sum by (slo, model, result)"), "NaN", []string{"answered NaN for", "cannot be a count"}},
		{"an objective of -5", prefix("max by (slo)"), "-5", []string{`answered -5 for {slo="interactive"}, which cannot be an objective (from 0 to 1)`}},
		{"an objective above 1", prefix("max by (slo)"), "1.5", []string{"answered 1.5 for", "an objective"}},
		{"1e308 output tokens", has("/api/v1/query", metricGoodTokens), "1e308", []string{`answered 1e+308 for {kind="good", model="llama"}`, "cannot be a count"}},
		{"a count past 2^53", has("/api/v1/query", metricRequests+"{"), "9007199254740994", []string{"answered 9.007199254740994e+15 for {}", "cannot be a count"}},
		{"negative misses", prefix("sum by (reason)"), "-1", []string{"cannot be a count", "query: sum by (reason)"}},
		{"infinite TTFT", has("/api/v1/query", metricTTFT), "+Inf", []string{`answered +Inf for {q="p50"}, which cannot be a percentile`}},
		{"negative ISL buckets", func(path, q string) bool {
			return strings.HasPrefix(q, "sum by (le)") && strings.Contains(q, metricInputTokens)
		}, "-3", []string{`for {le="+Inf"}`, "cannot be a count"}},
		{"infinite concurrency", has("/api/v1/query", metricInFlight), "+Inf", []string{"cannot be a duration, token sum or gauge"}},
		{"negative token events", has("/api/v1/query", metricTokenEvents), "-1", []string{"cannot be a count"}},
		{"negative resets", prefix("count(resets"), "-1", []string{"cannot be a count"}},
		{"a negative hour", func(path, q string) bool { return path == "/api/v1/query_range" && strings.Contains(q, "[3600000ms]") }, "-1",
			[]string{`answered -1 for {result="good"} at 2026-01-05 11:00:00 UTC, which cannot be a count`}},
		{"a negative step", func(path, q string) bool {
			return path == "/api/v1/query_range" && strings.Contains(q, "[60000ms]") && strings.Contains(q, metricSLORequests)
		}, "-10",
			[]string{`answered -10 for {result="good"} at 2026-01-05 09:31:00 UTC, which cannot be a count`}},
		{"a step's TTFT of -Inf", func(path, q string) bool { return path == "/api/v1/query_range" && strings.Contains(q, metricTTFT) }, "-Inf",
			[]string{"answered -Inf for {q=\"p50\"}", "cannot be a percentile"}},
	} {
		fp := &fakeProm{t: t, poison: &poison{c.match, c.v}}
		srv := httptest.NewServer(fp)
		r, err := FromPrometheus(context.Background(), srv.URL, Query{Tenant: "acme", From: from, To: to, Now: to})
		srv.Close()
		if err == nil {
			t.Errorf("%s: no error; the report says %v good of %v requests", c.name, r.SLO.Good, r.SLO.Requests)
			continue
		}
		for _, w := range append(c.want, "Prometheus at "+srv.URL+" answered ") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
	// Values at their bounds make a report (NaN percentiles of a step
	// without observations are TestFromPrometheusSeries's).
	fp := &fakeProm{t: t, poison: &poison{prefix("max by (slo)"), "1"}}
	srv := httptest.NewServer(fp)
	defer srv.Close()
	if r, err := FromPrometheus(context.Background(), srv.URL, Query{Tenant: "acme", From: from, To: to, Now: to}); err != nil || r.SLO.Classes[0].Objective != 1 {
		t.Errorf("an objective of 1: %v", err)
	}
}
