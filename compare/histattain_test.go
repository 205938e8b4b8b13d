package compare

import (
	"math/rand/v2"
	"testing"
)

// histOf builds a histogram with the gateway's buckets (bounds in ms) from
// the values observed.
func histOf(boundsMS []float64, vals []float64) Dist {
	counts := make([]float64, len(boundsMS)+1)
	for _, v := range vals {
		i := 0
		for i < len(boundsMS) && v > boundsMS[i] {
			i++
		}
		counts[i]++
	}
	return histDist(boundsMS, counts)
}

var (
	ttftMS = []float64{5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000}
	itlMS  = []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12.5, 15, 20, 25, 30, 40, 50, 60, 75, 100, 150, 200, 300, 500}
	e2eMS  = []float64{50, 100, 250, 500, 1000, 2000, 3000, 5000, 7500, 10000}
)

// One request as the gateway records and exports it.
type histReq struct {
	ok, streamed bool
	ttft, e2e    float64 // ms; ttft < 0: none
	osl          int
	// A failed request whose outcome may be the client's doing (a client
	// error, a rejection, a client abort: soft), and whether it counts
	// against attainment all the same (a 429 from the engine, an abort
	// after the first byte). A failure that is not soft always counts.
	soft, counts bool
}

// miss reports whether r is a failure that counts against attainment.
func (r histReq) miss() bool { return !r.ok && (!r.soft || r.counts) }

// tpot is the request's TPOT in ms (< 0: none), as the gateway exports it.
func (r histReq) tpot() float64 {
	if !r.streamed || r.osl <= 1 || r.ttft < 0 {
		return -1
	}
	return (r.e2e - r.ttft) / float64(r.osl-1)
}

// good judges a completed request as a per-request source does: a
// non-streamed answer's E2E stands in for its TTFT and its TPOT bounds
// nothing; one output token is TPOT 0.
func (r histReq) good(o SLO) bool {
	ttft, tpot := r.ttft, r.tpot()
	if !r.streamed {
		ttft = r.e2e
	}
	if tpot < 0 {
		tpot = 0
	}
	return (o.TTFT <= 0 || ttft <= o.TTFT) && (o.TPOT <= 0 || tpot <= o.TPOT) && (o.E2EL <= 0 || r.e2e <= o.E2EL)
}

// promSide is what compare reads from Prometheus for reqs: histograms that
// hold every outcome's measures, the completed and failed counts.
func promSide(reqs []histReq) *Side {
	var ttft, tpot, e2e []float64
	s := newSide(KindPrometheus, "test")
	failed, hard, soft := 0, 0, 0
	for _, r := range reqs {
		switch {
		case r.ok:
			s.Requests++
		case r.soft:
			failed++
			soft++
		default:
			failed++
			hard++
		}
		if r.ttft >= 0 {
			ttft = append(ttft, r.ttft)
		}
		if v := r.tpot(); v >= 0 {
			tpot = append(tpot, v)
		}
		e2e = append(e2e, r.e2e)
	}
	s.Failed = Num(failed)
	s.missLo, s.missHi = Num(hard), Num(hard+soft)
	s.TTFT, s.TPOT, s.E2E = histOf(ttftMS, ttft), histOf(itlMS, tpot), histOf(e2eMS, e2e)
	return s
}

// The cases a user found: 31 of 150 requests of one or two tokens (no TPOT
// observation, within the bound), 119 TPOTs over 25 ms, 2 TTFTs over 150
// ms: exactly 30 good, and the range said 0–0; then 68 completed and 32
// rejected (429) whose few milliseconds of E2E counted as holding.
func TestHistAttainmentHoldsTheExact(t *testing.T) {
	var reqs []histReq
	for i := 0; i < 150; i++ {
		r := histReq{ok: true, streamed: true, ttft: 100, osl: 1, e2e: 100}
		if i < 119 {
			r.osl, r.e2e = 10, 100+9*30
		}
		if i >= 148 {
			r.ttft = 200
		}
		reqs = append(reqs, r)
	}
	o := SLO{TTFT: 150, TPOT: 25}
	a := promSide(reqs).attainment(o, false)
	if float64(a.Low) > 30.0/150+1e-9 || float64(a.High) < 30.0/150-1e-9 || a.High-a.Low > 0.02 {
		t.Errorf("tokens of one: attainment %+v, want a narrow range holding 0.2", a)
	}

	reqs = reqs[:0]
	for i := 0; i < 100; i++ {
		r := histReq{ok: i < 68, streamed: true, ttft: 50, osl: 20, e2e: 300}
		if i < 20 {
			r.e2e = 800
		}
		if !r.ok {
			r.ttft, r.osl, r.e2e = -1, 0, 0.1
		}
		reqs = append(reqs, r)
	}
	a = promSide(reqs).attainment(SLO{E2EL: 500}, false)
	// The 429s are misses: 48 good of 100.
	if exact := 48.0 / 100; float64(a.Low) > exact+1e-9 || float64(a.High) < exact-1e-9 {
		t.Errorf("with 429s in the histogram: attainment %+v, want a range holding %.3f", a, exact)
	}
}

