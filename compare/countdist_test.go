package compare

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestCountedValuesReadAsSamples: a distribution kept as each distinct
// value's count (a request log's gaps) gives every figure the same
// distribution kept value by value gives: count, mean, quantiles, CDF,
// values over a bound, and the KS distance to either form of another.
func TestCountedValuesReadAsSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 1))
	draw := func(n, distinct int, scale float64) ([]float64, map[float64]float64) {
		xs := make([]float64, n)
		counts := map[float64]float64{}
		for i := range xs {
			xs[i] = math.Round(float64(rng.IntN(distinct))*scale*1000) / 1000
			counts[xs[i]]++
		}
		return xs, counts
	}
	for _, c := range []struct{ n, distinct int }{{1, 1}, {2, 1}, {7, 3}, {1000, 40}, {5000, 4000}} {
		xs, xc := draw(c.n, c.distinct, 0.731)
		ys, yc := draw(c.n*2+1, c.distinct+5, 0.6)
		sx, cx := sampleDist(xs), countDist(xc)
		sy, cy := sampleDist(ys), countDist(yc)
		name := fmt.Sprintf("%d values of %d", c.n, c.distinct)
		if len(cx.Samples) != len(xc) {
			t.Fatalf("%s: %d distinct values kept, want %d", name, len(cx.Samples), len(xc))
		}
		if cx.Count() != sx.Count() {
			t.Errorf("%s: count %v, want %v", name, cx.Count(), sx.Count())
		}
		if m, want := float64(cx.Mean()), float64(sx.Mean()); math.Abs(m-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s: mean %v, want %v", name, m, want)
		}
		for _, q := range []float64{0, 0.001, 0.1, 0.25, 0.5, 0.77, 0.9, 0.99, 0.999, 1} {
			if got, want := cx.Quantile(q), sx.Quantile(q); got != want {
				t.Errorf("%s: q%v = %v, want %v", name, q, got, want)
			}
		}
		probes := slices.Concat(xs[:min(len(xs), 50)], []float64{-1, 0.3, 1.5, 11.11, 1e9})
		for _, x := range probes {
			g, _ := cx.CDF(x)
			w, _ := sx.CDF(x)
			if g != w {
				t.Errorf("%s: CDF(%v) = %v, want %v", name, x, g, w)
			}
			glo, ghi, _ := cx.Over(x)
			wlo, whi, _ := sx.Over(x)
			if glo != wlo || ghi != whi {
				t.Errorf("%s: over %v = %v..%v, want %v..%v", name, x, glo, ghi, wlo, whi)
			}
		}
		want := ksSamples(&sx, &sy)
		for _, k := range [][2]*Dist{{&cx, &cy}, {&cx, &sy}, {&sx, &cy}} {
			if got := ksStat(k[0], k[1]); float64(got.D) != want || got.Method != "samples" {
				t.Errorf("%s: KS %+v, want %v from samples", name, got, want)
			}
		}
	}
	if d := countDist(nil); !d.Empty() || d.Form() != "none" {
		t.Errorf("no values: form %s", d.Form())
	}
}

// TestRequestLogGapsAsLogged: the request log's ITL figures are those of
// every logged gap, each as often as it was logged.
func TestRequestLogGapsAsLogged(t *testing.T) {
	var log strings.Builder
	var all []float64
	for i := range 40 {
		gaps := []float64{10.5, 12.25, float64(10 + i%7), 10.5, 30}
		all = append(all, gaps...)
		fmt.Fprintf(&log, `{"time":"2026-12-06T10:00:%02dZ","request_id":"r%d","tenant":"t","route":"chat","outcome":"ok","stream":true,"isl":10,"osl":6,"ttft_ms":50,"e2e_ms":130,"tpot_ms":16,"itl_ms":[%v,%v,%v,%v,%v,null]}`+"\n",
			i, i, gaps[0], gaps[1], gaps[2], gaps[3], gaps[4])
	}
	s, err := ReadRequestLog("log", strings.NewReader(log.String()), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := sampleDist(all)
	if s.ITL.Count() != want.Count() || s.ITL.Mean() != want.Mean() {
		t.Errorf("ITL count %v mean %v, want %v and %v", s.ITL.Count(), s.ITL.Mean(), want.Count(), want.Mean())
	}
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
		if got, w := s.ITL.Quantile(q), want.Quantile(q); got != w {
			t.Errorf("ITL q%v = %v, want %v", q, got, w)
		}
	}
	if n := len(s.ITL.Samples); n != 10 {
		t.Errorf("%d distinct gaps kept, want 10 (10.5, 12.25, 10..16, 30)", n)
	}
}
