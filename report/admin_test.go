package report

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/slo"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// adminGateway serves a real slo.Judger's admin handlers, fed with records
// at known times: T0 = 10:00:00, the snapshot at 10:04:30.
//
//	acme:   4 good llama, 1 mistral over the 500ms TTFT bound, 1 llama upstream error
//	globex: 2 good llama
func adminGateway(t *testing.T) (*httptest.Server, time.Time) {
	t.Helper()
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: t0}
	j, err := slo.NewJudger(slo.JudgerOptions{
		Config: slo.Config{SLOs: map[string]*slo.Class{
			"interactive": {TTFT: cfgtypes.Duration(500 * time.Millisecond), Objective: 0.9},
		}},
		DefaultClass: "interactive",
		Now:          clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(tenant, model string, at time.Duration, outcome meter.Outcome, ttft time.Duration, isl, osl int) {
		start := t0.Add(at)
		r := &meter.Record{Start: start, Tenant: tenant, Model: model, Route: "chat", Stream: true, Outcome: outcome,
			ISL: isl, OSL: osl, TTFT: ttft, E2E: ttft + 100*time.Millisecond, TPOT: 10 * time.Millisecond, TTFTContent: ttft,
			ITL: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, UsageSource: meter.UsageUpstream,
			// A role chunk and one event per token; mistral's merged two
			// tokens per event.
			Events: osl + 1}
		if model == "mistral" {
			r.Events = osl / 2
		}
		if outcome != meter.OutcomeOK {
			r.ISL, r.OSL, r.TTFT, r.TPOT, r.E2E, r.ITL = meter.Unknown, meter.Unknown, meter.Unknown, meter.Unknown, meter.Unknown, nil
		}
		clock.set(start)
		j.Begin(r)
		clock.set(start.Add(time.Second))
		j.Judge(r)
	}
	for i := range 4 {
		rec("acme", "llama", time.Duration(120+10*i)*time.Second, meter.OutcomeOK, 100*time.Millisecond, 3000, 100)
	}
	rec("acme", "mistral", 200*time.Second, meter.OutcomeOK, 900*time.Millisecond, 100, 2000)
	rec("acme", "llama", 210*time.Second, meter.OutcomeUpstreamError, 0, 0, 0)
	rec("globex", "llama", 220*time.Second, meter.OutcomeOK, 100*time.Millisecond, 10, 10)
	rec("globex", "llama", 230*time.Second, meter.OutcomeOK, 100*time.Millisecond, 10, 10)
	snap := t0.Add(4*time.Minute + 30*time.Second)
	clock.set(snap)
	mux := http.NewServeMux()
	mux.Handle("/admin/api/slo", j.SLOHandler())
	mux.Handle("/admin/api/profile", j.ProfileHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, snap
}

func TestFromAdmin(t *testing.T) {
	srv, snap := adminGateway(t)
	r, err := FromAdmin(context.Background(), srv.URL+"/", Query{Tenant: "acme", From: snap.Add(-5 * time.Minute), To: snap, Now: snap})
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != (Source{Kind: SourceAdmin, URL: srv.URL, Window: "5m"}) {
		t.Errorf("source %+v", r.Source)
	}
	// A URL's password is not written into the report, which is shared
	// (a new user's probe: it was, in its heading, source and notes).
	withPw := strings.Replace(srv.URL, "http://", "http://user:SecretPw@", 1)
	rp, err := FromAdmin(context.Background(), withPw, Query{Tenant: "acme", From: snap.Add(-5 * time.Minute), To: snap, Now: snap})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(rp); strings.Contains(string(b), "SecretPw") || !strings.Contains(rp.Source.URL, "user:xxxxx@") {
		t.Errorf("the report holds the URL's password: %s", b)
	}
	for _, bad := range []string{withPw + "/?x=1", strings.Replace(withPw, "http://", "ftp://", 1), "http://user:SecretPw@"} {
		if _, err := FromAdmin(context.Background(), bad, Query{Tenant: "acme", From: snap.Add(-5 * time.Minute), To: snap, Now: snap}); err == nil || strings.Contains(err.Error(), "SecretPw") {
			t.Errorf("%s: %v, want an error without the password", bad, err)
		}
	}
	// The 5m window at 10:04:30 starts at 10:00:00 (five minute slots).
	if r.Period.Seconds != 270 || !r.Period.To.Equal(snap) || !r.Period.From.Equal(snap.Add(-270*time.Second)) {
		t.Errorf("period %+v, want 10:00:00 to 10:04:30 (270 s)", r.Period)
	}
	exact := func(name string, got Num, want float64) {
		t.Helper()
		if float64(got) != want {
			t.Errorf("%s = %v, want %v", name, float64(got), want)
		}
	}
	exact("requests", r.SLO.Requests, 6)
	exact("good", r.SLO.Good, 4)
	exact("misses", r.SLO.Misses, 2)
	exact("attainment", r.SLO.Attainment, 4.0/6)
	exact("objective", r.SLO.Objective, 0.9)
	exact("good output tokens", r.Goodput.GoodOutputTokens, 400)
	exact("output tokens", r.Throughput.OutputTokens, 2400)
	exact("good req/s", r.Goodput.GoodRequestsPerSecond, 4.0/270)
	exact("arrivals", r.Traffic.Arrivals, 6)
	if got := float64(r.SLO.ErrorBudgetUsed); got < 3.333 || got > 3.334 {
		t.Errorf("budget used %v, want 2 misses / 0.6 allowed", got)
	}
	for _, rc := range r.SLO.MissReasons {
		want := map[string]Num{"ttft": 1, "error": 1}[rc.Reason]
		if rc.Count != want {
			t.Errorf("misses for %s = %v, want %v", rc.Reason, rc.Count, want)
		}
	}
	if len(r.SLO.Classes) != 1 || r.SLO.Classes[0].Name != "interactive" || r.SLO.Classes[0].Objective != 0.9 {
		t.Errorf("classes %+v", r.SLO.Classes)
	}
	if len(r.Models) != 2 || r.Models[0].Model != "llama" || r.Models[0].Requests != 5 || r.Models[0].Good != 4 ||
		r.Models[1].Model != "mistral" || r.Models[1].Requests != 1 || r.Models[1].Good != 0 || r.Models[1].Attainment != 0 {
		t.Errorf("models %+v", r.Models)
	}
	// Latency of the 5 ok requests: 4 at 100ms, 1 at 900ms (sketch: 0.5%).
	exact("ttft count", r.Latency.TTFT.Count, 5)
	exact("ttft max", r.Latency.TTFT.Max, 0.9)
	if p50 := float64(r.Latency.TTFT.P50); p50 < 0.0995 || p50 > 0.1005 {
		t.Errorf("TTFT p50 %v, want 100ms within 0.5%%", p50)
	}
	// What ITL measured: 4 streams with a role chunk (OSL below the
	// events), 1 with merged tokens (above).
	te := r.Latency.TokenEvents
	exact("token-event requests", te.Requests, 5)
	exact("osl ≠ events", te.OSLNotEvents, 5)
	exact("osl above events", te.OSLAboveEvents, 1)
	exact("osl below events", te.OSLBelowEvents, 4)
	exact("multi-token", te.MultiTokenEvents, 1)
	// Shapes: 4 rag (ISL 3000, OSL 100), 1 longgen (100 → 2000), 1 unmeasured.
	exact("rag", r.Traffic.Shapes.Counts["rag"], 4)
	exact("longgen", r.Traffic.Shapes.Counts["longgen"], 1)
	exact("unknown shape", r.Traffic.Shapes.Counts["unknown"], 1)
	exact("rag share", r.Traffic.Shapes.Fractions["rag"], 0.8)
	if r.Traffic.Shapes.Traffic != "rag" {
		t.Errorf("traffic %q, want rag (80%% is the dominant share)", r.Traffic.Shapes.Traffic)
	}
	exact("ISL min", r.Traffic.ISL.Min, 100)
	exact("ISL max", r.Traffic.ISL.Max, 3000)
	if len(r.Traffic.ISL.Buckets) != len(slo.TokenBucketBounds)+1 || r.Traffic.ISL.Buckets[len(r.Traffic.ISL.Buckets)-1].LE != "+Inf" {
		t.Errorf("ISL buckets %+v", r.Traffic.ISL.Buckets)
	}
	if r.Traffic.Concurrency.Method != "exact" || r.Traffic.Concurrency.Peak != 1 {
		t.Errorf("concurrency %+v, want exact with peak 1", r.Traffic.Concurrency)
	}
	if r.Hours != nil || r.WorstHours != nil {
		t.Error("the admin API has no hours")
	}

	// A period longer than 5m takes the 1h window; one that starts more
	// than 24h ago takes 24h and says the rest is missing.
	r, err = FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: snap.Add(-20 * time.Minute), To: snap, Now: snap})
	if err != nil || r.Source.Window != "1h" || r.SLO.Requests != 6 {
		t.Errorf("20 minutes: %v, window %q, %v requests", err, r.Source.Window, r.SLO.Requests)
	}
	r, err = FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: snap.Add(-72 * time.Hour), To: snap, Now: snap})
	if err != nil || r.Source.Window != "24h" || !strings.Contains(strings.Join(r.Notes, " "), "only its last 24h are reported") {
		t.Errorf("72 hours: %v, window %q, notes %q", err, r.Source.Window, r.Notes)
	}
}

func TestFromAdminUnknownTenant(t *testing.T) {
	srv, snap := adminGateway(t)
	r, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "initech", From: snap.Add(-time.Hour), To: snap, Now: snap})
	if err != nil {
		t.Fatal(err)
	}
	if r.SLO.Requests != 0 || Known(r.SLO.Attainment) || Known(r.SLO.Objective) || r.Traffic.Arrivals != 0 {
		t.Errorf("unknown tenant: requests %v attainment %v objective %v", r.SLO.Requests, r.SLO.Attainment, r.SLO.Objective)
	}
	if !strings.Contains(strings.Join(r.Notes, " "), `no judged requests from tenant "initech"`) {
		t.Errorf("notes %q", r.Notes)
	}
}

func TestChooseWindow(t *testing.T) {
	for _, c := range []struct {
		from, to time.Duration // before now
		want     string
		covered  bool
	}{
		{5 * time.Minute, 0, "5m", true},
		{3 * time.Minute, time.Minute, "5m", true},
		{5*time.Minute + time.Second, 0, "1h", true},
		{time.Hour, 0, "1h", true},
		{2 * time.Hour, time.Hour, "24h", true},
		{24 * time.Hour, 0, "24h", true},
		{48 * time.Hour, 0, "24h", false},
		{48 * time.Hour, 23 * time.Hour, "24h", false},
	} {
		w, covered, err := chooseWindow(now.Add(-c.from), now.Add(-c.to), now)
		if err != nil || w.Name != c.want || covered != c.covered {
			t.Errorf("from -%v to -%v: %q covered %v err %v; want %q covered %v", c.from, c.to, w.Name, covered, err, c.want, c.covered)
		}
	}
	if _, _, err := chooseWindow(now.Add(-72*time.Hour), now.Add(-25*time.Hour), now); err == nil || !strings.Contains(err.Error(), "--prometheus") {
		t.Errorf("a period that ended before the 24h window: %v", err)
	}
}

