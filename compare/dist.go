package compare

import (
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/goodput/goodput/internal/stats"
	"github.com/goodput/goodput/slo"
)

// Num is a number that may be unknown: NaN (or ±Inf, where an infinity
// does not mean something of its own) is written as JSON null.
type Num = slo.Num

// unknown is the Num of a figure a side cannot give.
var unknown = Num(math.NaN())

func known(n Num) bool { return !math.IsNaN(float64(n)) && !math.IsInf(float64(n), 0) }

// Dist is one side's distribution of a quantity (tokens, or milliseconds
// for latencies), in the richest form the source has: per-request samples,
// a histogram (cumulative counts at inclusive upper bounds), and/or
// summary figures as the source gave them (mean, p50, p90, p99, …).
type Dist struct {
	// Samples, sorted ascending, when the source has one value per request
	// (or per gap).
	Samples []float64 `json:"-"`
	// cum, when not nil, says Samples holds each distinct value once and
	// cum[i] values of the source are ≤ Samples[i]: the same multiset, in
	// the room of its distinct values (a request log's gaps, which are
	// hundreds a request but of a few thousand values at the log's µs).
	cum []float64
	// Bounds and Cum are a histogram: Cum[i] values are ≤ Bounds[i], of
	// Total in all (the values above the last bound count in Total only).
	Bounds []float64 `json:"-"`
	Cum    []float64 `json:"-"`
	Total  float64   `json:"-"`
	// Given holds the figures the source stated, keyed "mean", "p50",
	// "p90", "p99", … (a summary-only benchmark result, or a profile's
	// sketch percentiles, which are more precise than its buckets).
	Given map[string]float64 `json:"-"`
}

// sampleDist returns the distribution of xs (sorted in place).
func sampleDist(xs []float64) Dist {
	sort.Float64s(xs)
	return Dist{Samples: xs}
}

// histDist returns the distribution of a histogram given as counts per
// bucket: counts[i] values in (bounds[i-1], bounds[i]], and, when counts
// has one more entry than bounds, the values above the last bound.
func histDist(bounds []float64, counts []float64) Dist {
	d := Dist{Bounds: slices.Clone(bounds), Cum: make([]float64, len(bounds))}
	var c float64
	for i := range bounds {
		if i < len(counts) {
			c += counts[i]
		}
		d.Cum[i] = c
	}
	for i := len(bounds); i < len(counts); i++ {
		c += counts[i]
	}
	d.Total = c
	return d
}

// countDist returns the distribution of the multiset that holds each key
// of counts as many times as its count (counts > 0).
func countDist(counts map[float64]float64) Dist {
	if len(counts) == 0 {
		return Dist{}
	}
	xs := make([]float64, 0, len(counts))
	for x := range counts {
		xs = append(xs, x)
	}
	sort.Float64s(xs)
	cum := make([]float64, len(xs))
	var c float64
	for i, x := range xs {
		c += counts[x]
		cum[i] = c
	}
	return Dist{Samples: xs, cum: cum}
}

// hasSamples reports whether the distribution has per-request values.
func (d *Dist) hasSamples() bool { return len(d.Samples) > 0 }

// n is how many values Samples stands for.
func (d *Dist) n() float64 {
	if d.cum != nil {
		return d.cum[len(d.cum)-1]
	}
	return float64(len(d.Samples))
}

// below is how many of the values are at Samples[:i] (0 ≤ i ≤ len).
func (d *Dist) below(i int) float64 {
	switch {
	case i == 0:
		return 0
	case d.cum != nil:
		return d.cum[i-1]
	}
	return float64(i)
}

// at returns the value of rank k (0-based, ascending) of the values
// Samples stands for.
func (d *Dist) at(k int) float64 {
	if d.cum == nil {
		return d.Samples[k]
	}
	i := sort.Search(len(d.cum), func(i int) bool { return d.cum[i] > float64(k) })
	return d.Samples[min(i, len(d.Samples)-1)]
}

// hasHist reports whether the distribution has a non-empty histogram.
func (d *Dist) hasHist() bool { return len(d.Bounds) > 0 && d.Total > 0 }

