package slo

import (
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/stat"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/goodput/goodput/meter"
)

// relativeAccuracy is the sketch's relative accuracy α: every value counted
// in a bucket is within α of the bucket's representative value.
const relativeAccuracy = 0.005

// sketchMapping is DDSketch's logarithmic mapping for α: a value v > 0 goes
// to bucket i = ⌊log_γ v⌋, which holds [γ^i, γ^(i+1)), and the bucket's
// representative 2γ^(i+1)/(γ+1) is within α of every value in it.
var sketchMapping = func() *mapping.LogarithmicMapping {
	m, err := mapping.NewLogarithmicMapping(relativeAccuracy)
	if err != nil {
		panic(err)
	}
	return m
}()

// sketch is a mergeable quantile sketch with a relative-error guarantee:
// DDSketch (Masson, Rim and Lee, VLDB 2019, github.com/DataDog/sketches-go)
// with a logarithmic mapping of accuracy relativeAccuracy and a paginated
// store, beside exact count, sum and extremes.
//
// Why this sketch:
//   - mergeable: two sketches merge exactly by adding bucket counts, so the
//     live view keeps one sketch per time slot and merges slots on read, and
//     sketches from several replicas or windows merge without loss;
//   - relative error: latency spans microseconds (ITL) to minutes (E2E) and a
//     relative bound (here 0.5%) holds at every scale and for tail quantiles,
//     where rank-error sketches (t-digest, KLL) give no value guarantee;
//   - memory for the buckets used: the store holds pages of 32 buckets, only
//     those its values touch. Each bucket spans a factor γ = (1+α)/(1−α) ≈
//     1.01005, so the values a gateway measures (durations from 1 ns to
//     days; counts up to 2^31) span at most about 3,500 buckets, 28 KiB;
//     a latency sketch uses far less: gaps of 5–35 ms with a few of
//     microseconds and a stall of seconds touch a few pages, where a dense
//     store held every bucket between the smallest and the largest value
//     (BenchmarkTrackerSeriesMemory: 463 KiB against 1,325 per busy
//     series). With MaxBins set, a dense store that collapses its lowest
//     buckets beyond MaxBins (only the lowest quantiles lose accuracy).
//
// Quantiles follow the numpy "linear" definition (docs/MEASURES.md,
// Percentiles): rank r = q·(n−1) over the sorted values, interpolating
// between the values at ⌊r⌋ and ⌈r⌉. DDSketch's own GetValueAtQuantile
// answers the bucket of rank r without interpolating, which for few values
// is far from numpy's answer (the median of two values is the lower one), so
// Quantile estimates each of the two order statistics from the sketch's
// buckets within α and interpolates the same way as numpy: the result is
// within α of the exact numpy percentile; the smallest and largest values
// are kept exactly.
//
// Values are non-negative (seconds, tokens, concurrency levels); 0 (and a
// value too small to index, under 1e-307) counts in the zero bucket. NaN and
// ±Inf are ignored. Counts may be weights (AddN), for example nanoseconds
// spent at a concurrency level; they are float64 in DDSketch, exact up to
// 2^53 (104 days in nanoseconds).
//
// The zero Sketch is empty and ready to use, with the paginated store; its
// storage is allocated by the first value. A Sketch is not safe for
// concurrent use. Adding does not allocate once the buckets have grown to
// cover the values' range; Reset keeps them.
type sketch struct {
	dd      *ddsketch.DDSketch // nil until the first value
	stats   stat.SummaryStatistics
	MaxBins int // bucket limit of a collapsing dense store; 0: the paginated store, no limit
}

// init allocates the sketch's storage on first use.
func (s *sketch) init() {
	if s.dd != nil {
		return
	}
	if s.MaxBins <= 0 {
		s.dd = ddsketch.NewDDSketch(sketchMapping, store.NewBufferedPaginatedStore(), store.NewBufferedPaginatedStore())
	} else {
		s.dd = ddsketch.NewDDSketch(sketchMapping,
			store.NewCollapsingLowestDenseStore(s.MaxBins), store.NewCollapsingLowestDenseStore(s.MaxBins))
	}
	s.stats = *stat.NewSummaryStatistics()
}