// A period that ends before the gateway's window begins (it started after
// the period) is refused, not answered with the window instead (found by a
// new-user probe: a report for an hour ago to half an hour ago, of a
// gateway started 10 minutes before, reported those 10 minutes, exit 0).
func TestFromAdminPeriodBeforeTheGatewayStarted(t *testing.T) {
	srv, snap := adminGateway(t)
	_, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: snap.Add(-time.Hour), To: snap.Add(-30 * time.Minute), Now: snap})
	if err == nil || !strings.Contains(err.Error(), "before the admin API's 1h window begins") {
		t.Fatalf("error %v, want a refusal", err)
	}
	// A period that overlaps the window is reported, with a note.
	if _, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: snap.Add(-time.Hour), To: snap.Add(-time.Minute), Now: snap}); err != nil {
		t.Fatal(err)
	}
}

func TestFromAdminErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/admin/api/slo", func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.RawQuery, "tenant=bad") {
			w.Write([]byte(`{"time": "yesterday"}`))
			return
		}
		w.Write([]byte(`{"time":"2026-01-05T10:00:00Z","tenants":[]}`))
	})
	mux.HandleFunc("/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"format":"goodput.profile","version":9,"tenants":[]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	q := Query{Tenant: "acme", From: now.Add(-time.Hour), To: now, Now: now}
	for _, c := range []struct {
		base, tenant, want string
	}{
		{srv.URL + "/nothing", "acme", "HTTP 404 (is this a goodput gateway's admin listener"},
		{srv.URL, "bad", "is not the expected JSON"},
		{srv.URL, "acme", `profile of format "goodput.profile" version 9`},
		{"ftp://x", "acme", "admin URL"},
	} {
		q := q
		q.Tenant = c.tenant
		_, err := FromAdmin(context.Background(), c.base, q)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s tenant %s: error %v, want one naming %q", c.base, c.tenant, err, c.want)
		}
	}
}

