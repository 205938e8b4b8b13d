package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/dashboards"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/internal/promtest"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Every panel query of every dashboard in dashboards/ (the committed JSON,
// what users import) runs against a real Prometheus that scrapes a gateway
// under simulated load, with the project's recording rules loaded. Each
// query must parse and return data (a sample that is not NaN): with every
// tenant and model ("All"), and with one tenant and one model chosen. The
// template variables must list the tenants and the model. Every goodput_
// metric the gateway exports must be on some panel.
//
// The gateway runs in-process with the built-in simulator, two tenants with
// keys and limits (one queues on concurrency, one is held to a low rpm),
// Redis limits (miniredis) and a request log; its simulator serves vLLM's
// engine metrics, which Prometheus scrapes too. Load runs until every query
// has returned data, or 25 s.
func TestDashboardQueriesReturnData(t *testing.T) {
	promtest.Binary(t) // skips (fails in CI) before anything starts

	dir := t.TempDir()
	acmeKey, acmeLines := newKey(t, "acme", "acme-1")
	betaKey, betaLines := newKey(t, "beta", "beta-1")
	mr := miniredis.RunT(t)
	yaml := `sim: {ttft: 20ms, itl: 5ms}
slos:
  interactive: {ttft: 200ms, tpot: 50ms, objective: 0.99}
  batch: {e2e: 30s, objective: 0.9}
default_slo: interactive
tenants:
  - name: acme
    slo: interactive
    limits: {max_concurrency: 2}
    keys:
` + acmeLines + `  - name: beta
    slo: batch
    limits: {rpm: 120, burst: 2}
    keys:
` + betaLines + `ratelimit:
  backend: redis
  redis: {url: "redis://` + mr.Addr() + `/0"}
  max_queue_wait: 300ms
`
	cfg := loadYAML(t, dir, yaml)
	cfg.Listen, cfg.AdminListen, cfg.RequestLog = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(dir, "requests.jsonl")
	gw, _ := startServe(t, cfg)
	engine := strings.TrimPrefix(gw.Upstream, "http://")

	prom := promtest.Start(t, promtest.Config{
		Jobs:      map[string][]string{"goodput": {gw.Admin}, "vllm": {engine}},
		RuleFiles: []string{"../../deploy/prometheus/goodput-rules.yaml"},
		Interval:  time.Second,
	})

	loadStart := time.Now()
	stopLoad := startDashboardLoad(t, "http://"+gw.Proxy, acmeKey, betaKey)
	defer stopLoad()

	// The queries: every target of every panel, with the variables set to
	// "All" and to one tenant and model.
	files, _ := filepath.Glob("../../dashboards/*.json")
	if len(files) == 0 {
		t.Fatal("no dashboards in dashboards/")
	}
	type query struct {
		board, panel, ref, choice, expr string
		instant                         bool
	}
	type variable struct{ board, name, query string }
	var queries []query
	var vars []variable
	panels := 0
	choices := map[string]map[string]string{
		"all":        {"tenant": ".*", "model": ".*"},
		"acme/model": {"tenant": "acme", "model": "sim-llama"},
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dashboards.Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(string); ok && v.Type == "query" {
				vars = append(vars, variable{d.UID, v.Name, q})
			}
		}
		for _, p := range d.AllPanels() {
			panels++
			for _, tg := range p.Targets {
				for _, c := range []string{"all", "acme/model"} {
					queries = append(queries, query{d.UID, p.Title, tg.RefID, c, tg.Expr, tg.Instant})
				}
			}
		}
	}

	ctx := context.Background()
	api := prom.API
	run := func(q query, now time.Time) (bool, string) {
		vals := map[string]string{
			"__rate_interval": "4s", // Grafana's: max(interval + scrape interval, 4 × scrape interval)
			"__interval":      "1s",
			"__range":         fmt.Sprintf("%ds", int(math.Ceil(now.Sub(loadStart).Seconds()))),
		}
		for k, v := range choices[q.choice] {
			vals[k] = v
		}
		expr := dashboards.Substitute(q.expr, vals)
		if left := dashboards.VariableNames(expr); len(left) > 0 {
			t.Fatalf("%s / %s / %s: unknown variables %v in %s", q.board, q.panel, q.ref, left, q.expr)
		}
		var v model.Value
		var err error
		if q.instant {
			v, _, err = api.Query(ctx, expr, now)
		} else {
			v, _, err = api.QueryRange(ctx, expr, v1.Range{Start: loadStart, End: now, Step: time.Second})
		}
		if err != nil {
			if strings.Contains(err.Error(), "parse error") || strings.Contains(err.Error(), "bad_data") {
				t.Fatalf("%s / %s / %s: %v\n%s", q.board, q.panel, q.ref, err, expr)
			}
			return false, err.Error()
		}
		return hasData(v), fmt.Sprintf("%s: %.200s", expr, v.String())
	}
	listVar := func(v variable, now time.Time) (bool, string) {
		m := labelValuesCall.FindStringSubmatch(v.query)
		if m == nil {
			t.Fatalf("%s: variable %s: not label_values(selector, label): %s", v.board, v.name, v.query)
		}
		sel := dashboards.Substitute(m[1], map[string]string{"tenant": ".*", "model": ".*"})
		got, _, err := api.LabelValues(ctx, m[2], []string{sel}, loadStart, now)
		if err != nil {
			t.Fatalf("%s: variable %s: %v", v.board, v.name, err)
		}
		want := map[string][]string{"tenant": {"acme", "beta"}, "model": {"sim-llama"}}[v.name]
		for _, w := range want {
			if !slices.Contains(got, model.LabelValue(w)) {
				return false, fmt.Sprintf("%s lists %v", v.query, got)
			}
		}
		return true, ""
	}

	// Until every query has returned data: a round per scrape interval.
	pending := make(map[int]string, len(queries))
	for i := range queries {
		pending[i] = "not run"
	}
	pendingVars := make(map[int]string, len(vars))
	for i := range vars {
		pendingVars[i] = "not run"
	}
	deadline := loadStart.Add(25 * time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for len(pending)+len(pendingVars) > 0 && time.Now().Before(deadline) {
		<-tick.C
		now := time.Now()
		for i := range pending {
			if ok, why := run(queries[i], now); ok {
				delete(pending, i)
			} else {
				pending[i] = why
			}
		}
		for i := range pendingVars {
			if ok, why := listVar(vars[i], now); ok {
				delete(pendingVars, i)
			} else {
				pendingVars[i] = why
			}
		}
	}
	sent := stopLoad()
	for i, why := range pending {
		q := queries[i]
		t.Errorf("%s / %q / query %s (%s): no data: %s", q.board, q.panel, q.ref, q.choice, why)
	}
	for i, why := range pendingVars {
		t.Errorf("%s: variable %s: %s", vars[i].board, vars[i].name, why)
	}
	// Every goodput metric the gateway exports is on a panel (a
	// histogram by one of its series).
	resp, err := http.Get("http://" + gw.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range exportedMetric.FindAllStringSubmatch(string(exposition), -1) {
		if !slices.ContainsFunc(queries, func(q query) bool { return metricNamed(q.expr, m[1]) }) {
			t.Errorf("the gateway exports %s, and no panel shows it", m[1])
		}
	}
	t.Logf("%d dashboards, %d panels, %d queries × %d variable choices, %d variables: %d without data after %v of load (%d requests sent)",
		len(files), panels, len(queries)/len(choices), len(choices), len(vars), len(pending)+len(pendingVars),
		time.Since(loadStart).Round(100*time.Millisecond), sent)
}

// exportedMetric finds the names of the goodput metrics in an exposition.
var exportedMetric = regexp.MustCompile(`(?m)^# TYPE (goodput_\w+) `)

// metricNamed reports whether expr names metric, or one of its series as a
// histogram (_bucket, _sum, _count).
func metricNamed(expr, metric string) bool {
	for i := 0; ; {
		j := strings.Index(expr[i:], metric)
		if j < 0 {
			return false
		}
		start := i + j
		i = start + len(metric)
		rest := expr[i:]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if r, ok := strings.CutPrefix(rest, suf); ok {
				rest = r
				break
			}
		}
		if (start == 0 || !isNameByte(expr[start-1])) && (rest == "" || !isNameByte(rest[0])) {
			return true
		}
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// label_values(selector, label), as the dashboards' variables query.
var labelValuesCall = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// hasData reports whether v holds a sample that is not NaN.
func hasData(v model.Value) bool {
	switch v := v.(type) {
	case model.Vector:
		for _, s := range v {
			if !math.IsNaN(float64(s.Value)) {
				return true
			}
		}
	case model.Matrix:
		for _, ss := range v {
			for _, p := range ss.Values {
				if !math.IsNaN(float64(p.Value)) {
					return true
				}
			}
		}
	case *model.Scalar:
		return !math.IsNaN(float64(v.Value))
	}
	return false
}

// startDashboardLoad sends a bounded mix of requests until the returned
// function is called (it returns how many were sent; calling it again is a
// no-op): acme streams chat at up to 30 requests/s from 3 clients against a
// concurrency limit of 2 (so some queue), with a slow first token every 6th
// request (a TTFT miss), an engine error every 6th (an error miss) and a
// non-streamed one every 4th; beta streams completions from 2 clients at up
// to 20 requests/s against 120 rpm (most are refused after queueing).
func startDashboardLoad(t *testing.T, base, acmeKey, betaKey string) func() int {
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var wg sync.WaitGroup
	var sent atomic.Int64
	worker := func(key, path string, mix func(i int) (body string, hdr map[string]string)) {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			body, hdr := mix(i)
			req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("load: %v", err)
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sent.Add(1)
		}
	}
	acme := func(i int) (string, map[string]string) {
		stream := i%4 != 3
		body := fmt.Sprintf(`{"model":"sim-llama","stream":%t,"max_tokens":8,"ignore_eos":true,"messages":[{"role":"user","content":"how are you today"}]}`, stream)
		switch i % 6 {
		case 4:
			return body, map[string]string{"X-Sim-TTFT": "300ms"}
		case 5:
			return body, map[string]string{"X-Sim-Fault": "status=503"}
		}
		return body, nil
	}
	beta := func(i int) (string, map[string]string) {
		return `{"model":"sim-llama","stream":true,"max_tokens":16,"ignore_eos":true,"prompt":"once upon a time there was"}`, nil
	}
	for range 3 {
		wg.Add(1)
		go worker(acmeKey, "/v1/chat/completions", acme)
	}
	for range 2 {
		wg.Add(1)
		go worker(betaKey, "/v1/completions", beta)
	}
	var once sync.Once
	return func() int {
		once.Do(func() {
			cancel()
			wg.Wait()
			client.CloseIdleConnections()
		})
		return int(sent.Load())
	}
}

// What counts as data: a sample that is not NaN (a ratio over no requests
// is NaN, and shows nothing).
func TestHasData(t *testing.T) {
	if hasData(model.Vector{}) || hasData(model.Matrix{}) ||
		hasData(model.Vector{{Value: model.SampleValue(math.NaN())}}) ||
		hasData(model.Matrix{{Values: []model.SamplePair{{Value: model.SampleValue(math.NaN())}}}}) {
		t.Fatal("no data counted as data")
	}
	if !hasData(model.Vector{{Value: 0}}) || !hasData(model.Matrix{{Values: []model.SamplePair{{Value: model.SampleValue(math.NaN())}, {Value: 1}}}}) {
		t.Fatal("data not counted")
	}
	if m := labelValuesCall.FindStringSubmatch(`label_values(goodput_requests_total{tenant=~"$tenant"}, model)`); m == nil || m[2] != "model" {
		t.Fatalf("label_values: %v", m)
	}
}

// loadYAML writes yaml as dir's goodput.yaml and loads it, as serve
// --config does.
func loadYAML(t *testing.T, dir, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, "goodput.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml)
	}
	return cfg
}