// Empty reports whether there is nothing to compare.
func (d *Dist) Empty() bool { return !d.hasSamples() && !d.hasHist() && len(d.Given) == 0 }

// Count is the number of values, or NaN when only summary figures exist.
func (d *Dist) Count() Num {
	switch {
	case d.hasSamples():
		return Num(d.n())
	case d.hasHist():
		return Num(d.Total)
	}
	return unknown
}

// Form says how the distribution is known: "samples", "histogram",
// "summary" or "none".
func (d *Dist) Form() string {
	switch {
	case d.hasSamples():
		return "samples"
	case d.hasHist():
		return "histogram"
	case len(d.Given) > 0:
		return "summary"
	}
	return "none"
}

// Mean is the mean, when known.
func (d *Dist) Mean() Num {
	if d.hasSamples() {
		var s float64
		for i, x := range d.Samples {
			if d.cum != nil {
				x *= d.cum[i] - d.below(i)
			}
			s += x
		}
		return Num(s / d.n())
	}
	if v, ok := d.Given["mean"]; ok {
		return Num(v)
	}
	return unknown
}

// Max is the largest value, when known: from samples, or as the source
// stated it (a histogram bounds it only by its last bucket).
func (d *Dist) Max() Num {
	if d.hasSamples() {
		return Num(d.Samples[len(d.Samples)-1])
	}
	if v, ok := d.Given["max"]; ok {
		return Num(v)
	}
	return unknown
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1): with numpy's default linear
// interpolation on samples; a stated percentile; or, from a histogram,
// linear interpolation within the bucket that holds it (Prometheus's
// histogram_quantile rule: the lowest bucket starts at 0, and a quantile in
// the open last bucket is the last bound).
func (d *Dist) Quantile(q float64) Num {
	if d.hasSamples() {
		if d.cum == nil {
			return Num(stats.Quantile(d.Samples, q))
		}
		return Num(stats.QuantileAt(int(d.n()), d.at, q))
	}
	if v, ok := d.Given[pKey(q)]; ok {
		return Num(v)
	}
	if q == 0.5 {
		if v, ok := d.Given["median"]; ok {
			return Num(v)
		}
	}
	if !d.hasHist() {
		return unknown
	}
	rank := q * d.Total
	lower, below := 0.0, 0.0
	for i, b := range d.Bounds {
		if d.Cum[i] >= rank && d.Cum[i] > below {
			return Num(lower + (b-lower)*(rank-below)/(d.Cum[i]-below))
		}
		lower, below = b, d.Cum[i]
	}
	return Num(d.Bounds[len(d.Bounds)-1])
}

// pKey is the Given key of quantile q: 0.5 → "p50", 0.999 → "p99.9".
func pKey(q float64) string {
	return "p" + strconv.FormatFloat(q*100, 'f', -1, 64)
}

// CDF returns the fraction of values ≤ x. From a histogram it is exact at
// a bucket bound and linearly interpolated within a bucket (ok is false
// when the distribution is not known well enough).
func (d *Dist) CDF(x float64) (float64, bool) {
	if d.hasSamples() {
		return d.ecdf(x), true
	}
	if !d.hasHist() {
		return 0, false
	}
	lower, below := 0.0, 0.0
	for i, b := range d.Bounds {
		if x <= b {
			if x <= lower {
				return below / d.Total, true
			}
			return (below + (d.Cum[i]-below)*(x-lower)/(b-lower)) / d.Total, true
		}
		lower, below = b, d.Cum[i]
	}
	return below / d.Total, true // above the last bound: unknown beyond; at least this
}

// Over returns how many values are above x: exactly from samples, or from a
// histogram the range its buckets allow, exact when x is a bucket bound
// (lo == hi) and otherwise from the values above the bucket holding x to
// those above the bound below it, since a histogram does not say where in
// a bucket its values lie (ok is false when the distribution is not known
// well enough).
func (d *Dist) Over(x float64) (lo, hi float64, ok bool) {
	if d.hasSamples() {
		n := d.n() - d.atOrBelow(x)
		return n, n, true
	}
	if !d.hasHist() {
		return 0, 0, false
	}
	lower, below := 0.0, 0.0
	for i, b := range d.Bounds {
		if x <= b {
			switch {
			case x < lower, x == lower && i > 0:
				return d.Total - below, d.Total - below, true
			case x == lower:
				// A bound of 0: the first bucket's values may be 0 or above.
				return d.Total - d.Cum[0], d.Total, true
			case x == b:
				return d.Total - d.Cum[i], d.Total - d.Cum[i], true
			}
			return d.Total - d.Cum[i], d.Total - below, true
		}
		lower, below = b, d.Cum[i]
	}
	return 0, d.Total - below, true // above the last bound: unknown beyond
}

// atOrBelow is how many of the values are ≤ x.
func (d *Dist) atOrBelow(x float64) float64 {
	return d.below(sort.Search(len(d.Samples), func(i int) bool { return d.Samples[i] > x }))
}

// ecdf is the fraction of the values that are ≤ x.
func (d *Dist) ecdf(x float64) float64 { return d.atOrBelow(x) / d.n() }

// KS is a two-sample Kolmogorov–Smirnov statistic and how it was computed.
type KS struct {
	D Num `json:"d"`
	// Method is "samples" (exact: the largest gap between the two empirical
	// CDFs) or "buckets" (the largest gap at the histogram's bucket bounds:
	// a lower bound of the exact statistic, which may be larger between
	// bounds); "" when it could not be computed.
	Method string `json:"method"`
	// Points is how many bucket bounds the bucketed statistic looked at.
	Points int `json:"points,omitempty"`
	// Why says why it could not be computed.
	Why string `json:"why,omitempty"`
}

// ksStat computes the two-sample KS statistic of a and b: exact on samples,
// at the bucket bounds when one side (or both) is a histogram.
func ksStat(a, b *Dist) KS {
	switch {
	case a.hasSamples() && b.hasSamples():
		return KS{D: Num(ksSamples(a, b)), Method: "samples"}
	case a.hasHist() || b.hasHist():
		if (!a.hasHist() && !a.hasSamples()) || (!b.hasHist() && !b.hasSamples()) {
			break
		}
		var grid []float64
		switch {
		case a.hasHist() && b.hasHist():
			for _, x := range a.Bounds {
				if slices.Contains(b.Bounds, x) {
					grid = append(grid, x)
				}
			}
		case a.hasHist():
			grid = a.Bounds
		default:
			grid = b.Bounds
		}
		if len(grid) == 0 {
			return KS{D: unknown, Why: "the two histograms share no bucket bound"}
		}
		var d float64
		for _, x := range grid {
			fa := atBound(a, x)
			fb := atBound(b, x)
			d = max(d, math.Abs(fa-fb))
		}
		return KS{D: Num(d), Method: "buckets", Points: len(grid)}
	}
	return KS{D: unknown, Why: "needs per-request values or a histogram on both sides (a summary has neither)"}
}

// atBound is the CDF at x, where x is one of a histogram's bounds when d
// is a histogram (so exact).
func atBound(d *Dist, x float64) float64 {
	if d.hasSamples() {
		return d.ecdf(x)
	}
	i := slices.Index(d.Bounds, x)
	if i < 0 {
		f, _ := d.CDF(x)
		return f
	}
	return d.Cum[i] / d.Total
}

// ksSamples is the exact two-sample KS statistic of the samples of a and
// b: the largest gap between their empirical CDFs, looked at each value
// either holds.
func ksSamples(a, b *Dist) float64 {
	xs, ys := a.Samples, b.Samples
	var i, j int
	var d float64
	n, m := a.n(), b.n()
	for i < len(xs) && j < len(ys) {
		x := min(xs[i], ys[j])
		for i < len(xs) && xs[i] <= x {
			i++
		}
		for j < len(ys) && ys[j] <= x {
			j++
		}
		d = max(d, math.Abs(a.below(i)/n-b.below(j)/m))
	}
	return d
}