// With a class per model (slo_by_model), each class's counts are its
// models' counts, where the report said unknown.
func TestFromAdminClassesByModel(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: t0}
	j, err := slo.NewJudger(slo.JudgerOptions{
		Config: slo.Config{SLOs: map[string]*slo.Class{
			"interactive": {TTFT: cfgtypes.Duration(500 * time.Millisecond), Objective: 0.9},
			"batch":       {E2E: cfgtypes.Duration(30 * time.Second), Objective: 0.5},
		}},
		Tenants: []slo.TenantClasses{{Name: "acme", Class: "interactive", ByModel: map[string]string{"mistral": "batch"}}},
		Now:     clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(model string, at time.Duration, outcome meter.Outcome, ttft time.Duration) {
		start := t0.Add(at)
		r := &meter.Record{Start: start, Tenant: "acme", Model: model, Route: "chat", Stream: true, Outcome: outcome,
			ISL: 10, OSL: 3, TTFT: ttft, TTFTContent: ttft, E2E: ttft + 20*time.Millisecond, TPOT: 10 * time.Millisecond,
			ITL: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, Events: 3, UsageSource: meter.UsageUpstream}
		clock.set(start)
		j.Begin(r)
		clock.set(start.Add(time.Second))
		j.Judge(r)
	}
	for i := range 4 {
		rec("llama", time.Duration(100+i)*time.Second, meter.OutcomeOK, 100*time.Millisecond)
	}
	rec("llama", 110*time.Second, meter.OutcomeOK, 900*time.Millisecond) // over interactive's TTFT
	rec("mistral", 120*time.Second, meter.OutcomeOK, 900*time.Millisecond)
	rec("mistral", 130*time.Second, meter.OutcomeUpstreamError, 900*time.Millisecond)
	snap := t0.Add(4 * time.Minute)
	clock.set(snap)
	mux := http.NewServeMux()
	mux.Handle("/admin/api/slo", j.SLOHandler())
	mux.Handle("/admin/api/profile", j.ProfileHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: snap.Add(-5 * time.Minute), To: snap, Now: snap})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Class{}
	for _, c := range r.SLO.Classes {
		got[c.Name] = c
	}
	if c := got["interactive"]; c.Requests != 5 || c.Good != 4 || c.Objective != 0.9 {
		t.Errorf("interactive %+v, want 4 of 5 good, objective 0.9", c)
	}
	if c := got["batch"]; c.Requests != 2 || c.Good != 1 || c.Objective != 0.5 {
		t.Errorf("batch %+v, want 1 of 2 good, objective 0.5", c)
	}
}