// The failures that certainly count (an engine's error, a timeout, a 429
// of the gateway's limits) are in the denominator of both ends of the
// range; those that may be the client's doing, of its lower end only.
func TestHistAttainmentCountsFailures(t *testing.T) {
	var reqs []histReq
	for range 10 {
		reqs = append(reqs, histReq{ok: true, streamed: true, ttft: 100, osl: 1, e2e: 100})
	}
	for range 5 {
		reqs = append(reqs, histReq{ttft: -1, e2e: 0.1})
	}
	// The TTFT histogram holds the 10 completed requests' TTFTs, all
	// within the bound, but cannot say they are those requests'.
	if a := promSide(reqs).attainment(SLO{TTFT: 150}, false); float64(a.High) != 10.0/15 {
		t.Errorf("5 failures that count: attainment %+v, want at most 10/15", a)
	}
	for i := 10; i < 15; i++ {
		reqs[i].soft = true
	}
	if a := promSide(reqs).attainment(SLO{TTFT: 150}, false); a.High != 1 || float64(a.Low) > 5.0/15 {
		t.Errorf("5 failures that may not count: attainment %+v, want a range up to 1", a)
	}
}

// A bound inside a bucket: the histogram cannot say on which side of it
// the bucket's requests lie, so the range spans both (all 100 TTFTs in
// (400, 500] ms against a bound of 450: exactly 0 good if they were 460 ms,
// 1 if 410; it said 0.5, exact).
func TestHistAttainmentBoundInsideABucket(t *testing.T) {
	for _, ttft := range []float64{410, 460} {
		var reqs []histReq
		for i := 0; i < 100; i++ {
			reqs = append(reqs, histReq{ok: true, streamed: true, ttft: ttft, osl: 1, e2e: ttft})
		}
		a := promSide(reqs).attainment(SLO{TTFT: 450}, false)
		if a.Low != 0 || a.High != 1 || a.Exact() {
			t.Errorf("TTFTs of %v ms: attainment %+v, want the range 0–1", ttft, a)
		}
		// At the bucket's bound the count is exact.
		if a := promSide(reqs).attainment(SLO{TTFT: 500}, false); a.Low != 1 || !a.Exact() {
			t.Errorf("TTFTs of %v ms, bound 500: attainment %+v, want exactly 1", ttft, a)
		}
	}
}

// Whatever the mix of outcomes, streams and lengths, the range from the
// histograms holds the attainment judged request by request, for bounds at
// bucket bounds (where a histogram's count is exact) and inside buckets.
func TestHistAttainmentRangeProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	slos := []SLO{{TTFT: 150}, {TPOT: 25}, {E2EL: 500}, {TTFT: 150, TPOT: 25}, {TTFT: 100, TPOT: 20, E2EL: 1000},
		{TTFT: 137}, {TPOT: 22.5}, {E2EL: 700}, {TTFT: 45, TPOT: 3.3, E2EL: 1234}}
	for trial := 0; trial < 500; trial++ {
		var reqs []histReq
		for i, n := 0, 1+rng.IntN(80); i < n; i++ {
			r := histReq{ok: rng.IntN(4) > 0, streamed: rng.IntN(5) > 0, ttft: rng.Float64() * 300, osl: rng.IntN(4)}
			if rng.IntN(2) == 0 {
				r.osl = rng.IntN(200)
			}
			r.e2e = r.ttft + float64(max(r.osl-1, 0))*rng.Float64()*50
			if !r.streamed {
				r.ttft = -1
				r.e2e = rng.Float64() * 2000
			}
			if !r.ok && rng.IntN(2) == 0 {
				r.ttft, r.osl, r.e2e = -1, 0, rng.Float64()*2 // refused at once
			}
			if !r.ok {
				r.soft, r.counts = rng.IntN(2) == 0, rng.IntN(2) == 0
			}
			reqs = append(reqs, r)
		}
		for _, o := range slos {
			good, n, misses := 0, 0, 0
			for _, r := range reqs {
				if r.ok {
					n++
					if r.good(o) {
						good++
					}
				}
				if r.miss() {
					misses++
				}
			}
			s := promSide(reqs)
			a := s.attainment(o, false)
			if n == 0 {
				continue
			}
			if !known(a.Low) && ((o.TTFT > 0 && !s.TTFT.hasHist()) || (o.TPOT > 0 && !s.TPOT.hasHist())) {
				continue // a histogram with no observation: unknown, as a series Prometheus lacks
			}
			exact := float64(good) / float64(n+misses)
			if !known(a.Low) || float64(a.Low) > exact+1e-9 || float64(a.High) < exact-1e-9 {
				t.Fatalf("trial %d, SLO %v: range %+v does not hold the exact %.4f (%d of %d)", trial, o, a, exact, good, n)
			}
		}
	}
}

func TestDistOver(t *testing.T) {
	d := histDist([]float64{5, 10}, []float64{3, 2, 1}) // 3 in (0, 5], 2 in (5, 10], 1 above
	for _, c := range []struct{ x, lo, hi float64 }{
		{-1, 6, 6}, // every value is 0 or more
		{0, 3, 6},  // the first bucket's values may be 0 or above
		{2, 3, 6},
		{5, 3, 3},
		{7, 1, 3},
		{10, 1, 1},
		{20, 0, 1},
	} {
		if lo, hi, ok := d.Over(c.x); !ok || lo != c.lo || hi != c.hi {
			t.Errorf("Over(%v) = %v, %v; want %v, %v", c.x, lo, hi, c.lo, c.hi)
		}
	}
}
