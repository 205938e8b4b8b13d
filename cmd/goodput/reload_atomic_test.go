package main

import (
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A reload that the key store refuses publishes nothing: a request that
// begins while it runs is judged by the classes in effect before it. The
// judge published the new classes first and was put back after the store's
// refusal, and a request that began between the two was judged by classes
// that never took effect. A reload the store accepts publishes the judge's
// classes before the keys, and a request that begins between is judged by
// the new ones.
func TestReloadPublishesNothingOfAConfigurationTheStoreRefuses(t *testing.T) {
	f, acme := newReloadFixture(t)
	_, beta := newKey(t, "beta", "beta-one")
	// The store refuses a tenant whose upstream credential variable is
	// empty; the judge and the configuration's checks accept it.
	t.Setenv("GOODPUT_TEST_BETA_UPSTREAM_KEY", "")
	r := &reloader{cfg: f.cfg, store: f.store, judger: f.judger, labels: f.labels, logger: log.New(io.Discard, "", 0)}
	var (
		between    []*meter.Record // the requests begun between the judge's publish and the store's
		betaLabels []string        // beta's label value there
	)
	r.judgePublished = func() {
		between = append(between, beginAcme(f))
		betaLabels = append(betaLabels, f.labels.Value("beta"))
	}

	// acme moves from interactive to batch, and beta cannot be loaded.
	refused := slosYAML + "tenants:\n  - name: acme\n    slo: batch\n    keys:\n" + acme +
		"  - name: beta\n    slo: batch\n    upstream: {api_key_env: GOODPUT_TEST_BETA_UPSTREAM_KEY}\n    keys:\n" + beta
	if err := os.WriteFile(f.path, []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(); err == nil || !strings.Contains(err.Error(), "GOODPUT_TEST_BETA_UPSTREAM_KEY") {
		t.Fatalf("reload: %v, want the store's refusal of beta's upstream key variable", err)
	}
	after := beginAcme(f)
	for i, rec := range append(between, after) {
		f.judger.Judge(rec)
		if rec.SLO != "interactive" {
			t.Errorf("request %d of %d begun during or after the refused reload: judged by %q, want interactive (acme's class before it)", i+1, len(between)+1, rec.SLO)
		}
	}
	for _, l := range append(betaLabels, f.labels.Value("beta")) {
		if l != "other" {
			t.Errorf("beta's label value is %q during or after the refused reload, want other: beta is not configured", l)
		}
	}
	want := `
# HELP goodput_slo_objective Objective (target fraction of good requests) of each tenant's SLO class.
# TYPE goodput_slo_objective gauge
goodput_slo_objective{slo="interactive",tenant="acme"} 0.9
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "goodput_slo_objective"); err != nil {
		t.Fatal(err)
	}

	// Accepted (beta's variable is set): the request begun between the
	// judge's publish and the keys' is judged by acme's new class.
	t.Setenv("GOODPUT_TEST_BETA_UPSTREAM_KEY", "upstream-secret")
	between = nil
	if err := r.reload(); err != nil {
		t.Fatal(err)
	}
	if len(between) != 1 {
		t.Fatalf("%d requests begun between the judge's publish and the store's, want 1", len(between))
	}
	f.judger.Judge(between[0])
	if between[0].SLO != "batch" {
		t.Fatalf("the request begun after the judge's publish of the accepted reload: judged by %q, want batch", between[0].SLO)
	}
}

// beginAcme begins a request of acme's (a chat completion with a 1 s first
// token, which misses interactive's 200 ms and meets batch's 300 s).
func beginAcme(f *reloadFixture) *meter.Record {
	rec := &meter.Record{}
	rec.Reset()
	rec.Start = time.Now()
	rec.Tenant, rec.Model, rec.Route, rec.Outcome, rec.Status = "acme", "m", "chat", meter.OutcomeOK, 200
	rec.ISL, rec.OSL, rec.Events, rec.TTFT, rec.TPOT, rec.E2E = 10, 1, 1, time.Second, meter.Unknown, time.Second
	f.judger.Begin(rec)
	return rec
}

// A reload refused for a field a key was pasted into without its gp- (the
// whole of its secret) logs why with the key's part redacted: the new
// file's digests find it (found by a new user's probe: config check quoted
// it, and so did the reload's error).
func TestReloadErrorRedactsAKeyWithoutItsPrefix(t *testing.T) {
	f, acme := newReloadFixture(t)
	key, lines := newKey(t, "acme", "acme-two")
	body := key[len("gp-"):]
	var out strings.Builder
	var got error
	r := &reloader{cfg: f.cfg, store: f.store, judger: f.judger, labels: f.labels, logger: log.New(&out, "", 0),
		reloaded: func(err error) { got = err }}
	bad := slosYAML + "tenants:\n  - name: acme\n    slo: " + body + "\n    keys:\n" + acme + lines
	if err := os.WriteFile(f.path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reloadTenants()
	if got == nil || strings.Contains(got.Error(), body[:16]) || !strings.Contains(got.Error(), `tenants[0].slo: "[redacted]"`) {
		t.Fatalf("reload: %v, want the refusal of acme's class with the key's part redacted", got)
	}
	if log := out.String(); strings.Contains(log, body[:16]) || !strings.Contains(log, "reload failed") || !strings.Contains(log, "[redacted]") {
		t.Errorf("the reload's log: %q, want the failure with the key's part redacted", log)
	}
}
