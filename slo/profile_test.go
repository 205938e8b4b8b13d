package slo

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

func mustWindow(t testing.TB, name string) Window {
	w, err := windowByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func tenantProfile(t *testing.T, s *ProfileSnapshot, tenant string) *TenantProfile {
	t.Helper()
	for i := range s.Tenants {
		if s.Tenants[i].Tenant == tenant {
			return &s.Tenants[i]
		}
	}
	t.Fatalf("tenant %s missing from %+v", tenant, s.Tenants)
	return nil
}

func TestProfileConcurrencyTimeline(t *testing.T) {
	// Profiling starts at 10:00:00; nothing in flight until 10:00:30.
	p := newProfile(profileOptions{Start: t0})
	s := t0.Add(30 * time.Second)
	at := func(sec int) time.Time { return s.Add(time.Duration(sec) * time.Second) }
	p.begin("acme", "m", at(0))  // A
	p.begin("acme", "m", at(10)) // B
	p.end("acme", "m", at(30))   // A ends on the minute boundary 10:01:00
	p.begin("acme", "m", at(40)) // C
	p.end("acme", "m", at(50))   // B
	p.end("acme", "m", at(60))   // C
	now := at(120)               // 10:02:30
	// In flight: [0,10) 1, [10,30) 2, [30,40) 1, [40,50) 2, [50,60) 1, then 0;
	// and 0 for the 30 s before the first arrival: 150 s in all.
	// ∫ = 10 + 40 + 10 + 20 + 10 = 90 level·s: mean 0.6. Time at 2 is 30 s
	// (20%), at ≤1 is 120 s (80%): p95 is 2.
	for _, wn := range []string{"5m", "1h", "24h"} {
		snap := p.snapshot(now, mustWindow(t, wn), "")
		if snap.WindowSeconds != 150 {
			t.Errorf("%s: window seconds %v", wn, snap.WindowSeconds)
		}
		tp := tenantProfile(t, snap, "acme")
		for name, wp := range map[string]*WorkProfile{"tenant": tp.Profile, "model": tp.Models[0].Profile} {
			c := wp.Concurrency
			approx(t, wn+" "+name+" concurrency mean", c.Mean, 0.6, 1e-12)
			approx(t, wn+" "+name+" concurrency p95", c.P95, 2, exact)
			if c.Peak != 2 {
				t.Errorf("%s %s: peak %d", wn, name, c.Peak)
			}
			if wp.Arrivals != 3 {
				t.Errorf("%s %s: arrivals %d", wn, name, wp.Arrivals)
			}
			approx(t, wn+" arrival rate", wp.ArrivalRate, 3.0/150, exact)
			// Gaps 10 s and 30 s: mean 20, population variance 100, k = 4.
			ia := wp.InterArrival
			if ia.Count != 2 {
				t.Errorf("%s: %d gaps", wn, ia.Count)
			}
			approx(t, wn+" gap mean", ia.Mean, 20, 1e-12)
			approx(t, wn+" gap stddev", ia.StdDev, 10, 1e-12)
			approx(t, wn+" cv", ia.CV, 0.5, 1e-12)
			approx(t, wn+" gamma shape", ia.GammaShape, 4, 1e-12)
		}
	}
	// A snapshot accounts up to its own time; later ones keep counting idle.
	snap := p.snapshot(at(270), mustWindow(t, "5m"), "acme") // 10:05:00: window 10:01–10:05
	// [10:01:00, 10:05:00]: A's last 0 s, [30,40) 1, [40,50) 2, [50,60) 1, 0 after: 40 level·s over 240 s.
	approx(t, "later mean", tenantProfile(t, snap, "acme").Profile.Concurrency.Mean, 40.0/240, 1e-12)
}

func TestProfileTenantConcurrencyIsNotASumOfModels(t *testing.T) {
	p := newProfile(profileOptions{Start: t0})
	p.begin("acme", "a", t0)
	p.begin("acme", "b", t0.Add(10*time.Second))
	p.end("acme", "a", t0.Add(20*time.Second))
	p.end("acme", "b", t0.Add(30*time.Second))
	tp := tenantProfile(t, p.snapshot(t0.Add(40*time.Second), mustWindow(t, "5m"), ""), "acme")
	if tp.Profile.Concurrency.Peak != 2 {
		t.Errorf("tenant peak %d, want 2", tp.Profile.Concurrency.Peak)
	}
	approx(t, "tenant mean", tp.Profile.Concurrency.Mean, 40.0/40, 1e-12)
	if len(tp.Models) != 2 || tp.Models[0].Model != "a" || tp.Models[1].Model != "b" {
		t.Fatalf("models %+v", tp.Models)
	}
	for _, m := range tp.Models {
		if m.Profile.Concurrency.Peak != 1 {
			t.Errorf("model %s peak %d, want 1", m.Model, m.Profile.Concurrency.Peak)
		}
		approx(t, "model mean", m.Profile.Concurrency.Mean, 20.0/40, 1e-12)
	}
	// Inter-arrival at the tenant: one 10 s gap; each model alone: none.
	if tp.Profile.InterArrival.Count != 1 || tp.Models[0].Profile.InterArrival.Count != 0 {
		t.Errorf("gaps: tenant %d model %d", tp.Profile.InterArrival.Count, tp.Models[0].Profile.InterArrival.Count)
	}
	approx(t, "one gap: no gamma shape", tp.Profile.InterArrival.GammaShape, math.NaN(), 0)
}

func TestProfileBurstiness(t *testing.T) {
	cases := []struct {
		name string
		k    float64
		gap  func(r *rand.Rand) float64 // seconds, mean 0.1
	}{
		{"poisson", 1, func(r *rand.Rand) float64 { return 0.1 * r.ExpFloat64() }},
		// Gamma(1/2, θ) is θ·Z²/2 for a standard normal Z.
		{"gamma k=0.5", 0.5, func(r *rand.Rand) float64 { z := r.NormFloat64(); return 0.2 * z * z / 2 }},
		// Gamma(4, θ) is the sum of four exponentials of mean θ.
		{"gamma k=4", 4, func(r *rand.Rand) float64 {
			return 0.025 * (r.ExpFloat64() + r.ExpFloat64() + r.ExpFloat64() + r.ExpFloat64())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(tc.k*10)))
			p := newProfile(profileOptions{Start: t0})
			now := t0
			const n = 20000
			for i := 0; i < n; i++ {
				now = now.Add(time.Duration(tc.gap(rng) * 1e9))
				p.begin("acme", "m", now)
				p.end("acme", "m", now.Add(50*time.Millisecond))
			}
			wp := tenantProfile(t, p.snapshot(now.Add(time.Second), mustWindow(t, "1h"), ""), "acme").Profile
			if wp.Arrivals != n || wp.InterArrival.Count != n-1 {
				t.Fatalf("arrivals %d gaps %d", wp.Arrivals, wp.InterArrival.Count)
			}
			k := float64(wp.InterArrival.GammaShape)
			if math.Abs(k-tc.k)/tc.k > 0.10 {
				t.Fatalf("gamma shape %v, want %v ± 10%%", k, tc.k)
			}
			approx(t, "mean gap", wp.InterArrival.Mean, 0.1, 0.05)
		})
	}
}

