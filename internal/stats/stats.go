// Package stats holds the sample statistics that goodput bench (package
// bench) and goodput compare (package compare) must compute alike.
package stats

import (
	"cmp"
	"math"
	"slices"
)

// Quantile returns the q-quantile (0 ≤ q ≤ 1; a q outside is clamped) of
// sorted values by numpy.percentile's default rule, linear interpolation
// between the two nearest ranks, as vLLM's benchmark reports percentiles;
// NaN for no values.
func Quantile(sorted []float64, q float64) float64 {
	return QuantileAt(len(sorted), func(k int) float64 { return sorted[k] }, q)
}

// QuantileAt is Quantile of n sorted values that at gives by rank
// (0-based), for values kept other than one by one (each distinct value
// with its count).
func QuantileAt(n int, at func(k int) float64, q float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	pos := min(max(q, 0), 1) * float64(n-1)
	i := int(math.Floor(pos))
	if i >= n-1 {
		return at(n - 1)
	}
	frac := pos - float64(i)
	lo := at(i)
	return lo + (at(i+1)-lo)*frac
}

// PeakOverlap returns the most half-open intervals [starts[i], ends[i])
// open at one instant: at a tie an interval ending comes before one
// starting, as vLLM's benchmark counts max_concurrent_requests. starts and
// ends must have the same length; neither is changed.
func PeakOverlap[T cmp.Ordered](starts, ends []T) int {
	s, e := slices.Clone(starts), slices.Clone(ends)
	slices.Sort(s)
	slices.Sort(e)
	cur, peak, j := 0, 0, 0
	for _, t := range s {
		for j < len(e) && e[j] <= t {
			cur--
			j++
		}
		cur++
		peak = max(peak, cur)
	}
	return peak
}
