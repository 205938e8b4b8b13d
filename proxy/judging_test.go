package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/sim"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metered is a gateway with the sinks of `goodput serve`: the judge and
// the request metrics, sharing one Labeler.
type metered struct {
	*gateway
	reg    *prometheus.Registry
	judger *slo.Judger
}

func startMetered(t *testing.T, cfg Config, classes map[string]*slo.Class, def string) *metered {
	t.Helper()
	tenants := export.NewLabelSet(nil, 0)
	tenants.Admit(DefaultTenant) // as serve does
	lab := export.NewLabeler(tenants, export.NewLabelSet(nil, 0))
	reg := prometheus.NewRegistry()
	j, err := slo.NewJudger(slo.JudgerOptions{Config: slo.Config{SLOs: classes}, DefaultClass: def, Labels: lab, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Judge = j
	cfg.Sink = export.NewMetrics(reg, lab)
	return &metered{gateway: startGateway(t, cfg), reg: reg, judger: j}
}

// settle waits until every request sent so far has its record, and drops
// the copies the harness keeps.
func (m *metered) settle(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d requests still without a record after 10s", m.p.InFlight())
	}
	for {
		select {
		case <-m.records:
		default:
			return
		}
	}
}

// sum adds the samples (counter values, or histogram counts) of metric
// name whose labels include every pair of want.
func (m *metered) sum(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, mm := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mm.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			switch {
			case mm.GetCounter() != nil:
				total += mm.GetCounter().GetValue()
			case mm.GetHistogram() != nil:
				total += float64(mm.GetHistogram().GetSampleCount())
			case mm.GetGauge() != nil:
				total += mm.GetGauge().GetValue()
			}
		}
	}
	return total
}

func (m *metered) sloSnapshot(t *testing.T) *slo.SLOSnapshot {
	t.Helper()
	rr := httptest.NewRecorder()
	m.judger.SLOHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/admin/api/slo", nil))
	var s slo.SLOSnapshot
	if err := json.Unmarshal(rr.Body.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, rr.Body)
	}
	return &s
}

func (m *metered) profile(t *testing.T) *slo.ProfileSnapshot {
	t.Helper()
	rr := httptest.NewRecorder()
	m.judger.ProfileHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/admin/api/profile?window=5m", nil))
	var s slo.ProfileSnapshot
	if err := json.Unmarshal(rr.Body.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, rr.Body)
	}
	return &s
}