func TestTokenBucket(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 0}, {1, 0}, {16, 0}, {17, 1}, {32, 1}, {33, 2}, {512, 5}, {513, 6},
		{131072, 13}, {131073, 14}, {1 << 30, 14},
	} {
		if got := tokenBucket(c.n); got != c.want {
			t.Errorf("tokenBucket(%d) = %d, want %d", c.n, got, c.want)
		}
		if c.want < len(TokenBucketBounds) && c.n > TokenBucketBounds[c.want] {
			t.Errorf("%d above its bucket's bound %d", c.n, TokenBucketBounds[c.want])
		}
	}
	if len(TokenBucketBounds) != numTokenBuckets-1 || TokenBucketBounds[13] != 131072 {
		t.Fatalf("bounds %v", TokenBucketBounds)
	}
}

func TestProfileDistributionsAndMix(t *testing.T) {
	p := newProfile(profileOptions{Start: t0})
	at := t0.Add(10 * time.Second)
	ok := func(isl, osl int) *meter.Record {
		return &meter.Record{Outcome: meter.OutcomeOK, ISL: isl, OSL: osl}
	}
	for _, r := range []*meter.Record{
		ok(3000, 100),                            // rag
		ok(500, 300), ok(500, 300), ok(500, 300), // chat
		ok(100, 2000), // longgen
		{Outcome: meter.OutcomeTimeout, ISL: 500, OSL: meter.Unknown},
		ok(400, meter.Unknown), // no usage at all
	} {
		p.Observe("acme", "m", r, at)
	}
	snap := p.snapshot(at.Add(time.Second), mustWindow(t, "5m"), "")
	wp := tenantProfile(t, snap, "acme").Profile
	if wp.Requests != 7 || wp.Measured != 5 {
		t.Fatalf("requests %d measured %d", wp.Requests, wp.Measured)
	}
	wantISL := make([]uint64, numTokenBuckets)
	wantISL[8], wantISL[5], wantISL[3] = 1, 3, 1 // 3000 ≤ 4096, 500 ≤ 512, 100 ≤ 128
	wantOSL := make([]uint64, numTokenBuckets)
	wantOSL[3], wantOSL[5], wantOSL[7] = 1, 3, 1 // 100 ≤ 128, 300 ≤ 512, 2000 ≤ 2048
	if !equalU64(wp.ISL.Buckets, wantISL) || !equalU64(wp.OSL.Buckets, wantOSL) {
		t.Fatalf("buckets isl %v osl %v", wp.ISL.Buckets, wp.OSL.Buckets)
	}
	wantJoint := []JointCell{{3, 7, 1}, {5, 5, 3}, {8, 3, 1}}
	if len(wp.Joint) != len(wantJoint) {
		t.Fatalf("joint %+v", wp.Joint)
	}
	for i := range wantJoint {
		if wp.Joint[i] != wantJoint[i] {
			t.Fatalf("joint %+v, want %+v", wp.Joint, wantJoint)
		}
	}
	if wp.ISL.Count != 5 || wp.ISL.Min != 100 || wp.ISL.Max != 3000 {
		t.Fatalf("isl %+v", wp.ISL)
	}
	approx(t, "isl mean", wp.ISL.Mean, 920, 1e-12)
	approx(t, "isl p50", wp.ISL.P50, 500, relativeAccuracy)
	approx(t, "osl p90", wp.OSL.P90, 300+0.6*1700, relativeAccuracy) // rank 3.6 of 100,300,300,300,2000
	sh := wp.Shapes
	if sh.Counts["chat"] != 3 || sh.Counts["rag"] != 1 || sh.Counts["longgen"] != 1 || sh.Counts["unknown"] != 2 {
		t.Fatalf("shape counts %v", sh.Counts)
	}
	approx(t, "chat fraction", sh.Fractions["chat"], 0.6, 1e-12)
	if sh.Traffic != "mixed" {
		t.Fatalf("traffic %q, want mixed", sh.Traffic)
	}
	// More chat: the traffic becomes chat (12 of 14 ≥ 0.8).
	for i := 0; i < 9; i++ {
		p.Observe("acme", "m", ok(800, 200), at)
	}
	if got := tenantProfile(t, p.snapshot(at.Add(time.Second), mustWindow(t, "5m"), ""), "acme").Profile.Shapes.Traffic; got != "chat" {
		t.Fatalf("traffic %q, want chat", got)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestProfileHandlerAndFormat(t *testing.T) {
	p := newProfile(profileOptions{Start: t0, Now: func() time.Time { return t0.Add(2 * time.Minute) }})
	p.begin("acme", "llama", t0.Add(time.Second))
	p.Observe("acme", "llama", &meter.Record{Outcome: meter.OutcomeOK, ISL: 900, OSL: 120}, t0.Add(3*time.Second))
	p.end("acme", "llama", t0.Add(3*time.Second))
	p.begin("beta", "llama", t0.Add(time.Second))

	rr := httptest.NewRecorder()
	p.handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/profile?window=5m&tenant=acme", nil))
	if rr.Code != 200 {
		t.Fatalf("status %d: %s", rr.Code, rr.Body)
	}
	var raw map[string]any
	if err := json.Unmarshal(rr.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["format"] != ProfileFormat || raw["version"] != float64(ProfileVersion) || raw["window"] != "5m" || raw["window_seconds"] != float64(120) {
		t.Fatalf("header fields: %v %v %v %v", raw["format"], raw["version"], raw["window"], raw["window_seconds"])
	}
	// The documented fields are all present.
	body := rr.Body.String()
	for _, f := range []string{
		`"generated_at"`, `"shape_thresholds"`, `"rag_min_isl":2048`, `"token_bucket_bounds":[16,32,`,
		`"tenants"`, `"profile"`, `"models"`, `"requests"`, `"measured"`, `"arrivals"`,
		`"arrival_rate_per_second"`, `"inter_arrival"`, `"gamma_shape":null`, `"isl"`, `"osl"`,
		`"isl_osl":[{"isl_bucket":6,"osl_bucket":3,"count":1}]`, `"concurrency"`, `"p95"`, `"peak":1`,
		`"shapes"`, `"traffic":"chat"`, `"buckets"`,
	} {
		if !strings.Contains(body, f) {
			t.Errorf("%s missing from %s", f, body)
		}
	}
	var snap ProfileSnapshot
	if err := json.Unmarshal(rr.Body.Bytes(), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Tenants) != 1 || snap.Tenants[0].Models[0].Model != "llama" {
		t.Fatalf("tenants %+v", snap.Tenants)
	}

	// Default window 1h; unknown window 400.
	rr = httptest.NewRecorder()
	p.handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/profile", nil))
	if !strings.Contains(rr.Body.String(), `"window":"1h"`) || !strings.Contains(rr.Body.String(), `"tenant":"beta"`) {
		t.Fatalf("default window: %s", rr.Body)
	}
	rr = httptest.NewRecorder()
	p.handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/profile?window=2h", nil))
	if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), "unknown window") {
		t.Fatalf("bad window: %d %s", rr.Code, rr.Body)
	}
}

func TestProfileBoundsSeriesAndConcurrentUse(t *testing.T) {
	p := newProfile(profileOptions{Start: t0, MaxSeries: 4})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				tn := []string{"a", "b", "c", "d", "e"}[(g+i)%5]
				now := t0.Add(time.Duration(i) * time.Second)
				p.begin(tn, "m", now)
				p.Observe(tn, "m", &meter.Record{Outcome: meter.OutcomeOK, ISL: 100, OSL: 10}, now)
				p.end(tn, "m", now.Add(time.Second))
			}
		}()
	}
	for i := 0; i < 10; i++ {
		_ = p.snapshot(t0.Add(time.Duration(i)*30*time.Second), mustWindow(t, "1h"), "")
	}
	wg.Wait()
	if n := len(p.series); n > 2*4 {
		t.Fatalf("%d series with MaxSeries 4", n)
	}
	var arrivals uint64
	for _, tp := range p.snapshot(t0.Add(10*time.Minute), mustWindow(t, "1h"), "").Tenants {
		arrivals += tp.Profile.Arrivals
	}
	if arrivals != 1200 {
		t.Fatalf("arrivals %d, want 1200 (none lost by folding)", arrivals)
	}
}