// Names from the admin API (models, classes, miss reasons, shapes) are
// printed with what a terminal would act on escaped, as Prometheus's
// label values are: the admin API is another process's answer.
func TestFromAdminNamesEscaped(t *testing.T) {
	srv, snap := adminGateway(t)
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(srv.URL + r.URL.RequestURI())
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, name := range []string{"mistral", "interactive", "ttft"} {
			b = bytes.ReplaceAll(b, []byte(`"`+name+`"`), []byte(`"`+name+`\u001b[2J"`))
		}
		w.Write(b)
	}))
	defer hostile.Close()
	r, err := FromAdmin(context.Background(), hostile.URL, Query{Tenant: "acme", From: snap.Add(-5 * time.Minute), To: snap, Now: snap})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := r.Markdown(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	// Escaped for the terminal (\x1b), then for Markdown (\\, \[).
	for _, want := range []string{`mistral\\x1b\[2J`, `interactive\\x1b\[2J`, `ttft\\x1b\[2J`} {
		if !strings.Contains(out, want) {
			t.Errorf("report without %s", want)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an ESC reached the report:\n%s", out)
	}
}

// A window's seconds that no rolling window covers (a broken or hostile
// admin API: 1e300, negative) are refused, not turned into a period: 1e300
// seconds overflowed the period's duration, and the report said it ran
// from 1734 to now, for a negative duration.
func TestFromAdminWindowSecondsChecked(t *testing.T) {
	for _, c := range []struct{ tenantSecs, profileSecs string }{
		{"1e300", "100"}, {"100", "1e300"}, {"-1", "100"}, {"100", "-1"}, {"100", "301"},
	} {
		mux := http.NewServeMux()
		mux.HandleFunc("/admin/api/slo", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"time":"2026-01-05T10:30:00Z","tenants":[{"tenant":"acme","slos":["interactive"],"windows":{"5m":{"seconds":` + c.tenantSecs + `,"requests":1,"good":1}}}]}`))
		})
		mux.HandleFunc("/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"format":"goodput.profile","version":1,"generated_at":"2026-01-05T10:30:00Z","window":"5m","window_seconds":` + c.profileSecs + `,"tenants":[]}`))
		})
		srv := httptest.NewServer(mux)
		r, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: now.Add(-4 * time.Minute), To: now, Now: now})
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "5m window") {
			var p Period
			if r != nil {
				p = r.Period
			}
			t.Errorf("seconds %s, profile %s: error %v (period %v to %v, %v s), want a refusal", c.tenantSecs, c.profileSecs, err, p.From, p.To, p.Seconds)
		}
	}
}

