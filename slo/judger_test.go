package slo

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func judgedRecord(tenant string, ttft time.Duration, outcome meter.Outcome) *meter.Record {
	rec := &meter.Record{}
	rec.Reset()
	rec.Start = time.Now()
	rec.Tenant, rec.Model, rec.Route, rec.Outcome = tenant, "m", "chat", outcome
	rec.ISL, rec.OSL = 10, 5
	rec.TTFT, rec.E2E, rec.Events = ttft, ttft+40*time.Millisecond, 5
	rec.ITL = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	rec.TPOT = 10 * time.Millisecond
	return rec
}

func TestJudgerVerdictAndObjective(t *testing.T) {
	reg := prometheus.NewRegistry()
	j, err := NewJudger(JudgerOptions{
		Config:       Config{SLOs: map[string]*Class{"fast": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.99}, "slow": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.9}}},
		DefaultClass: "fast",
		Tenants:      []TenantClasses{{Name: "acme", Class: "slow"}},
		Registry:     reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant  string
		ttft    time.Duration
		outcome meter.Outcome
		slo     string
		good    bool
		reasons string
	}{
		{"acme", 500 * time.Millisecond, meter.OutcomeOK, "slow", true, ""},
		{"beta", 500 * time.Millisecond, meter.OutcomeOK, "fast", false, "ttft"},
		{"beta", 50 * time.Millisecond, meter.OutcomeClientAbort, "fast", false, "aborted"},
	} {
		rec := judgedRecord(c.tenant, c.ttft, c.outcome)
		j.Begin(rec)
		j.Judge(rec)
		if !rec.Judged || rec.SLO != c.slo || rec.Good != c.good || strings.Join(rec.MissReasons, ",") != c.reasons {
			t.Fatalf("%+v: judged %v slo %q good %v reasons %v", c, rec.Judged, rec.SLO, rec.Good, rec.MissReasons)
		}
	}
	// Unauthorized requests are not judged at all.
	rec := judgedRecord("", 0, meter.OutcomeUnauthorized)
	j.Begin(rec)
	j.Judge(rec)
	if rec.Judged {
		t.Fatal("unauthorized request judged")
	}
	// The objective gauge is set for the configured tenant and for the
	// header-named tenant judged by the default class.
	for _, c := range []struct {
		tenant, slo string
		want        float64
	}{{"acme", "slow", 0.9}, {"beta", "fast", 0.99}} {
		if got := testutil.ToFloat64(j.metrics.objective.WithLabelValues(c.tenant, c.slo)); got != c.want {
			t.Errorf("objective{tenant=%s,slo=%s} = %v, want %v", c.tenant, c.slo, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "goodput_slo_objective"); n != 2 {
		t.Errorf("%d objective series, want 2", n)
	}
}

// A client that leaves before the first byte is counted only when its wait
// already broke a bound (client aborts count after the first byte).
func TestJudgerClientLeftBeforeFirstByte(t *testing.T) {
	reg := prometheus.NewRegistry()
	j, err := NewJudger(JudgerOptions{
		Config:       Config{SLOs: map[string]*Class{"fast": {TTFT: cfgtypes.Duration(500 * time.Millisecond), Objective: 0.99}}},
		DefaultClass: "fast",
		Registry:     reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	left := func(waited time.Duration, status int) *meter.Record {
		rec := judgedRecord("acme", meter.Unknown, meter.OutcomeClientAbort)
		rec.E2E, rec.Status, rec.OSL, rec.Events, rec.ITL, rec.TPOT = waited, status, meter.Unknown, 0, nil, meter.Unknown
		return rec
	}
	for _, c := range []struct {
		name    string
		rec     *meter.Record
		judged  bool
		reasons string
	}{
		{"left early, before the first byte", left(200*time.Millisecond, meter.StatusClientClosed), false, ""},
		{"left late, before the first byte", left(2*time.Second, meter.StatusClientClosed), true, "ttft,aborted"},
		{"left after the first byte, before a token", left(200*time.Millisecond, 200), true, "aborted"},
	} {
		j.Begin(c.rec)
		j.Judge(c.rec)
		if c.rec.Judged != c.judged || strings.Join(c.rec.MissReasons, ",") != c.reasons {
			t.Fatalf("%s: judged %v reasons %v", c.name, c.rec.Judged, c.rec.MissReasons)
		}
	}
	if got := testutil.ToFloat64(j.metrics.requests.WithLabelValues("acme", "m", "fast", "miss")); got != 2 {
		t.Fatalf("misses counted %v, want 2 (the early leaver is not counted)", got)
	}
}

// A request is judged by the classes of the configuration it began under
// (README, SLOs: every inference request with a valid key is judged once;
// the reload never touches a request in flight), whatever a reload changes
// while it runs. Its counters keep the tenant it began with, and the
// objective gauges stay the current configuration's: a removed tenant's
// does not come back.
func TestJudgerReloadKeepsInFlightClasses(t *testing.T) {
	classes := map[string]*Class{
		"slow":    {TTFT: cfgtypes.Duration(time.Second), Objective: 0.9},
		"lenient": {TTFT: cfgtypes.Duration(5 * time.Second), Objective: 0.5},
	}
	acme := TenantClasses{Name: "acme", Class: "slow"}
	beta := TenantClasses{Name: "beta", Class: "slow"}
	for _, c := range []struct {
		name          string
		def           string
		before, after []TenantClasses
		begin         bool // Begin runs before the reload
		slo           string
		good          bool
	}{
		{"tenant removed, no default_slo", "", []TenantClasses{acme, beta}, []TenantClasses{beta}, true, "slow", false},
		{"tenant removed, default_slo judges the others", "lenient", []TenantClasses{acme, beta}, []TenantClasses{beta}, true, "slow", false},
		{"tenant's class changed", "", []TenantClasses{acme}, []TenantClasses{{Name: "acme", Class: "lenient"}}, true, "slow", false},
		{"tenant's model override added", "", []TenantClasses{acme}, []TenantClasses{{Name: "acme", Class: "slow", ByModel: map[string]string{"m": "lenient"}}}, true, "slow", false},
		{"tenant configured by the reload, began under default_slo", "slow", []TenantClasses{beta}, []TenantClasses{beta, {Name: "acme", Class: "lenient"}}, true, "slow", false},
		// A record whose Begin did not run has no configuration of its
		// own: the current one judges it.
		{"no Begin: the current configuration", "", []TenantClasses{acme}, []TenantClasses{{Name: "acme", Class: "lenient"}}, false, "lenient", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			j, err := NewJudger(JudgerOptions{Config: Config{SLOs: classes}, DefaultClass: c.def, Tenants: c.before, Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			rec := judgedRecord("acme", 2*time.Second, meter.OutcomeOK)
			if c.begin {
				j.Begin(rec)
			}
			// The reload lands while the request streams.
			if err := j.setTenants(c.after); err != nil {
				t.Fatal(err)
			}
			gauges := testutil.CollectAndCount(reg, "goodput_slo_objective")
			j.Judge(rec)
			if !rec.Judged || rec.SLO != c.slo || rec.Good != c.good {
				t.Fatalf("judged %v slo %q good %v (reasons %v), want judged by %s, good %v", rec.Judged, rec.SLO, rec.Good, rec.MissReasons, c.slo, c.good)
			}
			if rec.Live.Classes != nil {
				t.Error("the record still holds its configuration after Judge (a pooled record would keep it alive)")
			}
			result := "miss"
			if c.good {
				result = "good"
			}
			if got := testutil.ToFloat64(j.metrics.requests.WithLabelValues("acme", "m", c.slo, result)); got != 1 {
				t.Errorf("goodput_slo_requests_total{tenant=acme,slo=%s,result=%s} = %v, want 1", c.slo, result, got)
			}
			if n := testutil.CollectAndCount(reg, "goodput_slo_objective"); n != gauges {
				t.Errorf("%d objective series after the request, %d before: it set a gauge of a configuration that is gone", n, gauges)
			}
		})
	}
}

// A tenant judged by default_slo, whose request began before a reload that
// leaves it unconfigured, is judged by the default class in either
// configuration: the current configuration's objective gauge of that class
// is set on first sight of the tenant, as for a request begun after the
// reload. Otherwise a tenant whose requests are long streams (each begun
// before the last reload) would go without an objective, and so without a
// burn rate, until one began after it.
func TestJudgerReloadSetsDefaultObjectiveOfUnconfiguredTenant(t *testing.T) {
	reg := prometheus.NewRegistry()
	j, err := NewJudger(JudgerOptions{
		Config:       Config{SLOs: map[string]*Class{"slow": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.9}}},
		DefaultClass: "slow",
		Tenants:      []TenantClasses{{Name: "beta", Class: "slow"}},
		Registry:     reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := judgedRecord("acme", 100*time.Millisecond, meter.OutcomeOK)
	j.Begin(rec)
	// The reload (its tenants unchanged) resets the objective gauges.
	if err := j.setTenants([]TenantClasses{{Name: "beta", Class: "slow"}}); err != nil {
		t.Fatal(err)
	}
	j.Judge(rec)
	if !rec.Judged || rec.SLO != "slow" {
		t.Fatalf("judged %v slo %q, want judged by slow", rec.Judged, rec.SLO)
	}
	want := `
# HELP goodput_slo_objective Objective (target fraction of good requests) of each tenant's SLO class.
# TYPE goodput_slo_objective gauge
goodput_slo_objective{slo="slow",tenant="acme"} 0.9
goodput_slo_objective{slo="slow",tenant="beta"} 0.9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "goodput_slo_objective"); err != nil {
		t.Fatal(err)
	}
}

// A request in flight keeps its tenant's classes of when it began, not the
// whole configuration: a stream of hours across many reloads of a large
// tenants file would otherwise hold every tenant's classes of each
// configuration it outlived.
func TestJudgerInFlightHoldsOnlyItsTenantsClasses(t *testing.T) {
	classes := map[string]*Class{"slow": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.9}}
	for _, c := range []struct {
		name, def string
		tenant    string
	}{
		{"configured tenant", "", "acme"},
		{"default_slo tenant", "slow", "header-named"},
		{"tenant without a class", "", "header-named"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := NewJudger(JudgerOptions{Config: Config{SLOs: classes}, DefaultClass: c.def, Tenants: []TenantClasses{{Name: "acme", Class: "slow"}, {Name: "beta", Class: "slow"}}})
			if err != nil {
				t.Fatal(err)
			}
			old := weak.Make(j.res.Load())
			rec := judgedRecord(c.tenant, 100*time.Millisecond, meter.OutcomeOK)
			j.Begin(rec)
			if err := j.setTenants([]TenantClasses{{Name: "beta", Class: "slow"}}); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			if old.Value() != nil {
				t.Error("the configuration a reload replaced is still held by a request in flight")
			}
			j.Judge(rec)
			if want := c.tenant == "acme" || c.def != ""; rec.Judged != want || (want && rec.SLO != "slow") {
				t.Errorf("judged %v slo %q, want judged %v", rec.Judged, rec.SLO, want)
			}
		})
	}
}

// Judged without the gateway's Labeler (plain labels), a request whose
// model was not read (meter.Record.ModelUnread) has the model label
// "unread": judged by its tenant's class, it does not share the series of
// the requests that name no model, judged by the class of the model their
// limits matched them to (the tenant's default model's). One model label,
// one class.
func TestJudgerModelUnreadLabel(t *testing.T) {
	j, err := NewJudger(JudgerOptions{
		Config:  Config{SLOs: map[string]*Class{"interactive": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.99}, "batch": {E2E: cfgtypes.Duration(time.Minute), Objective: 0.9}}},
		Tenants: []TenantClasses{{Name: "acme", Class: "interactive", ByModel: map[string]string{"llama-70b": "batch"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	named := judgedRecord("acme", 100*time.Millisecond, meter.OutcomeOK)
	named.Model, named.MatchedModel = "", "llama-70b" // names none: the default model
	unread := judgedRecord("acme", 0, meter.OutcomeRejected)
	unread.Model, unread.ModelUnread, unread.Status = "", true, 408
	unread.ISL, unread.OSL, unread.TTFT, unread.E2E, unread.Events, unread.TPOT, unread.ITL = meter.Unknown, meter.Unknown, meter.Unknown, time.Second, meter.Unknown, meter.Unknown, nil
	for _, c := range []struct {
		rec        *meter.Record
		slo, label string
	}{{named, "batch", "none"}, {unread, "interactive", "unread"}} {
		j.Begin(c.rec)
		j.Judge(c.rec)
		if !c.rec.Judged || c.rec.SLO != c.slo || c.rec.Labels.Model != c.label || c.rec.Live.Model != c.label {
			t.Errorf("unread %v: judged %v by %q, labels %q (live %q); want %q, %q", c.rec.ModelUnread, c.rec.Judged, c.rec.SLO, c.rec.Labels.Model, c.rec.Live.Model, c.slo, c.label)
		}
	}
	for _, ts := range j.tracker.snapshot(time.Now(), "acme").Tenants {
		for _, m := range ts.Models {
			if len(m.SLOs) != 1 {
				t.Errorf("model %q judged by %v: want one class", m.Model, m.SLOs)
			}
		}
	}
}

// Judged without the gateway's Labeler (plain labels), a request that
// names a model called "none" or "unread" has the model label "other", as
// with the Labeler: under its own name it would share the series of the
// requests without a model, judged by another class.
func TestJudgerModelNamedReservedLabel(t *testing.T) {
	j, err := NewJudger(JudgerOptions{
		Config:  Config{SLOs: map[string]*Class{"interactive": {TTFT: cfgtypes.Duration(time.Second), Objective: 0.99}, "batch": {E2E: cfgtypes.Duration(time.Minute), Objective: 0.9}}},
		Tenants: []TenantClasses{{Name: "acme", Class: "interactive", ByModel: map[string]string{"llama-70b": "batch"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"none", "unread"} {
		rec := judgedRecord("acme", 100*time.Millisecond, meter.OutcomeOK)
		rec.Model = name
		j.Begin(rec)
		j.Judge(rec)
		if rec.Labels.Model != "other" || rec.Live.Model != "other" {
			t.Errorf("model named %q: labels %q (live %q); want other", name, rec.Labels.Model, rec.Live.Model)
		}
	}
}