func send(t *testing.T, method, url, body string, hdr map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var generous = map[string]*slo.Class{"generous": {TTFT: cfgtypes.Duration(5 * time.Second), Objective: 0.99}}

// vLLM's benchmark probes /metrics and /v1/models between its requests; a
// client checks /health, /props and POST /tokenize. None of it is judged,
// enters latency figures or counts as an arrival in the profile: a run of
// good requests stays at 100% with one arrival per inference request (the
// issue: 99.0%, and a burstiness of 1.0 read as 0.44). Everything is still
// counted in goodput_requests_total, and a request's model label is the
// same in every metric ("none" for a request that names no model).
func TestGatewayJudgesOnlyInference(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: 2 * time.Millisecond, ITL: time.Millisecond})
	m := startMetered(t, Config{Upstream: simURL}, generous, "generous")
	const n = 8
	probes := []struct{ method, path, body string }{
		{"GET", "/metrics", ""}, {"GET", "/v1/models", ""}, {"GET", "/health", ""},
		{"GET", "/props", ""}, {"POST", "/tokenize", `{"prompt":"hi"}`},
	}
	for i := 0; i < n; i++ {
		body := simChat
		if i%4 == 3 {
			body = `{"stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}` // no model: vLLM serves its own
		}
		if st := send(t, "POST", m.URL()+"/v1/chat/completions", body, nil); st != 200 {
			t.Fatalf("chat: %d", st)
		}
		for _, p := range probes {
			send(t, p.method, m.URL()+p.path, p.body, nil)
		}
	}
	m.settle(t)

	tenant := m.sloSnapshot(t).Tenants
	if len(tenant) != 1 {
		t.Fatalf("tenants %+v", tenant)
	}
	w := tenant[0].Windows["5m"]
	if w.Requests != n || w.Good != n || float64(w.Attainment) != 1 || w.E2E.Count != n {
		t.Fatalf("5m: requests %d good %d attainment %v e2e count %d", w.Requests, w.Good, w.Attainment, w.E2E.Count)
	}
	prof := m.profile(t).Tenants[0].Profile
	if prof.Arrivals != n || prof.Requests != n || prof.InterArrival.Count != n-1 {
		t.Fatalf("profile: arrivals %d requests %d gaps %d, want %d, %d, %d", prof.Arrivals, prof.Requests, prof.InterArrival.Count, n, n, n-1)
	}
	if got := m.sum(t, "goodput_requests_total", nil); got != n*(1+float64(len(probes))) {
		t.Fatalf("goodput_requests_total %v", got)
	}
	if got := m.sum(t, "goodput_slo_requests_total", nil); got != n {
		t.Fatalf("goodput_slo_requests_total %v", got)
	}
	for _, h := range []string{"goodput_request_duration_seconds", "goodput_proxy_overhead_seconds"} {
		if got := m.sum(t, h, nil); got != n {
			t.Errorf("%s: %v observations, want %d", h, got, n)
		}
	}
	for model, want := range map[string]float64{"sim-llama": n * 3 / 4, export.None: n / 4} {
		if got := m.sum(t, "goodput_requests_total", map[string]string{"model": model, "route": "chat"}); got != want {
			t.Errorf("goodput_requests_total{model=%q,route=chat} = %v, want %v", model, got, want)
		}
		if got := m.sum(t, "goodput_slo_requests_total", map[string]string{"model": model}); got != want {
			t.Errorf("goodput_slo_requests_total{model=%q} = %v, want %v", model, got, want)
		}
	}
}

// 32 requests with bogus model names, refused by the engine (404), take no
// label slot: the real model that comes next keeps its name (the issue: it
// became model="other").
func TestGatewayRefusedValuesTakeNoLabelSlot(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: time.Millisecond, ITL: time.Millisecond})
	m := startMetered(t, Config{Upstream: simURL}, map[string]*slo.Class{"all": {E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.9, CountClientErrors: true}}, "all")
	for i := 0; i < 32; i++ {
		body := strings.Replace(simChat, "sim-llama", fmt.Sprint("bogus-", i), 1)
		if st := send(t, "POST", m.URL()+"/v1/chat/completions", body, map[string]string{"X-Tenant": fmt.Sprint("junk-", i)}); st != 404 {
			t.Fatalf("bogus model: %d", st)
		}
	}
	// The real model's first request fails (an engine still loading): it
	// is its own miss, not other's.
	if st := send(t, "POST", m.URL()+"/v1/chat/completions", simChat, map[string]string{"X-Tenant": "acme", "X-Sim-Fault": "status=503"}); st != 503 {
		t.Fatalf("real model, failing: %d", st)
	}
	if st := send(t, "POST", m.URL()+"/v1/chat/completions", simChat, map[string]string{"X-Tenant": "acme"}); st != 200 {
		t.Fatalf("real model: %d", st)
	}
	m.settle(t)
	for _, metric := range []string{"goodput_requests_total", "goodput_slo_requests_total"} {
		if got := m.sum(t, metric, map[string]string{"tenant": "acme", "model": "sim-llama"}); got != 2 {
			t.Errorf("%s{tenant=acme,model=sim-llama} = %v", metric, got)
		}
		if got := m.sum(t, metric, map[string]string{"tenant": export.Other, "model": export.Other}); got != 32 {
			t.Errorf("%s{tenant=other,model=other} = %v, want the 32 refused requests", metric, got)
		}
	}
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != 0 {
		t.Errorf("in flight %v", got)
	}
	// Neither the live view nor the profile keeps a series of a refused
	// value.
	for _, tp := range m.profile(t).Tenants {
		for _, mp := range tp.Models {
			if strings.HasPrefix(mp.Model, "bogus") || strings.HasPrefix(tp.Tenant, "junk") {
				t.Errorf("profile series %s/%s", tp.Tenant, mp.Model)
			}
		}
	}
}

// Requests refused for the client's own mistake are logged and counted but
// not judged; a class with count_client_errors judges them. 429s stay
// misses either way.
func TestGatewayClientMistakesNotJudged(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: time.Millisecond, ITL: time.Millisecond})
	for _, count := range []bool{false, true} {
		t.Run(fmt.Sprint("count_client_errors=", count), func(t *testing.T) {
			classes := map[string]*slo.Class{"c": {E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.99, CountClientErrors: count}}
			m := startMetered(t, Config{Upstream: simURL, MaxBodyBytes: 4096}, classes, "c")
			mistakes := []struct {
				method, path, body string
				status             int
			}{
				{"POST", "/v1/chat/completions", `{"model":"sim-llama",`, 400},                           // bad JSON, the engine says
				{"POST", "/v1/chat/completions", strings.Replace(simChat, "sim-llama", "gpt-9", 1), 404}, // unknown model
				{"POST", "/v1/chat/completions", `{"model":"sim-llama","messages":[` + strings.Repeat(" ", 5000) + `]}`, 413},
				{"GET", "/v1/chat/completions", "", 405}, // not inference: never judged
			}
			for _, c := range mistakes {
				if st := send(t, c.method, m.URL()+c.path, c.body, nil); st != c.status {
					t.Fatalf("%s %s: %d, want %d", c.method, c.path, st, c.status)
				}
			}
			if st := send(t, "POST", m.URL()+"/v1/chat/completions", simChat, map[string]string{"X-Sim-Fault": "status=429"}); st != 429 {
				t.Fatalf("429: %d", st)
			}
			if st := send(t, "POST", m.URL()+"/v1/chat/completions", simChat, nil); st != 200 {
				t.Fatalf("good: %d", st)
			}
			m.settle(t)
			judged, misses := 2.0, 1.0 // the 429 and the good one
			if count {
				judged, misses = 5, 4 // and the three inference mistakes
			}
			if got := m.sum(t, "goodput_slo_requests_total", nil); got != judged {
				t.Errorf("judged %v, want %v", got, judged)
			}
			if got := m.sum(t, "goodput_slo_requests_total", map[string]string{"result": "miss"}); got != misses {
				t.Errorf("misses %v, want %v", got, misses)
			}
			if got := m.sum(t, "goodput_slo_misses_total", map[string]string{"reason": "error"}); got != misses {
				t.Errorf("misses for error %v, want %v", got, misses)
			}
			if got := m.sum(t, "goodput_requests_total", nil); got != 6 {
				t.Errorf("goodput_requests_total %v, want every request (6)", got)
			}
			if w := m.sloSnapshot(t).Tenants[0].Windows["5m"]; float64(w.Requests) != judged {
				t.Errorf("live view requests %d", w.Requests)
			}
		})
	}
}

// rawExchange sends a raw request on a connection of its own and returns
// the response status line.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	io.Copy(io.Discard, br) // Connection: close: read to the end
	return strings.TrimSpace(line)
}

func rawChat(tenant, body string) string {
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: %s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tenant, len(body), body)
}

// A label value that is not valid UTF-8 panicked the Prometheus client and
// ended the process: a tenant header with a bad byte, a model name with one
// on a request the engine answers, or the gateway itself. Every such value
// is "other" in every metric.
func TestGatewayInvalidUTF8Labels(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: time.Millisecond, ITL: time.Millisecond})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // connections are refused: the gateway answers 502
	classes := map[string]*slo.Class{"c": {E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.99, CountClientErrors: true}}
	badModel := strings.Replace(simChat, "sim-llama", "m\xff", 1)
	for _, c := range []struct {
		name, upstream, tenant, body, status string
		wantTenant, wantModel                string
	}{
		{"tenant header, engine answers", simURL, "t\xff", simChat, "200", export.Other, "sim-llama"},
		{"model, engine answers", simURL, "acme", badModel, "404", export.Other, export.Other},
		{"model, gateway answers", deadURL, "acme", badModel, "502", "acme", export.Other},
		{"tenant and model, gateway answers", deadURL, "t\xfe", badModel, "502", export.Other, export.Other},
		{"valid values, engine answers", simURL, "acme", simChat, "200", "acme", "sim-llama"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := startMetered(t, Config{Upstream: c.upstream}, classes, "c")
			if line := rawExchange(t, m.addr, rawChat(c.tenant, c.body)); !strings.Contains(line, " "+c.status+" ") {
				t.Fatalf("response %q, want %s", line, c.status)
			}
			m.settle(t)
			// (acme on a request refused as the client's mistake takes
			// no slot: "other" too; on a failed one it does.)
			wantTenant, wantModel := c.wantTenant, c.wantModel
			for _, metric := range []string{"goodput_requests_total", "goodput_slo_requests_total"} {
				if got := m.sum(t, metric, map[string]string{"tenant": wantTenant, "model": wantModel}); got != 1 {
					t.Errorf("%s{tenant=%q,model=%q} = %v", metric, wantTenant, wantModel, got)
				}
			}
			if got := m.sum(t, "goodput_in_flight_requests", nil); got != 0 {
				t.Errorf("in flight %v", got)
			}
		})
	}
}

type verdictJudge struct{}

func (verdictJudge) Begin(*meter.Record) {}
func (verdictJudge) Judge(rec *meter.Record) {
	rec.SLO, rec.Judged, rec.Good = "c", true, true
}

// Judging is a step of its own: every sink sees the verdict, whatever the
// sinks' order.
func TestJudgeRunsBeforeSinks(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	sawVerdict := make(chan bool, 1)
	g := startGateway(t, Config{Upstream: up.URL(), Judge: verdictJudge{}, Sink: RecordFunc(func(rec *meter.Record) {
		sawVerdict <- rec.Judged && rec.SLO == "c"
	})})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	if !<-sawVerdict {
		t.Fatal("the first sink saw the record before it was judged")
	}
	if rec := g.record(t); !rec.Judged {
		t.Fatalf("record %+v", rec)
	}
}

// A model name a megabyte long, which an engine that ignores the model
// (llama.cpp) answers, is the label "other" in /metrics, in the SLO
// counters and in the admin API's series, as is a tenant named that long:
// it made every scrape grow from 89 KB to 220 MB, and the admin API's
// answers to 1 MB. A 200-byte model keeps its name. (The request log keeps
// the name whole: one line per request.)
func TestGatewayLongModelIsOther(t *testing.T) {
	const answer = `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	m := startMetered(t, Config{Upstream: up.URL()}, generous, "generous")
	huge, long200 := strings.Repeat("m", 1<<20), strings.Repeat("x", 200)
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	for _, c := range []struct{ tenant, model string }{{"acme", huge}, {strings.Repeat("t", 1000), "llama"}, {"acme", long200}} {
		if st := send(t, "POST", m.URL()+"/v1/chat/completions", chat(c.model), map[string]string{"X-Tenant": c.tenant}); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	m.settle(t)
	for _, c := range []struct{ tenant, model string }{{"acme", export.Other}, {export.Other, "llama"}, {"acme", long200}} {
		for _, metric := range []string{"goodput_requests_total", "goodput_slo_requests_total"} {
			if got := m.sum(t, metric, map[string]string{"tenant": c.tenant, "model": c.model}); got != 1 {
				t.Errorf("%s{tenant=%.20q…,model=%.20q…} = %v, want 1", metric, c.tenant, c.model, got)
			}
		}
	}
	tooLong := huge[:export.MaxLabelBytes+1]
	for _, c := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}), "/metrics"},
		{"/admin/api/slo", m.judger.SLOHandler(), "/admin/api/slo"},
		{"/admin/api/profile", m.judger.ProfileHandler(), "/admin/api/profile?window=5m"},
	} {
		rr := httptest.NewRecorder()
		c.h.ServeHTTP(rr, httptest.NewRequest("GET", c.path, nil))
		if rr.Code != 200 || rr.Body.Len() > 256<<10 || strings.Contains(rr.Body.String(), tooLong) || strings.Contains(rr.Body.String(), strings.Repeat("t", 1000)) {
			t.Errorf("%s: status %d, %d bytes", c.name, rr.Code, rr.Body.Len())
		}
	}
}

// A tenant's slo_by_model follows the model the limits match: a request
// that names llama-70b by its alias, or names no model (llama-70b is the
// default model, which the engine runs for it), is judged by llama-70b's
// class, as one naming it; a model the tenant does not list by the
// tenant's class. The record and the metrics keep the name the request
// gave. Judged by the name alone, the alias's and the unnamed requests
// were judged by the tenant's class (interactive), whatever their model.
// So too for a request the limits refuse (429, too large for llama-70b's
// tpm) and, with Redis out of reach and fail_closed, for every request
// (503): each is judged, and by its model's class.
func TestSLOByModelFollowsMatchedModel(t *testing.T) {
	for _, backend := range []string{"local", "redis", "redis down"} {
		t.Run(backend, func(t *testing.T) { testSLOByModelFollowsMatchedModel(t, backend) })
	}
}

func testSLOByModelFollowsMatchedModel(t *testing.T, backend string) {
	up := startRawUpstream(t, vllmUpstream(0))
	// A limit, so that Redis is asked (a tenant without one is not).
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
	tc.Models = map[string]ratelimit.Limits{"llama-70b": {TPM: 100000}, "llama-8b": {}}
	tc.ModelAliases = map[string][]string{"llama-70b": {"big"}}
	tc.ModelDefault = map[string]bool{"llama-70b": true}
	tc.SLO, tc.SLOByModel = "interactive", map[string]string{"llama-70b": "batch"}
	if err := ratelimit.ValidateTenants([]ratelimit.TenantConfig{tc}); err != nil {
		t.Fatal(err)
	}
	var bc ratelimit.BackendConfig
	down := backend == "redis down"
	switch backend {
	case "redis":
		bc = ratelimit.BackendConfig{Backend: "redis", Redis: ratelimit.RedisConfig{URL: redisURL(t), KeyPrefix: fmt.Sprintf("gp-test-%d", time.Now().UnixNano())}}
	case "redis down":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close() // nothing listens there: every call fails at once
		bc = ratelimit.BackendConfig{Backend: "redis", OnBackendError: ratelimit.FailClosed, Redis: ratelimit.RedisConfig{URL: "redis://" + ln.Addr().String() + "/0"}}
	}
	store, gate := newKeysAndGate(t, bc, tc)

	tenants := export.NewLabelSet(nil, 0)
	lab := export.NewLabeler(tenants, export.NewLabelSet(nil, 0))
	reg := prometheus.NewRegistry()
	classes := map[string]*slo.Class{
		"interactive": {TTFT: cfgtypes.Duration(5 * time.Second), Objective: 0.99},
		"batch":       {E2E: cfgtypes.Duration(time.Minute), Objective: 0.9},
	}
	j, err := slo.NewJudger(slo.JudgerOptions{Config: slo.Config{SLOs: classes}, Labels: lab, Registry: reg,
		Tenants: []slo.TenantClasses{{Name: tc.Name, Class: tc.SLO, ByModel: tc.SLOByModel}}})
	if err != nil {
		t.Fatal(err)
	}
	m := &metered{gateway: startGateway(t, Config{Upstream: up.URL(), Keys: store, Limits: gate, Judge: j, Sink: export.NewMetrics(reg, lab)}), reg: reg, judger: j}

	auth := map[string]string{"Authorization": "Bearer " + key}
	type judgedCase struct {
		model, body, want string
		status            int
	}
	cases := []judgedCase{
		{"big", `{"model":"big","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "batch", 200},
		{"", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "batch", 200},
		{"llama-70b", `{"model":"llama-70b","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "batch", 200},
		{"llama-8b", `{"model":"llama-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "interactive", 200},
		{"unknown", `{"model":"unknown","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "interactive", 200},
		// Too large for llama-70b's tpm: refused by its limit.
		{"big", `{"model":"big","max_tokens":200000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "batch", 429},
		{"", `{"max_tokens":200000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "batch", 429},
	}
	for _, c := range cases {
		if down {
			c.status = 503
		}
		before := m.sum(t, "goodput_slo_requests_total", map[string]string{"tenant": "acme", "slo": c.want})
		if status, _, _, err := post(t, m.URL()+"/v1/chat/completions", c.body, auth); err != nil || status != c.status {
			t.Fatalf("%s: status %d err %v; want %d", c.body, status, err, c.status)
		}
		rec := m.record(t)
		if !rec.Judged || rec.SLO != c.want || rec.Model != c.model {
			t.Errorf("%s (%d): judged %v by %q, model %q in the record; want judged by %q, model %q", c.body, c.status, rec.Judged, rec.SLO, rec.Model, c.want, c.model)
		}
		if got := m.sum(t, "goodput_slo_requests_total", map[string]string{"tenant": "acme", "slo": c.want}); got != before+1 {
			t.Errorf("%s (%d): goodput_slo_requests_total{slo=%q} went from %v to %v, want one more", c.body, c.status, c.want, before, got)
		}
		if c.status != 200 {
			continue
		}
		label := c.model
		if label == "" {
			label = export.None
		}
		if got := m.sum(t, "goodput_slo_requests_total", map[string]string{"tenant": "acme", "model": label, "slo": c.want}); got != 1 {
			t.Errorf("goodput_slo_requests_total{model=%q,slo=%q} = %v, want 1", label, c.want, got)
		}
	}
}

// One model label carries one class. A request that names no model is
// judged by its tenant's default model's class (slo_by_model), under the
// model label "none"; a request that ends before the gateway has read its
// model (a body that did not arrive in time, 408; one refused for the
// memory its body would take, 503) has no model to match and is judged by
// the tenant's class: under a label of its own, "unread", not beside the
// requests that name none (the series model "none" had both classes, and
// the admin report left its class out as mixed).
func TestModelUnreadHasItsOwnLabel(t *testing.T) {
	t.Run("408", func(t *testing.T) {
		m, key := modelUnreadGateway(t, Config{ReadBodyTimeout: 300 * time.Millisecond})
		conn, err := net.Dial("tcp", m.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"model":"llama-8b","stream":true,"messages":[]}`
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body[:10])
		if answer, took, closed := readAnswer(t, conn, 10*time.Second); !closed || !strings.HasPrefix(answer, "HTTP/1.1 408 ") {
			t.Fatalf("a body cut short: %q after %v (closed %v), want 408", answer, took, closed)
		}
		checkModelUnread(t, m, 408)
	})
	t.Run("503", func(t *testing.T) {
		m, key := modelUnreadGateway(t, Config{MaxBodyBytes: 64 << 10, MaxBodyMemory: 64 << 10})
		heads := make(chan struct{}, 2)
		testHookHeaders = func() { heads <- struct{}{} }
		defer func() { testHookHeaders = nil }()
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\nContent-Length: 40000\r\n\r\n"
		var conns [2]net.Conn
		for i := range conns {
			c, err := net.Dial("tcp", m.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, head)
			<-heads // its body's room reserved (the first) or refused (the second)
			conns[i] = c
		}
		if answer, took, closed := readAnswer(t, conns[1], 10*time.Second); !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") {
			t.Fatalf("no room for the body: %q after %v (closed %v), want 503", answer, took, closed)
		}
		checkModelUnread(t, m, 503)
		conns[0].Close() // left before its body: not judged (no first byte)
		if rec := m.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Judged {
			t.Fatalf("the first: %+v, want a client abort, not judged", rec)
		}
	})
}

// modelUnreadGateway starts a metered gateway with cfg's bounds, whose
// tenant acme has two models, llama-70b its default (class batch), and the
// class interactive; and sends it a request that names no model (judged
// by batch).
func modelUnreadGateway(t *testing.T, cfg Config) (*metered, string) {
	up := startRawUpstream(t, vllmUpstream(0))
	tc, key := tenantWithKey(t, "acme", ratelimit.Limits{RPM: 6000})
	tc.Models = map[string]ratelimit.Limits{"llama-70b": {}, "llama-8b": {}}
	tc.ModelDefault = map[string]bool{"llama-70b": true}
	tc.SLO, tc.SLOByModel = "interactive", map[string]string{"llama-70b": "batch"}
	store, gate := newKeysAndGate(t, ratelimit.BackendConfig{}, tc)
	lab := export.NewLabeler(export.NewLabelSet(nil, 0), export.NewLabelSet(nil, 0))
	reg := prometheus.NewRegistry()
	classes := map[string]*slo.Class{
		"interactive": {TTFT: cfgtypes.Duration(5 * time.Second), Objective: 0.99},
		"batch":       {E2E: cfgtypes.Duration(time.Minute), Objective: 0.9},
	}
	j, err := slo.NewJudger(slo.JudgerOptions{Config: slo.Config{SLOs: classes}, Labels: lab, Registry: reg,
		Tenants: []slo.TenantClasses{{Name: tc.Name, Class: tc.SLO, ByModel: tc.SLOByModel}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream, cfg.Keys, cfg.Limits, cfg.Judge, cfg.Sink = up.URL(), store, gate, j, export.NewMetrics(reg, lab)
	m := &metered{gateway: startGateway(t, cfg), reg: reg, judger: j}
	auth := map[string]string{"Authorization": "Bearer " + key}
	if status, _, _, err := post(t, m.URL()+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, auth); err != nil || status != 200 {
		t.Fatalf("no model: status %d err %v", status, err)
	}
	if rec := m.record(t); !rec.Judged || rec.SLO != "batch" || rec.Model != "" || rec.ModelUnread {
		t.Fatalf("no model: judged %v by %q, model %q, unread %v; want judged by batch, model read and none", rec.Judged, rec.SLO, rec.Model, rec.ModelUnread)
	}
	return m, key
}

// checkModelUnread checks the record of a request refused before its
// model was read (status), and that each model label of m's metrics and
// live view has one class: "none" batch's, "unread" interactive's.
func checkModelUnread(t *testing.T, m *metered, status int) {
	t.Helper()
	if rec := m.record(t); !rec.Judged || rec.SLO != "interactive" || rec.Model != "" || !rec.ModelUnread || rec.Status != status {
		t.Fatalf("status %d, judged %v by %q, model %q, unread %v; want %d judged by interactive, model unread", rec.Status, rec.Judged, rec.SLO, rec.Model, rec.ModelUnread, status)
	}
	for _, c := range []struct {
		model, slo string
		want       float64
	}{
		{export.None, "batch", 1}, {export.None, "interactive", 0},
		{export.Unread, "interactive", 1}, {export.Unread, "batch", 0},
	} {
		if got := m.sum(t, "goodput_slo_requests_total", map[string]string{"tenant": "acme", "model": c.model, "slo": c.slo}); got != c.want {
			t.Errorf("goodput_slo_requests_total{model=%q,slo=%q} = %v, want %v", c.model, c.slo, got, c.want)
		}
	}
	if got := m.sum(t, "goodput_requests_total", map[string]string{"tenant": "acme", "model": export.Unread, "outcome": "rejected"}); got != 1 {
		t.Errorf("goodput_requests_total{model=unread,outcome=rejected} = %v, want 1", got)
	}
	// The live view (what the admin report reads): one class a model.
	for _, ts := range m.sloSnapshot(t).Tenants {
		for _, ms := range ts.Models {
			if len(ms.SLOs) != 1 {
				t.Errorf("tenant %s, model %q judged by %v: want one class", ts.Tenant, ms.Model, ms.SLOs)
			}
		}
	}
}
