package slo

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

var t0 = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

func testClasses() map[string]*Class {
	return map[string]*Class{
		"interactive": {TTFT: d(500 * ms), TPOT: d(50 * ms), E2E: d(60 * time.Second), Objective: 0.99},
		"batch":       {E2E: d(300 * time.Second), Objective: 0.9},
	}
}

func failed(o meter.Outcome) *meter.Record {
	return &meter.Record{Outcome: o, TTFT: meter.Unknown, E2E: meter.Unknown, TPOT: meter.Unknown, ISL: meter.Unknown, OSL: meter.Unknown}
}

// observe judges rec against its class and feeds the tracker.
func observe(tr *Tracker, k Key, rec *meter.Record, at time.Time) Verdict {
	v := judge(rec, testClasses()[k.SLO])
	tr.Observe(k, rec, v, at)
	return v
}

func approx(t *testing.T, what string, got Num, want, tol float64) {
	t.Helper()
	if math.IsNaN(want) {
		if !math.IsNaN(float64(got)) {
			t.Errorf("%s = %v, want undefined (null)", what, got)
		}
		return
	}
	if math.Abs(float64(got)-want) > tol*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

const exact = 1e-12

func scripted(t *testing.T) *Tracker {
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
	at := t0.Add(30 * time.Second)
	acmeLlama := Key{"acme", "llama", "interactive"}
	for _, c := range []struct {
		rec  *meter.Record
		good bool
	}{
		{stream(200*ms, 40*ms, 40*ms), true}, // OSL 3
		{stream(600 * ms), false},            // ttft; OSL 1
		{failed(meter.OutcomeTimeout), false},
		{failed(meter.OutcomeRateLimited), false},
	} {
		if v := observe(tr, acmeLlama, c.rec, at); v.Good != c.good {
			t.Fatalf("script: verdict %+v", v)
		}
	}
	// acme/mistral/batch: TTFT 2 s, one 8 s gap: OSL 2, E2E 10 s: good.
	observe(tr, Key{"acme", "mistral", "batch"}, stream(2*time.Second, 8*time.Second), at)
	// beta/llama/interactive: good, OSL 10.
	observe(tr, Key{"beta", "llama", "interactive"}, stream(100*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms), at)
	return tr
}

func TestTrackerScriptedSnapshotExact(t *testing.T) {
	tr := scripted(t)
	now := t0.Add(90 * time.Second)
	snap := tr.snapshot(now, "")
	if len(snap.Tenants) != 2 || snap.Tenants[0].Tenant != "acme" || snap.Tenants[1].Tenant != "beta" {
		t.Fatalf("tenants = %+v", snap.Tenants)
	}
	acme := snap.Tenants[0]
	if len(acme.SLOs) != 2 || acme.SLOs[0] != "batch" || acme.SLOs[1] != "interactive" {
		t.Fatalf("acme slos = %v", acme.SLOs)
	}
	for _, wn := range []string{"5m", "1h", "24h"} {
		w := acme.Windows[wn]
		// Every window started before the tracker: it covers the 90 s since.
		if w.Seconds != 90 {
			t.Errorf("%s: seconds = %v", wn, w.Seconds)
		}
		if w.Requests != 5 || w.Good != 2 || w.Misses != 3 {
			t.Errorf("%s: requests/good/misses = %d/%d/%d", wn, w.Requests, w.Good, w.Misses)
		}
		wantReasons := map[string]uint64{"ttft": 1, "error": 1, "rate_limited": 1}
		for r, n := range w.MissReasons {
			if n != wantReasons[r] {
				t.Errorf("%s: reason %s = %d, want %d", wn, r, n, wantReasons[r])
			}
		}
		if len(w.MissReasons) != 8 {
			t.Errorf("%s: %d reasons listed, want all 8", wn, len(w.MissReasons))
		}
		approx(t, wn+" attainment", w.Attainment, 0.4, exact)
		// Allowed misses: 4 interactive × 0.01 + 1 batch × 0.1 = 0.14.
		approx(t, wn+" burn", w.BurnRate, 3/0.14, 1e-9)
		approx(t, wn+" budget", w.ErrorBudgetRemaining, 1-3/0.14, 1e-9)
		approx(t, wn+" objective", w.Objective, 1-0.14/5, 1e-12)
		approx(t, wn+" req/s", w.RequestsPerSecond, 5.0/90, exact)
		approx(t, wn+" good req/s", w.GoodRequestsPerSecond, 2.0/90, exact)
		if w.OutputTokens != 6 || w.GoodOutputTokens != 5 {
			t.Errorf("%s: tokens %d good %d", wn, w.OutputTokens, w.GoodOutputTokens)
		}
		approx(t, wn+" tok/s", w.OutputTokensPerSecond, 6.0/90, exact)
		approx(t, wn+" good tok/s", w.GoodOutputTokensPerSecond, 5.0/90, exact)
		// TTFT of ok requests: 0.2, 0.6, 2.0.
		if w.TTFT.Count != 3 || w.TTFT.Max != 2 {
			t.Errorf("%s: ttft count %d max %v", wn, w.TTFT.Count, w.TTFT.Max)
		}
		approx(t, wn+" ttft mean", w.TTFT.Mean, 2.8/3, 1e-12)
		approx(t, wn+" ttft p50", w.TTFT.P50, 0.6, relativeAccuracy)
		approx(t, wn+" ttft p99", w.TTFT.P99, 0.6+0.98*1.4, relativeAccuracy)
		// TPOT only where OSL > 1: 0.04 and 8.
		if w.TPOT.Count != 2 || w.TPOT.Max != 8 {
			t.Errorf("%s: tpot %+v", wn, w.TPOT)
		}
		// ITL gaps: 0.04, 0.04, 8.
		if w.ITL.Count != 3 || w.ITL.Max != 8 {
			t.Errorf("%s: itl %+v", wn, w.ITL)
		}
		approx(t, wn+" itl p50", w.ITL.P50, 0.04, relativeAccuracy)
		// E2E: 0.28, 0.6, 10.
		if w.E2E.Count != 3 || w.E2E.Max != 10 {
			t.Errorf("%s: e2e %+v", wn, w.E2E)
		}
	}
	if len(acme.Models) != 2 || acme.Models[0].Model != "llama" || acme.Models[1].Model != "mistral" {
		t.Fatalf("acme models = %+v", acme.Models)
	}
	llama := acme.Models[0].Windows["1h"]
	if llama.Requests != 4 || llama.Good != 1 {
		t.Fatalf("acme/llama = %d/%d", llama.Requests, llama.Good)
	}
	approx(t, "llama attainment", llama.Attainment, 0.25, exact)
	approx(t, "llama burn", llama.BurnRate, 3/0.04, 1e-9)
	approx(t, "llama objective", llama.Objective, 0.99, 1e-12)
	mistral := acme.Models[1].Windows["5m"]
	approx(t, "mistral attainment", mistral.Attainment, 1, exact)
	approx(t, "mistral burn", mistral.BurnRate, 0, exact)
	approx(t, "mistral budget", mistral.ErrorBudgetRemaining, 1, exact)

	beta := snap.Tenants[1].Windows["5m"]
	if beta.Requests != 1 || beta.Good != 1 || beta.OutputTokens != 10 {
		t.Fatalf("beta = %+v", beta)
	}

	// Only one tenant when asked.
	if s := tr.snapshot(now, "beta"); len(s.Tenants) != 1 || s.Tenants[0].Tenant != "beta" {
		t.Fatalf("tenant filter: %+v", s.Tenants)
	}
}

func TestTrackerWindowsRollOver(t *testing.T) {
	tr := scripted(t) // five acme requests at t0+30s
	k := Key{"acme", "llama", "interactive"}
	reqs := func(now time.Time) (w5, w1h, w24 uint64) {
		s := tr.snapshot(now, "acme")
		if len(s.Tenants) == 0 {
			return 0, 0, 0
		}
		ws := s.Tenants[0].Windows
		return ws["5m"].Requests, ws["1h"].Requests, ws["24h"].Requests
	}
	check := func(at time.Duration, want5, want1h, want24 uint64) {
		t.Helper()
		a, b, c := reqs(t0.Add(at))
		if a != want5 || b != want1h || c != want24 {
			t.Errorf("at t0+%v: 5m/1h/24h = %d/%d/%d, want %d/%d/%d", at, a, b, c, want5, want1h, want24)
		}
	}
	check(4*time.Minute+59*time.Second, 5, 5, 5) // slots 10:00…10:04
	check(5*time.Minute, 0, 5, 5)                // 10:01…10:05
	check(59*time.Minute, 0, 5, 5)
	check(60*time.Minute, 0, 0, 5) // 10:01…11:00
	check(23*time.Hour+59*time.Minute, 0, 0, 5)
	check(24*time.Hour, 0, 0, 0)

	// The 5m window's span is the time since its first slot's start.
	w := tr.snapshot(t0.Add(10*time.Minute+30*time.Second), "acme").Tenants[0].Windows
	if w["5m"].Seconds != 4*60+30 || w["1h"].Seconds != 630 {
		t.Errorf("spans: 5m %v 1h %v", w["5m"].Seconds, w["1h"].Seconds)
	}
	approx(t, "empty window attainment", w["5m"].Attainment, math.NaN(), 0)
	approx(t, "empty window burn", w["5m"].BurnRate, math.NaN(), 0)
	approx(t, "empty window req/s", w["5m"].RequestsPerSecond, 0, exact)

	// A slot reused after a whole ring holds only the new minute's data.
	at := t0.Add(60*time.Minute + 10*time.Second) // same minute slot as 10:00
	observe(tr, k, stream(100*ms), at)
	check(60*time.Minute+20*time.Second, 1, 1, 6)
	check(2*time.Hour, 0, 0, 6)
	// Observations older than every window do not show.
	observe(tr, k, stream(100*ms), t0.Add(-25*time.Hour))
	check(60*time.Minute+20*time.Second, 1, 1, 6)
}

// Failed requests are never dropped: they are in the denominator, so
// dropping them could only raise attainment, and the tracker never does.
func TestTrackerFailuresStayInDenominator(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	outcomes := meter.Outcomes()
	for iter := 0; iter < 50; iter++ {
		all := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
		okOnly := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
		k := Key{"acme", "m", "interactive"}
		var n, good, failures uint64
		for i := 0; i < 1+rng.IntN(200); i++ {
			var rec *meter.Record
			if rng.IntN(3) == 0 {
				rec = failed(outcomes[1+rng.IntN(len(outcomes)-1)])
			} else {
				rec = stream(time.Duration(rng.Int64N(int64(time.Second))), 30*ms)
			}
			at := t0.Add(time.Duration(rng.Int64N(int64(4 * time.Minute))))
			v := observe(all, k, rec, at)
			n++
			if v.Good {
				good++
			}
			if rec.Outcome != meter.OutcomeOK {
				failures++
				if v.Good {
					t.Fatal("failed request judged good")
				}
				continue
			}
			okOnly.Observe(k, rec, v, at)
		}
		now := t0.Add(4*time.Minute + 59*time.Second)
		w := all.snapshot(now, "").Tenants[0].Windows["5m"]
		if w.Requests != n || w.Good != good {
			t.Fatalf("requests %d good %d, want %d %d", w.Requests, w.Good, n, good)
		}
		approx(t, "attainment", w.Attainment, float64(good)/float64(n), exact)
		if failures > 0 {
			dropped := okOnly.snapshot(now, "")
			if len(dropped.Tenants) > 0 {
				wd := dropped.Tenants[0].Windows["5m"]
				if a, b := float64(w.Attainment), float64(wd.Attainment); a > b || (good > 0 && a == b) {
					t.Fatalf("with failures %v, without %v: failures must lower attainment", w.Attainment, wd.Attainment)
				}
			}
		}
	}
}

func TestTrackerHandler(t *testing.T) {
	tr := scripted(t)
	tr.now = func() time.Time { return t0.Add(90 * time.Second) }
	h := tr.handler()

	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/slo?tenant=acme", nil))
	if rr.Code != 200 || rr.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d type %q", rr.Code, rr.Header().Get("Content-Type"))
	}
	var snap SLOSnapshot
	if err := json.Unmarshal(rr.Body.Bytes(), &snap); err != nil {
		t.Fatalf("decode: %v\n%s", err, rr.Body)
	}
	if len(snap.Tenants) != 1 || snap.Tenants[0].Windows["5m"].Requests != 5 {
		t.Fatalf("snapshot %+v", snap)
	}
	approx(t, "decoded attainment", snap.Tenants[0].Windows["1h"].Attainment, 0.4, exact)
	// Undefined numbers are null, not NaN (which JSON cannot carry).
	rr = httptest.NewRecorder()
	tr.now = func() time.Time { return t0.Add(30 * time.Minute) }
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/admin/api/slo", nil))
	var raw struct {
		Tenants []struct {
			Windows map[string]map[string]any `json:"windows"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if v, ok := raw.Tenants[0].Windows["5m"]["attainment"]; !ok || v != nil {
		t.Fatalf("5m attainment with no requests = %v (present %v), want null", v, ok)
	}

	rr = httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/admin/api/slo", nil))
	if rr.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rr.Code)
	}
}

func TestTrackerBoundsSeries(t *testing.T) {
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0, MaxSeries: 2})
	at := t0.Add(time.Second)
	for i, tn := range []string{"a", "b", "c", "d", "e"} {
		observe(tr, Key{tn, "m", "interactive"}, stream(100*ms), at.Add(time.Duration(i)))
	}
	snap := tr.snapshot(at.Add(time.Minute), "")
	if len(tr.series) > 3 {
		t.Fatalf("%d series with MaxSeries 2", len(tr.series))
	}
	var total uint64
	names := ""
	for _, ts := range snap.Tenants {
		total += ts.Windows["5m"].Requests
		names += ts.Tenant + " "
	}
	if total != 5 || names != "a b other " {
		t.Fatalf("tenants %q, total %d", names, total)
	}
}

func TestTrackerSetClasses(t *testing.T) {
	tr := scripted(t)
	cl := testClasses()
	cl["interactive"].Objective = 0.9
	tr.SetClasses(cl)
	w := tr.snapshot(t0.Add(time.Minute), "beta").Tenants[0].Windows["5m"]
	approx(t, "objective after reload", w.Objective, 0.9, 1e-12)
	tr.SetClasses(nil)
	w = tr.snapshot(t0.Add(time.Minute), "beta").Tenants[0].Windows["5m"]
	approx(t, "unknown class objective", w.Objective, math.NaN(), 0)
	approx(t, "unknown class burn", w.BurnRate, math.NaN(), 0)
}

func TestTrackerConcurrent(t *testing.T) {
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
	rec := benchRecord(32)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := Key{[]string{"a", "b"}[i%2], "m", "interactive"}
				observe(tr, k, rec, t0.Add(time.Duration(i)*time.Second))
			}
		}()
	}
	for i := 0; i < 20; i++ {
		_ = tr.snapshot(t0.Add(time.Duration(i)*25*time.Second), "")
	}
	wg.Wait()
	var total uint64
	for _, ts := range tr.snapshot(t0.Add(499*time.Second), "").Tenants {
		total += ts.Windows["1h"].Requests
	}
	if total != 2000 {
		t.Fatalf("total %d, want 2000", total)
	}
}

func TestTrackerObserveSteadyStateDoesNotAllocate(t *testing.T) {
	skipAllocsUnderRace(t)
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
	k := Key{"acme", "llama", "interactive"}
	rec := benchRecord(64)
	v := judge(rec, testClasses()["interactive"])
	// Two days and a bit, a request every 30 s: every slot of both rings
	// is used twice, and has grown its buckets to what it holds of such a
	// load. A slot's sketch store places its pages anew after a reset, so
	// it takes a second round for all to be there: in the second day, 4
	// allocations every hour, none after. (The test had warmed up a minute
	// apart for a day, and testing.AllocsPerRun's integer division read
	// 0.575 allocations per call as none.)
	step := func(now time.Time) time.Time {
		tr.Observe(k, rec, v, now)
		return now.Add(30 * time.Second) // rolls slots over
	}
	now := t0
	for i := 0; i < 50*120; i++ {
		now = step(now)
	}
	if n := testenv.AllocsPerRun(120, func() { now = step(now) }); n != 0 {
		t.Fatalf("Observe allocates %v times in steady state", n)
	}
}

func BenchmarkTrackerObserve(b *testing.B) {
	for _, events := range []int{1, 256} {
		b.Run(map[int]string{1: "events=1", 256: "events=256"}[events], func(b *testing.B) {
			tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
			k := Key{"acme", "llama", "interactive"}
			rec := benchRecord(events)
			v := judge(rec, testClasses()["interactive"])
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				tr.Observe(k, rec, v, now)
				now = now.Add(time.Millisecond)
			}
		})
	}
}

func BenchmarkTrackerSnapshot(b *testing.B) {
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
	rec := benchRecord(64)
	v := judge(rec, testClasses()["interactive"])
	now := t0
	for i := 0; i < 24*60; i++ {
		for j := 0; j < 10; j++ {
			tr.Observe(Key{[]string{"a", "b", "c"}[j%3], []string{"x", "y"}[j%2], "interactive"}, rec, v, now)
		}
		now = now.Add(time.Minute)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = tr.snapshot(now, "")
	}
}

func TestSmallHelpers(t *testing.T) {
	ws := Windows()
	if len(ws) != 3 || ws[0].Name != "5m" || ws[1].Length != time.Hour || ws[2].Slot != time.Hour {
		t.Fatalf("Windows = %+v", ws)
	}
	ws[0].Name = "changed"
	if w, err := windowByName("5m"); err != nil || w.Length != 5*time.Minute {
		t.Fatal("Windows returned shared storage or WindowByName broke")
	}
	for _, c := range []struct {
		n    Num
		want string
	}{{Num(0.25), "0.25"}, {Num(math.NaN()), "null"}, {Num(math.Inf(1)), "null"}, {Num(3), "3"}} {
		b, err := json.Marshal(c.n)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%v) = %s %v", c.n, b, err)
		}
	}
	var n Num
	if err := json.Unmarshal([]byte("null"), &n); err != nil || !math.IsNaN(float64(n)) {
		t.Error("null should read as NaN")
	}
}

// A non-streamed ok response is judged on its E2E in place of TTFT, but it
// has no TTFT: the window's TTFT distribution leaves it out, as the record
// and Prometheus do, and its E2E enters the E2E distribution.
func TestTrackerTTFTLeavesOutNonStreamed(t *testing.T) {
	tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
	k := Key{"acme", "m", "interactive"}
	at := t0.Add(30 * time.Second)
	observe(tr, k, stream(200*ms, 40*ms), at)
	body := &meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, TPOT: meter.Unknown, E2E: 340 * ms, ISL: 5, OSL: 7, Events: meter.Unknown}
	if v := observe(tr, k, body, at); !v.Good {
		t.Fatalf("a non-streamed response within its bounds judged %+v", v)
	}
	w := tr.snapshot(t0.Add(time.Minute), "").Tenants[0].Windows["5m"]
	if w.Requests != 2 || w.Good != 2 {
		t.Fatalf("requests %d good %d, want 2 2", w.Requests, w.Good)
	}
	if w.TTFT.Count != 1 {
		t.Errorf("TTFT distribution counts %d requests, want 1 (the stream)", w.TTFT.Count)
	}
	approx(t, "TTFT max", w.TTFT.Max, 0.2, 1e-2)
	if w.E2E.Count != 2 {
		t.Errorf("E2E distribution counts %d requests, want 2", w.E2E.Count)
	}
}

// BenchmarkTrackerSeriesMemory reports the heap one busy series holds once
// both rings are full (a day and an hour, minute by minute): streams of 64
// events with gaps of 5–35 ms, one gap in 50 of 2 µs (events read just
// apart) and one of 1.5 s (a stall), the range a real stream's gaps span.
func BenchmarkTrackerSeriesMemory(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	recs := make([]*meter.Record, 16)
	for i := range recs {
		r := benchRecord(64)
		r.ITL = slices.Clone(r.ITL)
		for j := range r.ITL {
			switch rng.IntN(50) {
			case 0:
				r.ITL[j] = 2 * time.Microsecond
			case 1:
				r.ITL[j] = 1500 * ms
			}
		}
		recs[i] = r
	}
	v := judge(recs[0], testClasses()["interactive"])
	var perSeries float64
	for b.Loop() {
		const series = 8
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := newTracker(trackerOptions{Classes: testClasses(), Start: t0})
		now := t0
		for m := 0; m < 25*60; m++ {
			for s := 0; s < series; s++ {
				k := Key{"acme", strconv.Itoa(s), "interactive"}
				for r := 0; r < 4; r++ {
					tr.Observe(k, recs[(m+s+r)%len(recs)], v, now)
				}
			}
			now = now.Add(time.Minute)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perSeries = float64(after.HeapAlloc-before.HeapAlloc) / series
		runtime.KeepAlive(tr)
	}
	b.ReportMetric(perSeries/1024, "KiB/series")
}

// A window at exactly its objective spends exactly its error budget: burn
// rate 1, nothing of the budget left, and the objective as configured.
// 1 − 0.9 is 0.09999999999999998 in binary floating point, below the
// budget, so 9 good of 10 against 0.9 burned 1.0000000000000002 times the
// budget and showed it overspent (−2.2e−16 left: the live page's budget
// cell red, the report's "100.000000%" used).
func TestTrackerBurnAtObjectiveIsOne(t *testing.T) {
	for _, c := range []struct {
		objective     float64
		requests, bad int
	}{{0.9, 10, 1}, {0.9, 30, 3}, {0.8, 15, 3}, {0.95, 20, 1}, {0.99, 300, 3}, {0.999, 1000, 1}} {
		tr := newTracker(trackerOptions{Classes: map[string]*Class{"c": {E2E: d(time.Second), Objective: c.objective}}, Start: t0})
		at := t0.Add(30 * time.Second)
		for i := range c.requests {
			rec := failed(meter.OutcomeUpstreamError)
			v := Verdict{Reasons: Reasons(0).with(reasonError)}
			if i >= c.bad {
				rec.Outcome, v = meter.OutcomeOK, Verdict{Good: true}
			}
			tr.Observe(Key{"acme", "m", "c"}, rec, v, at)
		}
		snap := tr.snapshot(at, "")
		for _, w := range []*WindowStats{snap.Tenants[0].Windows["5m"], snap.Tenants[0].Models[0].Windows["1h"]} {
			if w.BurnRate != 1 || w.ErrorBudgetRemaining != 0 || w.Objective != Num(c.objective) || w.Attainment < w.Objective {
				t.Errorf("objective %v, %d of %d missed: burn rate %v, budget remaining %v, objective %v, attainment %v; want 1, 0, %v and attainment ≥ objective",
					c.objective, c.bad, c.requests, float64(w.BurnRate), float64(w.ErrorBudgetRemaining), float64(w.Objective), float64(w.Attainment), c.objective)
			}
		}
	}
}

// A class a reload removed leaves its series with an unknown objective:
// the windows in which that series has requests have an unknown budget,
// but not the others. Its series, with no request in the last 5 minutes,
// made its tenant's 5m window of two other classes' requests (objectives
// 0.9 and 0.99) NaN: objective, burn rate and budget left (0·NaN is NaN).
func TestTrackerRemovedClassLeavesOtherWindowsKnown(t *testing.T) {
	classes := map[string]*Class{"a": {E2E: d(time.Second), Objective: 0.9}, "b": {E2E: d(time.Second), Objective: 0.99}, "gone": {E2E: d(time.Second), Objective: 0.5}}
	tr := newTracker(trackerOptions{Classes: classes, Start: t0})
	good := func(k Key, at time.Time) { tr.Observe(k, failed(meter.OutcomeOK), Verdict{Good: true}, at) }
	good(Key{"acme", "m3", "gone"}, t0.Add(time.Minute))
	delete(classes, "gone")
	tr.SetClasses(classes)
	at := t0.Add(2 * time.Hour)
	good(Key{"acme", "m1", "a"}, at)
	rec := failed(meter.OutcomeUpstreamError)
	tr.Observe(Key{"acme", "m2", "b"}, rec, Verdict{Reasons: Reasons(0).with(reasonError)}, at)
	snap := tr.snapshot(at, "")
	w := snap.Tenants[0].Windows["5m"]
	// 1 miss of 2 against allowed 0.1 + 0.01.
	if w.Requests != 2 || !(math.Abs(float64(w.Objective)-0.945) <= 1e-12) || !(math.Abs(float64(w.BurnRate)-1/0.11) <= 1e-9) {
		t.Errorf("5m window: requests %d, objective %v, burn rate %v; want 2, 0.945, %v", w.Requests, float64(w.Objective), float64(w.BurnRate), 1/0.11)
	}
	if w := snap.Tenants[0].Windows["24h"]; !math.IsNaN(float64(w.BurnRate)) {
		t.Errorf("24h window, which holds the removed class's request: burn rate %v, want NaN (unknown)", float64(w.BurnRate))
	}
}
