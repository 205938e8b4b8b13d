package slo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goodput/goodput/internal/testenv"
)

// numpyPercentile is numpy.percentile's default "linear" method:
// rank q·(n−1) over the sorted values, interpolating between neighbours.
func numpyPercentile(sorted []float64, q float64) float64 {
	r := q * float64(len(sorted)-1)
	lo := math.Floor(r)
	i := int(lo)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (r-lo)*(sorted[i+1]-sorted[i])
}

func TestNumpyPercentileDefinition(t *testing.T) {
	// Values from numpy's documentation and by hand.
	a := []float64{1, 2, 3, 4, 7, 10} // np.percentile([[10,7,4],[3,2,1]], 50) == 3.5
	if got := numpyPercentile(a, 0.5); got != 3.5 {
		t.Fatalf("median = %v", got)
	}
	if got := numpyPercentile([]float64{1, 2, 3, 4}, 0.9); math.Abs(got-3.7) > 1e-12 {
		t.Fatalf("p90 of 1..4 = %v, want 3.7", got)
	}
}

type sample struct {
	name string
	gen  func(r *rand.Rand) float64
	n    int
}

var samples = []sample{
	// TTFT-like: log-normal around 300 ms.
	{"lognormal ttft", func(r *rand.Rand) float64 { return 0.3 * math.Exp(0.6*r.NormFloat64()) }, 20000},
	// ITL-like: bimodal, ~25 ms decode gaps with bursts of near-zero gaps
	// (several events in one read) and rare multi-second stalls.
	{"bimodal itl", func(r *rand.Rand) float64 {
		switch x := r.Float64(); {
		case x < 0.2:
			return 20e-6 + r.Float64()*200e-6
		case x < 0.995:
			return 0.025 * math.Exp(0.3*r.NormFloat64())
		default:
			return 1 + 4*r.Float64()
		}
	}, 50000},
	// Heavy tail: Pareto(α=1.5) E2E.
	{"pareto e2e", func(r *rand.Rand) float64 { return 2 / math.Pow(1-r.Float64(), 1/1.5) }, 20000},
	// Token counts: integers over four decades, many ties.
	{"integer osl", func(r *rand.Rand) float64 { return float64(1 + int(math.Exp(r.Float64()*9))) }, 20000},
	// Few values, where interpolation between neighbours matters most.
	{"small n=7", func(r *rand.Rand) float64 { return r.Float64() * 10 }, 7},
	{"small n=2", func(r *rand.Rand) float64 { return 1 + r.Float64() }, 2},
	{"one value", func(r *rand.Rand) float64 { return 0.123 }, 1},
	// Zeros mixed in (TPOT of 1-token outputs if a caller records them).
	{"with zeros", func(r *rand.Rand) float64 {
		if r.IntN(4) == 0 {
			return 0
		}
		return r.ExpFloat64()
	}, 5000},
}

func TestSketchAccuracyAgainstNumpy(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for _, sm := range samples {
		t.Run(sm.name, func(t *testing.T) {
			vals := make([]float64, sm.n)
			var s sketch
			for i := range vals {
				vals[i] = sm.gen(rng)
				s.add(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
				exact := numpyPercentile(vals, q)
				got := s.quantile(q)
				if rel := relErr(got, exact); rel > 0.01 {
					t.Errorf("q=%v: sketch %v, exact %v: relative error %.4f > 1%%", q, got, exact, rel)
				} else if rel > relativeAccuracy+1e-9 {
					t.Errorf("q=%v: relative error %.5f beyond the sketch's own α=%v", q, rel, relativeAccuracy)
				}
			}
			if s.count() != uint64(sm.n) || s.Min() != vals[0] || s.Max() != vals[len(vals)-1] {
				t.Errorf("count/min/max = %d %v %v", s.count(), s.Min(), s.Max())
			}
			var sum float64
			for _, v := range vals {
				sum += v
			}
			if relErr(s.mean(), sum/float64(sm.n)) > 1e-9 {
				t.Errorf("mean %v, want %v", s.mean(), sum/float64(sm.n))
			}
		})
	}
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

func TestSketchMergeEqualsWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var whole sketch
	parts := make([]sketch, 7)
	for i := 0; i < 30000; i++ {
		v := 0.01 * math.Exp(2*rng.NormFloat64())
		whole.add(v)
		parts[rng.IntN(len(parts))].add(v)
	}
	var merged sketch
	for i := range parts {
		merged.merge(&parts[i])
	}
	if merged.count() != whole.count() || merged.Min() != whole.Min() || merged.Max() != whole.Max() {
		t.Fatal("merge lost counts or extremes")
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.95, 0.99} {
		if a, b := merged.quantile(q), whole.quantile(q); a != b {
			t.Errorf("q=%v: merged %v, whole %v: merging is not exact", q, a, b)
		}
	}
	// Merging into a sketch with a disjoint, lower range.
	var lo sketch
	lo.add(1e-6)
	lo.merge(&whole)
	if lo.count() != whole.count()+1 || lo.Min() != 1e-6 {
		t.Fatal("merge into a lower range")
	}
	if relErr(lo.quantile(0.99), whole.quantile(0.99)) > 0.01 {
		t.Fatal("merge into a lower range moved p99")
	}
}

func TestSketchCollapsesLowestBuckets(t *testing.T) {
	s := sketch{MaxBins: 100} // γ^100 ≈ 2.7: a narrow range on purpose
	var vals []float64
	for i := 0; i < 1000; i++ {
		v := math.Pow(10, float64(i%60)/10) // 1 … 10^5.9
		vals = append(vals, v)
		s.add(v)
	}
	if n := binSpan(&s); n > 100 {
		t.Fatalf("%d bins, limit 100", n)
	}
	slices.Sort(vals)
	// The top of the distribution keeps its accuracy.
	for _, q := range []float64{0.95, 0.99} {
		if rel := relErr(s.quantile(q), numpyPercentile(vals, q)); rel > 0.01 {
			t.Errorf("q=%v after collapsing: relative error %v", q, rel)
		}
	}
	if s.count() != 1000 || s.Min() != 1 {
		t.Fatal("collapsing lost counts")
	}
	// Values arriving in decreasing order collapse the same way.
	r := sketch{MaxBins: 100}
	for i := len(vals) - 1; i >= 0; i-- {
		r.add(vals[i])
	}
	if binSpan(&r) > 100 || relErr(r.quantile(0.99), numpyPercentile(vals, 0.99)) > 0.01 {
		t.Fatalf("decreasing order: %d bins, p99 %v", binSpan(&r), r.quantile(0.99))
	}
}

// skipAllocsUnderRace skips an allocation test in a -race build: the
// compiler extends a slice in place for append(s, make([]T, n)...) only
// without the race detector, and DDSketch's stores grow that way, so the race
// build allocates where the gateway's build does not. CI runs every
// allocation test without -race (.ci/run, "allocation tests").
func skipAllocsUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocations are checked without -race (the race build does not extend slices in place)")
	}
}

