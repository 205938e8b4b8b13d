package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
)

// A request admitted with a valid key while its tenant was configured is
// judged once (README, SLOs: "Every inference request with a valid key is
// judged once"), even when a reload removes its tenant while it runs: the
// reloader says in-flight requests are never touched, and the metrics keep
// the tenant it began with. Without a default_slo the judge finds no
// resolver for the removed tenant at the record's end and leaves the
// request unjudged: it drops out of attainment, goodput and the burn rate.
func TestProbeJudgerTenantRemovedInFlightStillJudged(t *testing.T) {
	j, err := NewJudger(JudgerOptions{
		Config:   Config{SLOs: map[string]*Class{"slow": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.9}}},
		Tenants:  []TenantClasses{{Name: "acme", Class: "slow"}, {Name: "beta", Class: "slow"}},
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := judgedRecord("acme", 2*time.Second, meter.OutcomeOK)
	j.Begin(rec)
	// The reload lands while acme's request streams.
	if err := j.SetTenants([]TenantClasses{{Name: "beta", Class: "slow"}}); err != nil {
		t.Fatal(err)
	}
	j.Judge(rec)
	if !rec.Judged {
		t.Fatalf("a request admitted for tenant acme (class slow) and ended after a reload removed acme was not judged: its TTFT miss is in no attainment (slo %q, good %v)", rec.SLO, rec.Good)
	}
	if rec.SLO != "slow" || rec.Good {
		t.Fatalf("judged slo %q good %v, want slow and a ttft miss", rec.SLO, rec.Good)
	}
}
