package main

import (
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A tenant added by a reload has its objective exported under its own name
// (the judge exported it before the label values learnt the new tenant:
// under "other").
func TestReloadExportsANewTenantsObjective(t *testing.T) {
	f, acme := newReloadFixture(t)
	path, cfg, store, j, labels, reg := f.path, f.cfg, f.store, f.judger, f.labels, f.reg
	_, beta := newKey(t, "beta", "beta-one")
	r := &reloader{cfg: cfg, store: store, judger: j, labels: labels, logger: log.New(io.Discard, "", 0)}

	two := slosYAML + tenantsYAML(acme) + "  - name: beta\n    slo: batch\n    keys:\n" + beta
	if err := os.WriteFile(path, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP goodput_slo_objective Objective (target fraction of good requests) of each tenant's SLO class.
# TYPE goodput_slo_objective gauge
goodput_slo_objective{slo="batch",tenant="beta"} 0.5
goodput_slo_objective{slo="interactive",tenant="acme"} 0.9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "goodput_slo_objective"); err != nil {
		t.Fatal(err)
	}
}

// A request of acme's in flight when a reload removes acme is judged by
// acme's class and counted under acme, its label of when it began (its
// model, which no engine vouched for, is "other"); the objective gauges are
// the new configuration's, acme's gone.
func TestReloadJudgesAnInFlightRequestOfARemovedTenant(t *testing.T) {
	f, _ := newReloadFixture(t)
	_, beta := newKey(t, "beta", "beta-one")
	r := &reloader{cfg: f.cfg, store: f.store, judger: f.judger, labels: f.labels, logger: log.New(io.Discard, "", 0)}

	rec := &meter.Record{}
	rec.Reset()
	rec.Start = time.Now()
	rec.Tenant, rec.Model, rec.Route, rec.Outcome, rec.Status = "acme", "m", "chat", meter.OutcomeOK, 200
	rec.ISL, rec.OSL, rec.Events, rec.TTFT, rec.TPOT, rec.E2E = 10, 1, 1, time.Second, meter.Unknown, time.Second
	f.judger.Begin(rec)
	if err := os.WriteFile(f.path, []byte(slosYAML+"tenants:\n  - name: beta\n    slo: batch\n    keys:\n"+beta), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(); err != nil {
		t.Fatal(err)
	}
	f.judger.Judge(rec)
	if !rec.Judged || rec.SLO != "interactive" || strings.Join(rec.MissReasons, ",") != "ttft" {
		t.Fatalf("judged %v slo %q reasons %v, want interactive and a ttft miss (1 s against 200 ms)", rec.Judged, rec.SLO, rec.MissReasons)
	}
	want := `
# HELP goodput_slo_objective Objective (target fraction of good requests) of each tenant's SLO class.
# TYPE goodput_slo_objective gauge
goodput_slo_objective{slo="batch",tenant="beta"} 0.5
# HELP goodput_slo_requests_total Requests judged against their tenant's SLO class, by result (good or miss). Failed requests are misses; a client that left before the first byte counts only if its wait broke a bound.
# TYPE goodput_slo_requests_total counter
goodput_slo_requests_total{model="other",result="good",slo="interactive",tenant="acme"} 0
goodput_slo_requests_total{model="other",result="miss",slo="interactive",tenant="acme"} 1
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "goodput_slo_objective", "goodput_slo_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// reloadFixture is what a reloader works on, built as serve builds it from
// a configuration file (path) whose one tenant is acme, with its key
// acme-one: the configuration, the keys, the tenant label values, and the
// judge, whose metrics are in reg.
type reloadFixture struct {
	path   string
	cfg    *config.Config
	store  *identity.Store
	labels *export.LabelSet
	judger *slo.Judger
	reg    *prometheus.Registry
}

// newReloadFixture returns the fixture and acme's key line (tenantsYAML).
func newReloadFixture(t *testing.T) (*reloadFixture, string) {
	t.Helper()
	f := &reloadFixture{path: filepath.Join(t.TempDir(), "goodput.yaml"), reg: prometheus.NewRegistry()}
	_, acme := newKey(t, "acme", "acme-one")
	if err := os.WriteFile(f.path, []byte(slosYAML+tenantsYAML(acme)), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.cfg, err = config.Load(f.path); err != nil {
		t.Fatal(err)
	}
	tenants, err := f.cfg.LoadTenants()
	if err != nil {
		t.Fatal(err)
	}
	gate, err := ratelimit.New(f.cfg.RateLimit, tenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close() })
	if f.store, err = identity.NewStore(tenants, gate); err != nil {
		t.Fatal(err)
	}
	f.labels = export.NewLabelSet(tenantNames(tenants), 0)
	f.judger, err = slo.NewJudger(slo.JudgerOptions{
		Config: f.cfg.SLO, DefaultClass: f.cfg.DefaultSLO, Tenants: config.TenantClasses(tenants),
		Labels: export.NewLabeler(f.labels, export.NewLabelSet(nil, 0)), Registry: f.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, acme
}
