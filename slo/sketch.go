package slo

import (
	"math"

	"github.com/goodput/goodput/meter"
)

// RelativeAccuracy is the sketch's relative accuracy α: every value counted
// in a bucket is within α of the bucket's representative value.
const RelativeAccuracy = 0.005

// DefaultMaxBins bounds the buckets of one Sketch. With α = 0.005 each
// bucket spans a factor γ = (1+α)/(1−α) ≈ 1.01005, so 2048 buckets cover a
// dynamic range of γ^2048 ≈ 7.8·10^8 (for example 1 µs to 13 minutes)
// before the lowest buckets are collapsed; at most 16 KiB per sketch.
const DefaultMaxBins = 2048

// minIndexable is the smallest positive value given its own bucket; smaller
// values (including 0) are counted in the zero bucket and reported as 0. In
// seconds it is one nanosecond, the clock's resolution.
const minIndexable = 1e-9

var (
	sketchGamma      = (1 + RelativeAccuracy) / (1 - RelativeAccuracy)
	sketchLnGamma    = math.Log(sketchGamma)
	sketchInvLnGamma = 1 / sketchLnGamma
)

// Sketch is a mergeable quantile sketch with a relative-error guarantee, in
// the style of DDSketch (Masson, Rim and Lee, VLDB 2019): a value v > 0 is
// counted in the logarithmic bucket k = ⌈log_γ v⌉, which holds
// (γ^(k−1), γ^k], and the bucket's representative 2γ^k/(γ+1) is within
// α = RelativeAccuracy of every value in it.
//
// Why this sketch:
//   - mergeable: two sketches merge exactly by adding bucket counts, so the
//     live view keeps one sketch per time slot and merges slots on read, and
//     sketches from several replicas or windows merge without loss;
//   - relative error: latency spans microseconds (ITL) to minutes (E2E) and a
//     relative bound (here 0.5%) holds at every scale and for tail quantiles,
//     where rank-error sketches (t-digest, KLL) give no value guarantee;
//   - bounded memory: at most MaxBins buckets; when a value would widen the
//     range beyond that, the lowest buckets are collapsed into one, so only
//     the lowest quantiles lose accuracy and the tail (p90–p99) keeps it.
//
// Quantiles follow the numpy "linear" definition (docs/MEASURES.md,
// Percentiles): rank r = q·(n−1) over the sorted values, interpolating
// between the values at ⌊r⌋ and ⌈r⌉. The sketch estimates each of those two
// order statistics within α and interpolates the same way, so the result is
// within α of the exact numpy percentile; the smallest and largest values
// are kept exactly.
//
// Values are non-negative (seconds, tokens, concurrency levels); values below
// 1e-9 count as 0. NaN and ±Inf are ignored. Counts may be weights (AddN),
// for example nanoseconds spent at a concurrency level.
//
// The zero Sketch is empty and ready to use, with DefaultMaxBins. A Sketch
// is not safe for concurrent use. Adding does not allocate once the bucket
// slice has grown to cover the values' range; Reset keeps that slice.
//
// The live view's time slots use the same buckets with 32-bit counts
// (slotSketch), halving their memory; they merge into a Sketch on read.
type Sketch struct {
	st      store[uint64]
	stats   stats
	MaxBins int // bucket limit; 0 means DefaultMaxBins
}

// stats are the exact count, sum and extremes kept beside the buckets.
type stats struct {
	zero  uint64 // values < minIndexable
	count uint64
	sum   float64
	min   float64
	max   float64
}

func (st *stats) add(v float64, n uint64, zero bool) {
	if st.count == 0 {
		st.min, st.max = v, v
	} else {
		st.min = min(st.min, v)
		st.max = max(st.max, v)
	}
	st.count += n
	st.sum += v * float64(n)
	if zero {
		st.zero += n
	}
}

func (st *stats) merge(o *stats) {
	if o.count == 0 {
		return
	}
	if st.count == 0 {
		st.min, st.max = o.min, o.max
	} else {
		st.min = min(st.min, o.min)
		st.max = max(st.max, o.max)
	}
	st.count += o.count
	st.sum += o.sum
	st.zero += o.zero
}

// sketchKey returns the bucket of v and whether v goes to the zero bucket.
func sketchKey(v float64) (key int, zero bool) {
	if v < minIndexable {
		return 0, true
	}
	return int(math.Ceil(math.Log(v) * sketchInvLnGamma)), false
}

// keyValue is the representative value of bucket k.
func keyValue(k int) float64 {
	return 2 * math.Exp(float64(k)*sketchLnGamma) / (1 + sketchGamma)
}

// Add counts v once.
func (s *Sketch) Add(v float64) { s.AddN(v, 1) }

// AddN counts v n times (n is a weight: for example nanoseconds).
func (s *Sketch) AddN(v float64, n uint64) {
	if n == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	k, z := sketchKey(v)
	s.addKey(k, z, v, n)
}

// addKey counts v n times in bucket k (or the zero bucket): callers that add
// the same value to several sketches compute the key once.
func (s *Sketch) addKey(k int, zero bool, v float64, n uint64) {
	v = max(v, 0)
	s.stats.add(v, n, zero)
	if !zero {
		s.st.add(k, n, limitOf(s.MaxBins))
	}
}

func limitOf(maxBins int) int {
	if maxBins > 0 {
		return maxBins
	}
	return DefaultMaxBins
}

// Merge adds every count of o to s. o is unchanged.
func (s *Sketch) Merge(o *Sketch) {
	s.stats.merge(&o.stats)
	mergeStore(&s.st, &o.st, limitOf(s.MaxBins))
}

// mergeSlot adds every count of a slot sketch to s.
func (s *Sketch) mergeSlot(o *slotSketch) {
	s.stats.merge(&o.stats)
	mergeStore(&s.st, &o.st, limitOf(s.MaxBins))
}

// Reset empties the sketch, keeping its bucket storage.
func (s *Sketch) Reset() {
	s.st.reset()
	s.stats = stats{}
}

// Count returns the number (total weight) of values added.
func (s *Sketch) Count() uint64 { return s.stats.count }

// Sum returns the exact sum of the values added (weighted).
func (s *Sketch) Sum() float64 { return s.stats.sum }

// Mean returns the exact mean, NaN when empty.
func (s *Sketch) Mean() float64 {
	if s.stats.count == 0 {
		return math.NaN()
	}
	return s.stats.sum / float64(s.stats.count)
}

// Min returns the smallest value added, NaN when empty.
func (s *Sketch) Min() float64 {
	if s.stats.count == 0 {
		return math.NaN()
	}
	return s.stats.min
}

// Max returns the largest value added, NaN when empty.
func (s *Sketch) Max() float64 {
	if s.stats.count == 0 {
		return math.NaN()
	}
	return s.stats.max
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) by numpy's linear
// interpolation, within RelativeAccuracy of the exact value (unless q falls
// in collapsed low buckets). NaN when empty or q is out of range.
func (s *Sketch) Quantile(q float64) float64 {
	n := s.stats.count
	if n == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	r := q * float64(n-1)
	lo := math.Floor(r)
	f := r - lo
	vlo := s.atRank(uint64(lo))
	if f == 0 {
		return vlo
	}
	vhi := s.atRank(uint64(lo) + 1)
	return vlo + f*(vhi-vlo)
}

// atRank estimates the value of 0-based rank r in sorted order.
func (s *Sketch) atRank(r uint64) float64 {
	st := &s.stats
	if r == 0 {
		return st.min
	}
	if r >= st.count-1 {
		return st.max
	}
	if r < st.zero {
		return clamp(0, st.min, st.max)
	}
	cum := st.zero
	for i, c := range s.st.bins {
		cum += c
		if cum > r {
			return clamp(keyValue(s.st.offset+i), st.min, st.max)
		}
	}
	return st.max
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

// slotSketch is the Sketch of one time slot of the live view: the same
// buckets with 32-bit counts (a slot lasts at most an hour, and 2^32 values
// in one bucket of one series in an hour is over a million a second; counts
// saturate rather than wrap), and the default bucket limit.
type slotSketch struct {
	st    store[uint32]
	stats stats
}

func (s *slotSketch) addKey(k int, zero bool, v float64, n uint64) {
	v = max(v, 0)
	s.stats.add(v, n, zero)
	if !zero {
		s.st.add(k, n, DefaultMaxBins)
	}
}

// addGaps adds a record's summary of gaps (meter.GapSummary, whose buckets
// are this sketch's, in seconds) with its exact count, sum and extremes.
func (s *slotSketch) addGaps(r *meter.GapSummary) {
	s.stats.merge(&stats{
		zero: uint64(r.Zero), count: uint64(r.Count), sum: r.Sum.Seconds(),
		min: r.Min.Seconds(), max: r.Max.Seconds(),
	})
	for i, c := range r.Buckets {
		if c != 0 {
			s.st.add(r.Offset+i, uint64(c), DefaultMaxBins)
		}
	}
}

func (s *slotSketch) reset() {
	s.st.reset()
	s.stats = stats{}
}

// store holds a sketch's bucket counts: bins[i] counts bucket key offset+i.
type store[C ~uint32 | ~uint64] struct {
	bins   []C
	offset int
}

// add counts n in bucket k, saturating.
func (s *store[C]) add(k int, n uint64, limit int) {
	p := &s.bins[s.index(k, limit)]
	*p = satAdd(*p, n)
}

func satAdd[C ~uint32 | ~uint64](c C, n uint64) C {
	var maxC C
	maxC--
	if n > uint64(maxC-c) {
		return maxC
	}
	return c + C(n)
}

func (s *store[C]) reset() {
	s.bins = s.bins[:0]
	s.offset = 0
}

// index returns the position of bucket k in s.bins, extending the range (and
// collapsing the lowest buckets beyond limit) as needed.
func (s *store[C]) index(k, limit int) int {
	if len(s.bins) == 0 {
		s.offset = k
		s.resize(1, limit)
		return 0
	}
	lo := s.offset
	hi := lo + len(s.bins) - 1
	switch {
	case k >= lo && k <= hi:
		return k - lo
	case k > hi:
		if k-lo+1 > limit {
			s.collapseBelow(k - limit + 1)
		}
		s.resize(k-s.offset+1, limit)
		return k - s.offset
	default: // k < lo
		if hi-k+1 > limit {
			k = hi - limit + 1 // collapsed into the lowest bucket kept
		}
		if k < s.offset {
			s.extendLow(k, limit)
		}
		return k - s.offset
	}
}

// resize sets len(s.bins) to n ≥ len, zeroing new buckets.
func (s *store[C]) resize(n, limit int) {
	old := len(s.bins)
	if n <= cap(s.bins) {
		s.bins = s.bins[:n]
		clear(s.bins[old:])
		return
	}
	nb := make([]C, n, growCap(n, limit))
	copy(nb, s.bins)
	s.bins = nb
}

// extendLow moves the range's low end down to key k.
func (s *store[C]) extendLow(k, limit int) {
	d := s.offset - k
	old := len(s.bins)
	n := old + d
	if n <= cap(s.bins) {
		s.bins = s.bins[:n]
		copy(s.bins[d:], s.bins[:old])
	} else {
		nb := make([]C, n, growCap(n, limit))
		copy(nb[d:], s.bins)
		s.bins = nb
	}
	clear(s.bins[:d])
	s.offset = k
}

func growCap(n, limit int) int {
	c := max(n+n/2, 64)
	return max(min(c, limit), n)
}

// collapseBelow merges every bucket below key lo into bucket lo, which
// becomes the lowest bucket.
func (s *store[C]) collapseBelow(lo int) {
	if lo <= s.offset {
		return
	}
	hi := s.offset + len(s.bins) - 1
	var total C
	if lo > hi {
		for _, c := range s.bins {
			total = satAdd(total, uint64(c))
		}
		s.bins = s.bins[:1]
		s.bins[0] = total
		s.offset = lo
		return
	}
	d := lo - s.offset
	for _, c := range s.bins[:d+1] {
		total = satAdd(total, uint64(c))
	}
	copy(s.bins, s.bins[d:])
	s.bins = s.bins[:len(s.bins)-d]
	s.bins[0] = total
	s.offset = lo
}

// mergeStore adds src's counts to dst.
func mergeStore[D, S ~uint32 | ~uint64](dst *store[D], src *store[S], limit int) {
	if len(src.bins) == 0 {
		return
	}
	// Cover src's range first (highest key, then lowest) so that the loop
	// below never moves the bins.
	dst.index(src.offset+len(src.bins)-1, limit)
	dst.index(src.offset, limit)
	for i, c := range src.bins {
		if c != 0 {
			p := &dst.bins[dst.index(src.offset+i, limit)]
			*p = satAdd(*p, uint64(c))
		}
	}
}
