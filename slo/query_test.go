package slo

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
)

// A query the admin API cannot read whole, or that names its tenant or
// window twice, is refused (400), never answered as another question: Go's
// URL.Query drops a pair it cannot read, and ?tenant=acme;x was answered
// 200 with every tenant's figures (?tenant=acme%zz too), ?window=24h;x
// with the 1h window's, and ?tenant=acme&tenant=beta with acme's alone.
func TestAdminQueryReadWholeOrRefused(t *testing.T) {
	j, _, _ := newTestJudger(t, map[string]*Class{"fast": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.99}}, "fast")
	for _, tenant := range []string{"acme", "beta"} {
		rec := judgedRecord(tenant, 50*time.Millisecond, meter.OutcomeOK)
		j.Begin(rec)
		j.Judge(rec)
	}
	get := func(h http.Handler, target string) (int, string) {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, target, nil))
		return rr.Code, rr.Body.String()
	}
	for _, c := range []struct {
		h     http.Handler
		path  string
		query string
		want  string
	}{
		{j.SLOHandler(), "/admin/api/slo", "tenant=acme;x", "malformed query"},
		{j.SLOHandler(), "/admin/api/slo", "tenant=acme%zz", "malformed query"},
		{j.SLOHandler(), "/admin/api/slo", "tenant=acme&tenant=beta", "tenant: given 2 times"},
		{j.ProfileHandler(), "/admin/api/profile", "tenant=acme;x", "malformed query"},
		{j.ProfileHandler(), "/admin/api/profile", "window=24h;x", "malformed query"},
		{j.ProfileHandler(), "/admin/api/profile", "tenant=acme&x=%zz", "malformed query"},
		{j.ProfileHandler(), "/admin/api/profile", "window=5m&window=24h", "window: given 2 times"},
	} {
		code, body := get(c.h, c.path+"?"+c.query)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s?%s: %d %.200s, want 400 %q", c.path, c.query, code, body, c.want)
		}
	}
	// Well-formed queries are answered, other parameters ignored.
	for _, target := range []string{"/admin/api/slo?tenant=acme", "/admin/api/slo?tenant=acme&cache=1", "/admin/api/profile?tenant=acme&window=5m"} {
		h := j.SLOHandler()
		if strings.HasPrefix(target, "/admin/api/profile") {
			h = j.ProfileHandler()
		}
		code, body := get(h, target)
		if code != http.StatusOK || !strings.Contains(body, `"tenant":"acme"`) || strings.Contains(body, `"tenant":"beta"`) {
			t.Errorf("%s: %d %.300s", target, code, body)
		}
	}
}
