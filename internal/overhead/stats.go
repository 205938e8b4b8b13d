package main

import (
	"math"
	"slices"

	"github.com/goodput/goodput/internal/stats"
)

// percentile returns the q-quantile (0 ≤ q ≤ 1) of sorted by numpy's
// default rule, linear interpolation between the two nearest ranks (the
// rule of every figure of goodput's), NaN when it is empty.
func percentile(sorted []int64, q float64) float64 {
	return stats.QuantileAt(len(sorted), func(k int) float64 { return float64(sorted[k]) }, q)
}

// median of the values that are not NaN (the mean of the middle two for an
// even count); NaN when none is.
func median(v []float64) float64 {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
