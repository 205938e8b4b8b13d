package slo

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestProfileGapsOfArrivalsBegunOutOfOrder: a request's arrival is its t0
// (the head read), but the profile hears of it only once the body has been
// read and the model is known (Judger.Begin), so concurrent requests reach
// begin out of the order of their t0. PROFILE_FORMAT.md and MEASURES.md
// ("Burstiness") define inter_arrival over the gaps between consecutive
// arrivals: five arrivals one second apart have four gaps of 1 s, whatever
// order their bodies finished in. The profile drops every arrival older
// than the latest one begun and measures the next gap from that latest
// one, so it keeps 2 gaps (3 s and 1 s) and a mean of 2 s. Through the
// gateway, 300 requests sent at once (goodput bench --request-rate inf)
// showed 26 gaps of 299, a mean gap 11 times the log's and a gamma shape
// of 0.50 against the log's 0.04: bench --profile replays that traffic
// as far smoother than it was.
func TestProfileGapsOfArrivalsBegunOutOfOrder(t *testing.T) {
	p := newProfile(profileOptions{Start: t0})
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	// Begun in the order their bodies were read, not their heads.
	for _, sec := range []int{0, 3, 1, 2, 4} {
		p.begin("acme", "m", at(sec))
	}
	for _, sec := range []int{0, 1, 2, 3, 4} {
		p.end("acme", "m", at(sec).Add(500*time.Millisecond))
	}
	wp := tenantProfile(t, p.snapshot(at(10), mustWindow(t, "5m"), ""), "acme").Profile
	if wp.Arrivals != 5 {
		t.Fatalf("arrivals %d, want 5", wp.Arrivals)
	}
	ia := wp.InterArrival
	if ia.Count != 4 {
		t.Errorf("inter_arrival.count %d, want 4 (gaps between 5 consecutive arrivals)", ia.Count)
	}
	approx(t, "mean gap", ia.Mean, 1, 1e-12)
	approx(t, "gap stddev", ia.StdDev, 0, 1e-12)
}

// Arrivals counted in a shuffled order, each at most recentArrivals−1
// places from its own, across minute slots (a gap counted in one slot is
// taken back from it), give the gaps of the arrivals sorted: count, mean
// and variance as computed from the sorted times; the model's series and
// the tenant's alike.
func TestProfileGapsOfShuffledArrivals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 2000
	times := make([]time.Time, n)
	at := t0
	for i := range times {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(100*time.Millisecond)))
		times[i] = at
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Shuffle within blocks of recentArrivals/2: no arrival moves as far
	// as the buffer's length.
	for b := 0; b < n; b += recentArrivals / 2 {
		blk := order[b:min(b+recentArrivals/2, n)]
		rng.Shuffle(len(blk), func(i, j int) { blk[i], blk[j] = blk[j], blk[i] })
	}
	p := newProfile(profileOptions{Start: t0})
	for _, i := range order {
		p.begin("acme", "m", times[i])
	}
	for _, i := range order {
		p.end("acme", "m", times[i].Add(time.Millisecond))
	}
	var want moments
	for i := 1; i < n; i++ {
		want.add(times[i].Sub(times[i-1]).Seconds())
	}
	tp := tenantProfile(t, p.snapshot(at.Add(time.Second), mustWindow(t, "1h"), ""), "acme")
	for _, wp := range []*WorkProfile{tp.Profile, tp.Models[0].Profile} {
		ia := wp.InterArrival
		if wp.Arrivals != n || ia.Count != n-1 {
			t.Fatalf("arrivals %d, gaps %d; want %d, %d", wp.Arrivals, ia.Count, n, n-1)
		}
		approx(t, "mean gap", ia.Mean, want.mean, 1e-9)
		approx(t, "gap stddev", ia.StdDev, math.Sqrt(want.variance()), 1e-6)
	}
}

// An arrival counted after recentArrivals later ones has no known
// neighbour before it: it adds no gap, and every other gap stays as
// counted. One counted before any other was let go is the series' first
// arrival, and adds the gap to the one after it.
func TestProfileGapsOfArrivalsCountedVeryLate(t *testing.T) {
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	p := newProfile(profileOptions{Start: t0})
	p.begin("acme", "m", at(1)) // the first
	for i := range recentArrivals {
		p.begin("acme", "m", at(2+i))
	}
	p.begin("acme", "m", at(0)) // its neighbours were let go
	wp := tenantProfile(t, p.snapshot(at(recentArrivals+10), mustWindow(t, "1h"), ""), "acme").Profile
	if wp.Arrivals != recentArrivals+2 || wp.InterArrival.Count != recentArrivals {
		t.Fatalf("arrivals %d, gaps %d; want %d, %d", wp.Arrivals, wp.InterArrival.Count, recentArrivals+2, recentArrivals)
	}
	approx(t, "mean gap", wp.InterArrival.Mean, 1, 1e-12)

	p = newProfile(profileOptions{Start: t0})
	p.begin("acme", "m", at(2))
	p.begin("acme", "m", at(3))
	p.begin("acme", "m", at(0)) // before the first: its gap to it
	wp = tenantProfile(t, p.snapshot(at(300), mustWindow(t, "1h"), ""), "acme").Profile
	if wp.InterArrival.Count != 2 {
		t.Fatalf("gaps %d, want 2", wp.InterArrival.Count)
	}
	approx(t, "mean gap", wp.InterArrival.Mean, 1.5, 1e-12)
}

func TestMomentsRemove(t *testing.T) {
	xs := []float64{3, 1, 4, 1, 5, 9, 2, 6}
	var all, part moments
	for _, x := range xs {
		all.add(x)
	}
	for _, x := range xs[:5] {
		part.add(x)
	}
	for _, x := range xs[5:] {
		all.remove(x)
	}
	if math.Abs(all.n-part.n) > 0 || math.Abs(all.mean-part.mean) > 1e-12 || math.Abs(all.m2-part.m2) > 1e-9 {
		t.Fatalf("after removes %+v, want %+v", all, part)
	}
	all = moments{n: 1, mean: 2}
	all.remove(2)
	if all != (moments{}) {
		t.Fatalf("%+v, want empty", all)
	}
}