// binSpan is how many buckets the sketch's range of keys spans.
func binSpan(s *sketch) int {
	st := s.dd.GetPositiveValueStore()
	lo, err1 := st.MinIndex()
	hi, err2 := st.MaxIndex()
	if err1 != nil || err2 != nil {
		return 0
	}
	return hi - lo + 1
}

func TestSketchEdgeCases(t *testing.T) {
	var s sketch
	if !math.IsNaN(s.quantile(0.5)) || !math.IsNaN(s.mean()) || !math.IsNaN(s.Max()) || !math.IsNaN(s.Min()) {
		t.Fatal("an empty sketch should answer NaN")
	}
	s.add(math.NaN())
	s.add(math.Inf(1))
	s.addN(3, 0)
	if s.count() != 0 {
		t.Fatal("NaN, Inf and zero weights must be ignored")
	}
	s.add(2)
	if !math.IsNaN(s.quantile(1.5)) || !math.IsNaN(s.quantile(-0.1)) {
		t.Fatal("q out of range")
	}
	if s.quantile(0.5) != 2 {
		t.Fatalf("single value: %v", s.quantile(0.5))
	}
	// Weighted: 3 s at level 1, 1 s at level 4 (in ns).
	var w sketch
	w.addN(1, 3e9)
	w.addN(4, 1e9)
	if w.mean() != 1.75 || relErr(w.quantile(0.5), 1) > relativeAccuracy || relErr(w.quantile(0.95), 4) > relativeAccuracy {
		t.Fatalf("weighted: mean %v p50 %v p95 %v", w.mean(), w.quantile(0.5), w.quantile(0.95))
	}
}

// Reset keeps storage: refilling does not allocate.
func TestSketchRefillAfterResetAllocatesNothing(t *testing.T) {
	skipAllocsUnderRace(t)
	var r sketch
	for i := 1; i <= 1000; i++ {
		r.add(float64(i))
	}
	if n := testenv.AllocsPerRun(20, func() {
		r.reset()
		for i := 1000; i >= 1; i-- {
			r.add(float64(i))
		}
	}); n != 0 {
		t.Fatalf("refilling after Reset allocates %v", n)
	}
}

func BenchmarkSketchAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	vals := make([]float64, 4096)
	for i := range vals {
		vals[i] = 0.025 * math.Exp(0.5*rng.NormFloat64())
	}
	var s sketch
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.add(vals[i&4095])
		i++
	}
}

func BenchmarkSketchQuantile(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	var s sketch
	for i := 0; i < 100000; i++ {
		s.add(0.025 * math.Exp(rng.NormFloat64()))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.quantile(0.99)
	}
}

// add counts v once.
func (s *sketch) add(v float64) { s.addN(v, 1) }

// addN counts v n times (n is a weight: for example nanoseconds).
func (s *sketch) addN(v float64, n uint64) {
	if n == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	i, z := sketchIndex(v)
	s.addAt(i, z, v, n)
}

// sum returns the exact sum of the values added (weighted).
func (s *sketch) sum() float64 {
	if s.dd == nil {
		return 0
	}
	return s.stats.Sum()
}
