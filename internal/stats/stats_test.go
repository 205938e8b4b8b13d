package stats

import (
	"math"
	"testing"
)

// TestQuantile: numpy.percentile's linear rule (the expected values are
// numpy's), NaN for no values, q clamped to [0, 1].
func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 10}
	for _, c := range []struct{ q, want float64 }{
		{0, 1}, {0.25, 2}, {0.5, 3}, {0.9, 7.6}, {0.99, 9.76}, {1, 10},
		{-0.5, 1}, {1.5, 10},
	} {
		if got := Quantile(v, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Quantile(%v, %v) = %v, want %v", v, c.q, got, c.want)
		}
	}
	if got := Quantile([]float64{7}, 0.99); got != 7 {
		t.Errorf("one value: %v, want 7", got)
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("no values: %v, want NaN", got)
	}
}
