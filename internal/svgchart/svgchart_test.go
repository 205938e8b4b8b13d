package svgchart

import (
	"math"
	"testing"
)

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {math.NaN(), 1}, {math.Inf(1), 1},
		{1, 1}, {1.2, 2}, {2, 2}, {3, 4}, {5, 6}, {7, 8}, {8.5, 10},
		{0.03, 0.04}, {120, 200}, {999, 1000}, {4000, 4000},
	} {
		if got := NiceCeil(c.in); math.Abs(got-c.want) > 1e-12*c.want {
			t.Errorf("NiceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestFinite(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{math.NaN(), 7}, {math.Inf(1), 7}, {math.Inf(-1), 7}, {0, 0}, {-2.5, -2.5},
	} {
		if got := Finite(c.in, 7); got != c.want {
			t.Errorf("Finite(%v, 7) = %v, want %v", c.in, got, c.want)
		}
	}
}
