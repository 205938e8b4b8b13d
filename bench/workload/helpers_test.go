package workload

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/slo"
)

// traffic is a request for the gateway's profiler.
type traffic struct {
	tenant, model string
	at            time.Duration // arrival, from the start
	isl, osl      int
}

// gatewayProfile feeds the requests through the gateway's own SLO stage
// (slo.Judger, which classifies and profiles them) on an injected clock,
// each finishing 1 ms after it arrives, and returns the profile document
// its /admin/api/profile handler serves at the end (window 1h).
func gatewayProfile(t testing.TB, reqs []traffic) []byte {
	t.Helper()
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	now := t0
	j, err := slo.NewJudger(slo.JudgerOptions{Now: func() time.Time { return now }, MaxSeries: 16})
	if err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	for _, q := range reqs {
		rec := &meter.Record{}
		rec.Reset()
		rec.Start = t0.Add(q.at)
		rec.Tenant, rec.Model, rec.Route, rec.Outcome = q.tenant, q.model, "chat", meter.OutcomeOK
		rec.ISL, rec.OSL = q.isl, q.osl
		now = rec.Start
		j.Begin(rec)
		now = rec.Start.Add(time.Millisecond)
		j.Judge(rec)
		last = max(last, q.at+time.Millisecond)
	}
	now = t0.Add(last)
	rr := httptest.NewRecorder()
	j.ProfileHandler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/profile?window=1h", nil))
	if rr.Code != http.StatusOK {
		t.Fatalf("profile: %d %s", rr.Code, rr.Body)
	}
	return rr.Body.Bytes()
}

// decodeProfile decodes a profile document.
func decodeProfile(t testing.TB, b []byte) *slo.ProfileSnapshot {
	t.Helper()
	var s slo.ProfileSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}