// sketchIndex returns the bucket of v, or zero for the zero bucket (v ≤ 0):
// callers that add the same value to several sketches compute it once.
func sketchIndex(v float64) (i int, zero bool) {
	if v <= sketchMapping.MinIndexableValue() {
		return 0, true
	}
	return sketchMapping.Index(v), false
}

// addAt counts v n times in bucket i (or the zero bucket), i and zero being
// sketchIndex(v); a negative v counts as 0.
func (s *sketch) addAt(i int, zero bool, v float64, n uint64) {
	s.init()
	v = max(v, 0)
	c := float64(n)
	s.stats.Add(v, c)
	if zero {
		_ = s.dd.AddWithCount(0, c) // 0 is always trackable
		return
	}
	s.dd.GetPositiveValueStore().AddWithCount(i, c)
}

// addGaps adds a record's summary of gaps (meter.GapSummary) with its exact
// count, sum and extremes. The summary's bucket k = ⌈log_γ s⌉ holds
// (γ^(k−1), γ^k] seconds for the same γ: it is this sketch's bucket k−1,
// with the same representative, so the summary adds no error of its own.
func (s *sketch) addGaps(r *meter.GapSummary) {
	if r.Count == 0 {
		return
	}
	s.init()
	s.stats.AddToCount(float64(r.Count))
	s.stats.AddToSum(r.Sum.Seconds())
	s.stats.Add(r.Min.Seconds(), 0) // extremes only: a count of 0
	s.stats.Add(r.Max.Seconds(), 0)
	if r.Zero > 0 {
		_ = s.dd.AddWithCount(0, float64(r.Zero))
	}
	st := s.dd.GetPositiveValueStore()
	for i, c := range r.Buckets {
		if c != 0 {
			st.AddWithCount(r.Offset+i-1, float64(c))
		}
	}
}

// merge adds every count of o to s. o is unchanged.
func (s *sketch) merge(o *sketch) {
	if o.dd == nil || o.stats.Count() == 0 {
		return
	}
	s.init()
	if err := s.dd.MergeWith(o.dd); err != nil {
		panic(err) // every Sketch has sketchMapping
	}
	s.stats.MergeWith(&o.stats)
}

// reset empties the sketch, keeping its bucket storage.
func (s *sketch) reset() {
	if s.dd != nil {
		s.dd.Clear()
		s.stats.Clear()
	}
}

// count returns the number (total weight) of values added.
func (s *sketch) count() uint64 {
	if s.dd == nil {
		return 0
	}
	return uint64(s.stats.Count())
}

// mean returns the exact mean, NaN when empty.
func (s *sketch) mean() float64 {
	if s.count() == 0 {
		return math.NaN()
	}
	return s.stats.Sum() / s.stats.Count()
}

// Min returns the smallest value added, NaN when empty.
func (s *sketch) Min() float64 {
	if s.count() == 0 {
		return math.NaN()
	}
	return s.stats.Min()
}

// Max returns the largest value added, NaN when empty.
func (s *sketch) Max() float64 {
	if s.count() == 0 {
		return math.NaN()
	}
	return s.stats.Max()
}

// quantile returns the q-quantile (0 ≤ q ≤ 1) by numpy's linear
// interpolation, within relativeAccuracy of the exact value (unless q falls
// in collapsed low buckets). NaN when empty or q is out of range.
func (s *sketch) quantile(q float64) float64 {
	n := s.count()
	if n == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	r := q * float64(n-1)
	lo := math.Floor(r)
	vlo := s.atRank(lo)
	if f := r - lo; f != 0 {
		return vlo + f*(s.atRank(lo+1)-vlo)
	}
	return vlo
}

// atRank estimates the value of 0-based rank r (a whole number) in sorted
// order: the extremes exactly, the others as their bucket's representative.
func (s *sketch) atRank(r float64) float64 {
	lo, hi := s.stats.Min(), s.stats.Max()
	if r <= 0 {
		return lo
	}
	if r >= s.stats.Count()-1 {
		return hi
	}
	zero := s.dd.GetZeroCount()
	if r < zero {
		return clamp(0, lo, hi)
	}
	k := s.dd.GetPositiveValueStore().KeyAtRank(r - zero)
	return clamp(s.dd.Value(k), lo, hi)
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }
