// Package svgchart holds the axis arithmetic the SVG charts of goodput's
// HTML pages share: a report's (package report) and a sweep's (package
// bench/sweep). Each package draws its own shapes.
package svgchart

import "math"

// NiceCeil returns the smallest of 1, 2, 4, 6, 8 times a power of ten
// that is at least v (1 for v ≤ 0, NaN or infinite): an axis top whose
// quarters print short.
func NiceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 6, 8, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// Finite returns v, or d when v is NaN or infinite.
func Finite(v, d float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return d
	}
	return v
}
