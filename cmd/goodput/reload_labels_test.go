package main

import (
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/export"
	"github.com/goodput/goodput/identity"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/ratelimit"
	"github.com/goodput/goodput/slo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A tenant added by a reload has its objective exported under its own name
// (the judge exported it before the label values learnt the new tenant:
// under "other").
func TestReloadExportsANewTenantsObjective(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "goodput.yaml")
	_, acme := newKey(t, "acme", "acme-one")
	_, beta := newKey(t, "beta", "beta-one")
	if err := os.WriteFile(path, []byte(slosYAML+tenantsYAML(acme)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := cfg.LoadTenants()
	if err != nil {
		t.Fatal(err)
	}
	gate, err := ratelimit.New(cfg.RateLimit, tenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	store, err := identity.NewStore(tenants, gate)
	if err != nil {
		t.Fatal(err)
	}
	labels := export.NewLabelSet(tenantNames(tenants), 0)
	reg := prometheus.NewRegistry()
	j, err := slo.NewJudger(slo.JudgerOptions{
		Config: cfg.SLO, DefaultClass: cfg.DefaultSLO, Tenants: config.TenantClasses(tenants),
		Labels: export.NewLabeler(labels, export.NewLabelSet(nil, 0)), Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
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
