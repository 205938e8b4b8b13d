package slo

import (
	"math"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
)

// A wall clock set a day ahead (a bad NTP server, a VM's clock) for over
// an hour, then stepped back: the live view and the profile count the
// requests judged after the step. Before, the rings' slots held ids of the
// day ahead, every later observation was "older than the ring" and was
// dropped, and the 5m, 1h and 24h windows stayed empty for that day.
func TestWallClockStepBackKeepsCounting(t *testing.T) {
	fast := map[string]*Class{"fast": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.99}}
	j, clk, _ := newTestJudger(t, fast, "fast")
	judgeOne := func() {
		rec := judgingRecord(clk)
		j.Begin(rec)
		clk.t = clk.t.Add(time.Second)
		j.Judge(rec)
	}
	real := clk.t
	// 25 hours a day ahead, a request a minute: every minute slot and
	// every hour slot holds an id of the day ahead.
	clk.t = real.Add(24 * time.Hour)
	for i := 0; i < 25*60; i++ {
		judgeOne()
		clk.t = clk.t.Add(59 * time.Second)
	}
	// NTP steps the clock back to the real time (the 25 hours went by).
	// Until a request comes, the windows show nothing of the day ahead
	// either (the 24h window showed the hour the clock had read a day
	// before: the same clock hour).
	clk.t = real.Add(25 * time.Hour)
	for _, ts := range j.tracker.snapshot(clk.t, "acme").Tenants {
		for name, w := range ts.Windows {
			if w.Requests != 0 {
				t.Errorf("live view %s window just after the step back: %d requests, want 0", name, w.Requests)
			}
		}
	}
	const n = 10
	for i := 0; i < n; i++ {
		judgeOne()
		clk.t = clk.t.Add(9 * time.Second)
	}
	snap := j.tracker.snapshot(clk.t, "acme")
	if len(snap.Tenants) == 0 {
		t.Fatalf("live view after the step back: no tenant, want %d requests", n)
	}
	for _, w := range []string{"5m", "1h", "24h"} {
		if got := snap.Tenants[0].Windows[w].Requests; got != n {
			t.Errorf("live view %s window after the step back: %d requests, want %d", w, got, n)
		}
	}
	for _, w := range windows {
		ps := j.profile.snapshot(clk.t, w, "acme")
		if len(ps.Tenants) == 0 {
			t.Errorf("profile %s window after the step back: no tenant, want %d arrivals", w.Name, n)
			continue
		}
		p := ps.Tenants[0].Profile
		if p.Arrivals != n || p.Requests != n {
			t.Errorf("profile %s window after the step back: %d arrivals, %d requests, want %d", w.Name, p.Arrivals, p.Requests, n)
		}
		// Since the step: one request in flight for 1 s of every 10 s.
		if m := float64(p.Concurrency.Mean); math.Abs(m-0.1) > 1e-9 || p.Concurrency.Peak != 1 {
			t.Errorf("profile %s window after the step back: concurrency mean %v peak %d, want 0.1 and 1", w.Name, m, p.Concurrency.Peak)
		}
		if g := p.InterArrival.Count; g != n-1 {
			t.Errorf("profile %s window after the step back: %d inter-arrival gaps, want %d", w.Name, g, n-1)
		}
	}
}

// A step back of the wall clock by less than a slot (NTP steps past 128 ms
// of offset), and requests whose t0 is minutes older than the latest
// observation (a slow upload), keep every count.
func TestWallClockSmallStepBackKeepsCounts(t *testing.T) {
	fast := map[string]*Class{"fast": {TTFT: cfgtypes.Duration(100 * time.Millisecond), Objective: 0.99}}
	j, clk, _ := newTestJudger(t, fast, "fast")
	const n = 20
	for i := 0; i < n; i++ {
		rec := judgingRecord(clk)
		if i == n/2 {
			rec.Start = clk.t.Add(-3 * time.Minute) // uploaded for 3 minutes
		}
		j.Begin(rec)
		clk.t = clk.t.Add(time.Second)
		j.Judge(rec)
		if i%5 == 4 {
			clk.t = clk.t.Add(-40 * time.Second) // stepped back
		} else {
			clk.t = clk.t.Add(5 * time.Second)
		}
	}
	w := j.tracker.snapshot(clk.t.Add(time.Minute), "acme").Tenants[0].Windows
	for _, name := range []string{"5m", "1h", "24h"} {
		if got := w[name].Requests; got != n {
			t.Errorf("live view %s window: %d requests, want %d", name, got, n)
		}
	}
	ps := j.profile.snapshot(clk.t.Add(time.Minute), windows[0], "acme")
	if p := ps.Tenants[0].Profile; p.Arrivals != n || p.Requests != n {
		t.Errorf("profile 5m window: %d arrivals, %d requests, want %d", p.Arrivals, p.Requests, n)
	}
}