func TestProfileSteadyStateDoesNotAllocate(t *testing.T) {
	skipAllocsUnderRace(t)
	p := newProfile(profileOptions{Start: t0})
	rec := &meter.Record{Outcome: meter.OutcomeOK, ISL: 1000, OSL: 200}
	now := t0
	step := func() {
		p.begin("acme", "m", now)
		p.Observe("acme", "m", rec, now.Add(time.Second))
		p.end("acme", "m", now.Add(time.Second))
		now = now.Add(time.Minute)
	}
	for i := 0; i < 25*60; i++ {
		step()
	}
	if n := testenv.AllocsPerRun(100, step); n != 0 {
		t.Fatalf("Begin/Observe/End allocate %v times in steady state", n)
	}
}

func BenchmarkProfileRequest(b *testing.B) {
	p := newProfile(profileOptions{Start: t0})
	rec := &meter.Record{Outcome: meter.OutcomeOK, ISL: 1000, OSL: 200}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		p.begin("acme", "m", now)
		p.Observe("acme", "m", rec, now)
		p.end("acme", "m", now)
		now = now.Add(time.Millisecond)
	}
}

// begin records the arrival of a request to model for tenant at now, and
// raises the in-flight count.
func (p *Profile) begin(tenant, model string, now time.Time) {
	sm, sa := p.pair(tenant, model)
	sm.begin(now, time.Time{}, true)
	sa.begin(now, time.Time{}, true)
}

// end records that a request begun with the same labels finished at now.
func (p *Profile) end(tenant, model string, now time.Time) {
	sm, sa := p.pair(tenant, model)
	sm.end(now, false)
	sa.end(now, false)
}
