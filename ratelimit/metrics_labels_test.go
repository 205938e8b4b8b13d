package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A tenant name that is not valid UTF-8 (YAML lets one through as
// !!binary; a Go caller need not validate) panicked the Prometheus client:
// its metrics are those of "other".
func TestMetricsInvalidUTF8TenantIsOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, BackendLocal)
	if err != nil {
		t.Fatal(err)
	}
	m.SetTenants(time.Now(), []TenantConfig{{Name: "t\xff"}, {Name: "acme"}})
	if m.tenant("t\xff") != m.other || m.tenant("acme") == m.other {
		t.Fatal("the invalid name has children of its own, or acme has none")
	}
	m.tenant("t\xff").allowed[limitNone].Inc()
	if got := testutil.ToFloat64(m.decisions.WithLabelValues(otherTenant, "none", "allowed")); got != 1 {
		t.Fatalf("other allowed %v", got)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// A configured tenant has series from its first decision, not before: an
// idle tenant had ten from the start (20,000 tenants: 200,000 series and
// a 15 MB scrape before any request), its remaining capacity 0. Every
// decision of a tenant, from the first, is counted under its name.
func TestMetricsIdleTenantHasNoSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := New(BackendConfig{}, []TenantConfig{tenant("acme", Limits{RPM: 60}), tenant("idle", Limits{RPM: 60})}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	series := func(tenant string) int { t.Helper(); return tenantSeries(t, reg, "", tenant) }
	if n := series("acme") + series("idle"); n != 0 {
		t.Fatalf("%d series before any decision, want none", n)
	}
	var d Decision
	if _, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", EstTokens: 1}, &d); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if got := testutil.ToFloat64(g.met.decisions.WithLabelValues("acme", "none", "allowed")); got != 1 {
		t.Errorf("acme allowed %v, want 1", got)
	}
	if series("acme") == 0 || series("idle") != 0 {
		t.Errorf("acme %d series, idle %d: want acme's only", series("acme"), series("idle"))
	}
	// A reload keeps acme's children, and idle still has none.
	g.SetTenants(time.Now(), []TenantConfig{tenant("acme", Limits{RPM: 120}), tenant("idle", Limits{RPM: 60})})
	if _, _, err := g.Admit(context.Background(), &Request{Tenant: "acme", EstTokens: 1}, &d); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if got := testutil.ToFloat64(g.met.decisions.WithLabelValues("acme", "none", "allowed")); got != 2 {
		t.Errorf("acme allowed %v after a reload, want 2", got)
	}
	if series("idle") != 0 {
		t.Errorf("idle has %d series", series("idle"))
	}
}

// A tenant a reload removes loses its gauges (its remaining capacity and
// queue, frozen at their last values, showed a tenant that is no more);
// its counters stay. Restored, it has them again from its next decision.
func TestMetricsRemovedTenantsGaugesGo(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := New(BackendConfig{}, []TenantConfig{tenant("acme", Limits{RPM: 60}), tenant("gone", Limits{RPM: 60})}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	admit := func(name string) {
		t.Helper()
		var d Decision
		if _, _, err := g.Admit(context.Background(), &Request{Tenant: name, EstTokens: 1}, &d); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", name, d, err)
		}
	}
	admit("acme")
	admit("gone")
	count := func(name, tenant string) int { t.Helper(); return tenantSeries(t, reg, name, tenant) }
	for _, name := range []string{"goodput_ratelimit_remaining", "goodput_ratelimit_queued_requests", "goodput_ratelimit_decisions_total"} {
		if count(name, "gone") == 0 {
			t.Fatalf("no %s of gone before the reload", name)
		}
	}
	g.SetTenants(time.Now(), []TenantConfig{tenant("acme", Limits{RPM: 60})})
	if n := count("goodput_ratelimit_remaining", "gone") + count("goodput_ratelimit_queued_requests", "gone"); n != 0 {
		t.Errorf("%d gauges of the removed tenant left", n)
	}
	if count("goodput_ratelimit_decisions_total", "gone") == 0 || count("goodput_ratelimit_remaining", "acme") == 0 {
		t.Error("the removed tenant's counters, or the kept tenant's gauges, went too")
	}
	g.SetTenants(time.Now(), []TenantConfig{tenant("acme", Limits{RPM: 60}), tenant("gone", Limits{RPM: 60})})
	admit("gone")
	if count("goodput_ratelimit_remaining", "gone") == 0 {
		t.Error("the restored tenant has no remaining capacity again after its decision")
	}
}

// tenantSeries counts the series of metric (every metric when "") in reg
// whose tenant label is tenant.
func tenantSeries(t *testing.T, reg *prometheus.Registry, metric, tenant string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if metric != "" && mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					n++
				}
			}
		}
	}
	return n
}

// A decision that began before the reload that removed its tenant, and
// ends after it, brings no gauge of that tenant back (a review found its
// remaining capacity made again, frozen, by such a decision).
func TestMetricsRemovedTenantsGaugesStayGone(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, BackendLocal)
	if err != nil {
		t.Fatal(err)
	}
	m.SetTenants(time.Now(), []TenantConfig{{Name: "acme"}, {Name: "gone"}, {Name: "unused"}})
	tm := m.tenant("gone")                // a decision begins: its children
	slot := (*m.tenants.Load())["unused"] // another, before its first use
	m.SetTenants(time.Now(), []TenantConfig{{Name: "acme"}})
	d := Decision{Requests: Quota{Limit: 60, Remaining: 59}, Allowed: true}
	m.observeRemaining(tm, &d) // and ends
	m.observeDecision(tm, &d)
	um := m.slotMetrics(slot)
	um.queued.Inc()
	m.observeRemaining(um, &d)
	for _, name := range []string{"gone", "unused"} {
		if n := tenantSeries(t, reg, "goodput_ratelimit_remaining", name) + tenantSeries(t, reg, "goodput_ratelimit_queued_requests", name); n != 0 {
			t.Errorf("%s: %d gauges back after the reload removed it", name, n)
		}
	}
	if tenantSeries(t, reg, "goodput_ratelimit_decisions_total", "gone") == 0 {
		t.Error("the removed tenant's decision was not counted")
	}
}
