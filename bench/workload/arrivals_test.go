package workload

import (
	"math"
	"testing"
	"time"
)

// gapStats returns the rate and the fitted gamma shape (mean²/variance of
// the gaps) of a schedule.
func gapStats(at []time.Duration) (rate, k float64) {
	var sum, sq float64
	n := float64(len(at) - 1)
	for i := 1; i < len(at); i++ {
		g := (at[i] - at[i-1]).Seconds()
		sum += g
		sq += g * g
	}
	mean := sum / n
	v := sq/n - mean*mean
	return 1 / mean, mean * mean / v
}

// The schedule's rate and gamma shape are those asked for, within 5%, for
// bursty, Poisson and regular arrivals; an exponential schedule would give
// k̂ ≈ 1 and fail the k = 0.25, 0.5 and 4 cases.
func TestArrivalsRateAndShape(t *testing.T) {
	const n = 200_000
	for _, c := range []struct{ rate, k float64 }{{10, 1}, {2, 0.5}, {50, 4}, {0.5, 0.25}, {200, 2}} {
		at := Arrivals(n, c.rate, c.k, 42)
		if at[0] != 0 {
			t.Errorf("rate %v k %v: first arrival at %v, want 0", c.rate, c.k, at[0])
		}
		rate, k := gapStats(at)
		re, ke := rate/c.rate-1, k/c.k-1
		t.Logf("rate %v k %v: measured rate %.4f (%+.2f%%), k̂ %.4f (%+.2f%%)", c.rate, c.k, rate, 100*re, k, 100*ke)
		if math.Abs(re) > 0.05 || math.Abs(ke) > 0.05 {
			t.Errorf("rate %v k %v: measured rate %.4f, k̂ %.4f: more than 5%% off", c.rate, c.k, rate, k)
		}
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1] {
				t.Fatalf("rate %v k %v: arrival %d at %v before %v", c.rate, c.k, i, at[i], at[i-1])
			}
		}
	}
}

func TestArrivalsEdgeCases(t *testing.T) {
	if a := Arrivals(0, 1, 1, 1); a != nil {
		t.Errorf("n=0: %v", a)
	}
	for _, rate := range []float64{math.Inf(1), 0, -1, math.NaN()} {
		for _, d := range Arrivals(5, rate, 1, 1) {
			if d != 0 {
				t.Errorf("rate %v: arrival at %v, want all at 0", rate, d)
			}
		}
	}
	// k = +Inf: evenly spaced.
	for i, d := range Arrivals(5, 4, math.Inf(1), 1) {
		if want := time.Duration(i) * 250 * time.Millisecond; d != want {
			t.Errorf("k=+Inf: arrival %d at %v, want %v", i, d, want)
		}
	}
	// Deterministic for the seed; another seed, another schedule.
	a, b, c := Arrivals(100, 5, 0.7, 9), Arrivals(100, 5, 0.7, 9), Arrivals(100, 5, 0.7, 10)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, arrival %d: %v vs %v", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("seeds 9 and 10 give the same schedule")
	}
	// A burstiness that is not positive is Poisson.
	p, q := Arrivals(50, 3, 1, 5), Arrivals(50, 3, -2, 5)
	for i := range p {
		if p[i] != q[i] {
			t.Fatalf("k=-2 is not k=1 at %d: %v vs %v", i, q[i], p[i])
		}
	}
	// An absurdly slow rate saturates instead of overflowing.
	if d := Arrivals(3, 1e-300, 1, 1)[2]; d <= 0 {
		t.Errorf("tiny rate: arrival at %v", d)
	}
}

// Schedule is vLLM's plan: the first request one gap in, the last at
// exactly n/rate whatever the seed (a probe: the unscaled sums put the
// last of 20 requests at 10/s at 2.17, 1.76 and 2.80 s for seeds 1 to 3),
// and the gaps' shape that of the burstiness asked.
func TestScheduleIsVLLMs(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		at := Schedule(20, 10, 1, seed)
		if at[0] <= 0 {
			t.Errorf("seed %d: first request at %v, want one gap in", seed, at[0])
		}
		if d := at[19] - 2*time.Second; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("seed %d: last request at %v, want 2s", seed, at[19])
		}
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1] {
				t.Fatalf("seed %d: request %d at %v before %v", seed, i, at[i], at[i-1])
			}
		}
	}
	const n = 200_000
	for _, c := range []struct{ rate, k float64 }{{10, 1}, {2, 0.5}, {50, 4}} {
		at := Schedule(n, c.rate, c.k, 42)
		_, k := gapStats(at)
		if math.Abs(k/c.k-1) > 0.05 {
			t.Errorf("rate %v k %v: k̂ %.4f, more than 5%% off", c.rate, c.k, k)
		}
	}
	// k = +Inf: evenly spaced, the first one gap in, as vLLM's.
	for i, d := range Schedule(4, 4, math.Inf(1), 1) {
		if want := time.Duration(i+1) * 250 * time.Millisecond; d != want {
			t.Errorf("k=+Inf: request %d at %v, want %v", i, d, want)
		}
	}
	for _, rate := range []float64{math.Inf(1), 0, math.NaN()} {
		for _, d := range Schedule(3, rate, 1, 1) {
			if d != 0 {
				t.Errorf("rate %v: request at %v, want all at once", rate, d)
			}
		}
	}
	a, b := Schedule(50, 3, 0.7, 9), Schedule(50, 3, 0.7, 9)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, request %d: %v vs %v", i, a[i], b[i])
		}
	}
}
