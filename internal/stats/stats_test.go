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

// TestPeakOverlap: half-open intervals, an end before a start at a tie,
// inputs in any order and left unchanged.
func TestPeakOverlap(t *testing.T) {
	for _, c := range []struct {
		name         string
		starts, ends []float64
		want         int
	}{
		{"none", nil, nil, 0},
		{"one", []float64{1}, []float64{2}, 1},
		{"back to back", []float64{0, 1, 2}, []float64{1, 2, 3}, 1},
		{"overlapping", []float64{0, 1}, []float64{2, 3}, 2},
		{"nested, unsorted", []float64{5, 0, 1, 2}, []float64{6, 10, 3, 4}, 3},
		{"same instant", []float64{1, 1, 1}, []float64{2, 2, 2}, 3},
		{"empty interval at a start", []float64{0, 1}, []float64{2, 1}, 1},
	} {
		starts, ends := append([]float64(nil), c.starts...), append([]float64(nil), c.ends...)
		if got := PeakOverlap(c.starts, c.ends); got != c.want {
			t.Errorf("%s: PeakOverlap = %d, want %d", c.name, got, c.want)
		}
		for i := range starts {
			if starts[i] != c.starts[i] || ends[i] != c.ends[i] {
				t.Errorf("%s: the input changed", c.name)
			}
		}
	}
}
