package compare

import (
	"math"
	"testing"
)

// Even gaps read from times rounded to the µs are regular arrivals, not a
// burstiness of hundreds of millions (a review: a log of requests 50 ms
// apart showed k 721,679,522,678); a spread of 1% is still measured.
func TestSetArrivalsRegularDespiteRounding(t *testing.T) {
	even, spread := make([]float64, 200), make([]float64, 200)
	for i := range even {
		jitter := float64(i%3-1) * 1e-6 // ±1 µs of rounding
		even[i] = 1000 + float64(i)*0.05 + jitter
		spread[i] = 1000 + float64(i)*0.05 + float64(i%2)*0.0005 // gaps of 50 ± 0.5 ms
	}
	s := newSide("", "")
	s.setArrivals(even, "")
	if !s.Regular || !math.IsInf(float64(s.Burstiness), 1) {
		t.Errorf("even gaps: regular %v, k %v", s.Regular, s.Burstiness)
	}
	s = newSide("", "")
	s.setArrivals(spread, "")
	if s.Regular || !(s.Burstiness > 1000 && s.Burstiness < 1e5) {
		t.Errorf("gaps spread by 1%%: regular %v, k %v; want k near 10,000", s.Regular, s.Burstiness)
	}
}