// Figures no gateway answers (a broken or hostile admin API) are refused,
// not reported: 50 good of 10 requests was an attainment of 500% and an
// error budget used of -40000%, an objective of 5 one of 500%.
func TestFromAdminFiguresChecked(t *testing.T) {
	const ok = `"seconds":100,"requests":10,"good":9,"misses":1,"objective":0.99,"output_tokens":100,"good_output_tokens":90,"ttft_seconds":{"count":9,"p50":0.1,"max":0.2}`
	for _, c := range []struct{ tenant, model, want string }{
		{strings.Replace(ok, `"good":9,"misses":1`, `"good":50,"misses":0`, 1), ok, "50 good of 10 requests"},
		{strings.Replace(ok, `"misses":1`, `"misses":7`, 1), ok, "7 misses of 10 requests, 9 good"},
		{strings.Replace(ok, `"good_output_tokens":90`, `"good_output_tokens":900`, 1), ok, "900 good output tokens of 100"},
		{strings.Replace(ok, `"objective":0.99`, `"objective":5`, 1), ok, "an objective of 5"},
		{strings.Replace(ok, `"objective":0.99`, `"objective":-0.5`, 1), ok, "an objective of -0.5"},
		{ok + `,"attainment":3`, ok, "an attainment of 3"},
		{strings.Replace(ok, `"p50":0.1`, `"p50":-1`, 1), ok, "a TTFT of -1 seconds"},
		{ok, strings.Replace(ok, `"good":9,"misses":1`, `"good":11,"misses":0`, 1), `model "llama" with 11 good of 10 requests`},
	} {
		mux := http.NewServeMux()
		mux.HandleFunc("/admin/api/slo", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"time":"2026-01-05T10:30:00Z","tenants":[{"tenant":"acme","slos":["interactive"],"windows":{"5m":{` + c.tenant + `}},"models":[{"model":"llama","slos":["interactive"],"windows":{"5m":{` + c.model + `}}}]}]}`))
		})
		mux.HandleFunc("/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"format":"goodput.profile","version":1,"generated_at":"2026-01-05T10:30:00Z","window":"5m","window_seconds":100,"tenants":[]}`))
		})
		srv := httptest.NewServer(mux)
		_, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: now.Add(-1 * time.Minute), To: now, Now: now})
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "not a gateway's figures") {
			t.Errorf("%s: error %v, want one naming %q", c.want, err, c.want)
		}
	}
	// The same figures, whole, make a report.
	mux := http.NewServeMux()
	mux.HandleFunc("/admin/api/slo", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"time":"2026-01-05T10:30:00Z","tenants":[{"tenant":"acme","slos":["interactive"],"windows":{"5m":{` + ok + `}}}]}`))
	})
	mux.HandleFunc("/admin/api/profile", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"format":"goodput.profile","version":1,"generated_at":"2026-01-05T10:30:00Z","window":"5m","window_seconds":100,"tenants":[]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := FromAdmin(context.Background(), srv.URL, Query{Tenant: "acme", From: now.Add(-1 * time.Minute), To: now, Now: now}); err != nil {
		t.Fatal(err)
	}
}

// A model or tenant named with Markdown's link, emphasis or code
// characters (a client's, through a permissive engine) is text in the
// Markdown report, never a live link (a new user's probe).
func TestMarkdownTextIsEscaped(t *testing.T) {
	for in, want := range map[string]string{
		"[link](javascript:alert(1))": `\[link\](javascript:alert(1))`,
		"*bold* _it_ ~~x~~ `code`":    "\\*bold\\* \\_it\\_ \\~\\~x\\~\\~ \\`code\\`",
		`a\b <i>`:                     `a\\b &lt;i&gt;`,
		"llama-3.1-8b":                "llama-3.1-8b",
	} {
		if got := mdText(in); got != want {
			t.Errorf("mdText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mdCell("a|b_c"); got != `a\|b\_c` {
		t.Errorf("mdCell: %q", got)
	}
}

// A model named like a URL is text in the Markdown report, not one of
// GitHub's literal autolinks: "https://evil.example/login" and
// "www.evil.example" were live links there (rendered by cmark-gfm's and
// goldmark's GFM autolink extension), though the link syntax was escaped.
func TestMarkdownTextNoAutolinks(t *testing.T) {
	for in, want := range map[string]string{
		"https://evil.example/login":    `https\://evil.example/login`,
		"a ftp://evil.example b":        `a ftp\://evil.example b`,
		"www.evil.example/x":            `www\.evil.example/x`,
		"WwW.evil.example":              `WwW\.evil.example`,
		"(http://evil.example)":         `(http\://evil.example)`,
		"meta-llama/Llama-3.1-8B":       "meta-llama/Llama-3.1-8B",
		"org/www-model:v1 on host:8000": "org/www-model:v1 on host:8000",
	} {
		if got := mdText(in); got != want {
			t.Errorf("mdText(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mdCell("https://evil.example|www.x.y"); got != `https\://evil.example\|www\.x.y` {
		t.Errorf("mdCell: %q", got)
	}
}

// A name holding a character reference (&#x202e;, &lt;) is that text in
// the Markdown report, not the character a renderer decodes it to: a model
// "a&#x202e;evil", a valid label (it is ASCII), showed as "alive" there, as
// the bidi override the labels refuse; "ac&#x200b;me" as "acme".
func TestMarkdownTextKeepsCharacterReferences(t *testing.T) {
	for in, want := range map[string]string{
		"a&#x202e;evil":   "a&amp;#x202e;evil",
		"ac&#8203;me":     "ac&amp;#8203;me",
		"&lt;b&gt; & <i>": "&amp;lt;b&amp;gt; & &lt;i&gt;",
	} {
		if got := mdText(in); got != want {
			t.Errorf("mdText(%q) = %q, want %q", in, got, want)
		}
	}
}
