package meter

import (
	"math"
	"time"
)

// MaxKeptGaps is how many inter-token gaps a record keeps one by one (the
// first ones, in order): Record.ITL and the log's itl_ms hold at most this
// many, and TokensPerEvent at most one more. The gaps after them are
// summarised in Record.ITLRest (a few KiB at most, whatever the stream's
// length), so that a stream that never ends cannot grow the gateway's
// memory or its log lines without bound. 4096 gaps cover all but the
// longest generations (about 16 KiB in the meter, 32 KiB in the record and
// 40 KiB in the log line at worst).
const MaxKeptGaps = 4096

// GapAccuracy is the relative accuracy α of a GapSummary's buckets. It is
// the SLO sketch's (slo.RelativeAccuracy) and bucket k is the sketch's
// bucket k−1 (the same gaps, the same representative), so the live view
// adds a summary with no error of its own.
const GapAccuracy = 0.005

var (
	gapGamma      = (1 + GapAccuracy) / (1 - GapAccuracy)
	gapInvLnGamma = 1 / math.Log(gapGamma)
)

// GapKey returns the bucket of a gap: k = ⌈log_γ s⌉ for a gap of s > 0
// seconds, γ = (1+α)/(1−α) with α = GapAccuracy, so that bucket k holds
// the gaps in (γ^(k−1), γ^k] seconds; zero is true for a gap under a
// nanosecond (two events read at once), which has no bucket.
func GapKey(d time.Duration) (key int, zero bool) {
	v := d.Seconds()
	if v < 1e-9 {
		return 0, true
	}
	return int(math.Ceil(math.Log(v) * gapInvLnGamma)), false
}

// GapBucketBounds returns the gaps bucket k holds: (lo, hi] seconds.
func GapBucketBounds(k int) (lo, hi float64) {
	return math.Pow(gapGamma, float64(k-1)), math.Pow(gapGamma, float64(k))
}

// GapBucketValue returns the representative of bucket k in seconds, within
// GapAccuracy of every gap in it: 2γ^k/(γ+1).
func GapBucketValue(k int) float64 {
	return 2 * math.Pow(gapGamma, float64(k)) / (1 + gapGamma)
}

// GapSummary summarises inter-token gaps that a record does not keep one by
// one: their exact count, sum, smallest and largest, and how many fell in
// each bucket of GapKey. Gaps are whole microseconds (as Record.ITL), from
// 0 to about 71 minutes, so the buckets span at most about 2,200 keys (9
// KiB). The zero value is empty.
type GapSummary struct {
	Count    int           // gaps summarised
	Sum      time.Duration // their total
	Min, Max time.Duration // smallest and largest (0 when Count is 0)
	Zero     int           // gaps under a nanosecond, which have no bucket
	// Buckets[i] counts the gaps of key Offset+i.
	Offset  int
	Buckets []uint32
}

// reset empties s, keeping the capacity of its buckets.
func (s *GapSummary) reset() { *s = GapSummary{Buckets: s.Buckets[:0]} }

// add counts one gap. It allocates only when the gaps' range widens beyond
// what the buckets held before (at most a few times per Meter's life).
func (s *GapSummary) add(d time.Duration) {
	if s.Count == 0 || d < s.Min {
		s.Min = d
	}
	if d > s.Max {
		s.Max = d
	}
	s.Count++
	s.Sum += d
	k, zero := GapKey(d)
	if zero {
		s.Zero++
		return
	}
	switch {
	case len(s.Buckets) == 0:
		s.Offset = k
		s.Buckets = append(s.Buckets[:0], 0)
	case k < s.Offset:
		d := s.Offset - k
		n := len(s.Buckets)
		s.Buckets = growBuckets(s.Buckets, n+d)
		copy(s.Buckets[d:], s.Buckets[:n])
		clear(s.Buckets[:d])
		s.Offset = k
	case k >= s.Offset+len(s.Buckets):
		n := len(s.Buckets)
		s.Buckets = growBuckets(s.Buckets, k-s.Offset+1)
		clear(s.Buckets[n:])
	}
	if i := k - s.Offset; s.Buckets[i] < math.MaxUint32 {
		s.Buckets[i]++
	}
}

// growBuckets returns b with length n ≥ len(b), its old counts in place.
func growBuckets(b []uint32, n int) []uint32 {
	if n <= cap(b) {
		return b[:n]
	}
	nb := make([]uint32, n, max(2*n, 64))
	copy(nb, b)
	return nb
}

// CopyTo makes dst a copy of s, reusing dst's bucket capacity.
func (s *GapSummary) CopyTo(dst *GapSummary) {
	b := append(dst.Buckets[:0], s.Buckets...)
	*dst = *s
	dst.Buckets = b
}

// CountOver returns how many summarised gaps exceed limit: exactly for the
// buckets entirely above or below it; the gaps of the one bucket that
// straddles it count as over when the bucket's representative is (so the
// answer is exact for every gap more than GapAccuracy away from limit).
// The exact extremes bound the answer: when Max exceeds limit at least one
// gap does, and when Min does not at least one gap does not, so whether
// any gap exceeds limit is always exact.
func (s *GapSummary) CountOver(limit time.Duration) int {
	n := s.countOver(limit)
	if s.Count > 0 && s.Max > limit {
		n = max(n, 1)
	}
	if s.Count > 0 && s.Min <= limit {
		n = min(n, s.Count-1)
	}
	return n
}

func (s *GapSummary) countOver(limit time.Duration) int {
	if s.Count == 0 || s.Max <= limit {
		return 0
	}
	if s.Min > limit {
		return s.Count
	}
	lim := limit.Seconds()
	n := 0
	for i, c := range s.Buckets {
		if c == 0 {
			continue
		}
		k := s.Offset + i
		lo, hi := GapBucketBounds(k)
		switch {
		case lo >= lim:
			n += int(c)
		case hi <= lim:
		case GapBucketValue(k) > lim:
			n += int(c)
		}
	}
	return n
}

// EventTokens says how a streamed record's output count (OSL) compares with
// its number of token events, which tells what its ITL gaps measured: ITL
// is one gap per token event (vLLM's rule), so only where each event
// carried one token is a gap a per-token time.
type EventTokens uint8

const (
	// EventTokensUnknown: not a stream with token events, or no output
	// count from the engine (an estimated OSL is the count of events with
	// content, so it says nothing here).
	EventTokensUnknown EventTokens = iota
	// EventTokensEqual: OSL equals the number of token events.
	EventTokensEqual
	// EventTokensAbove: OSL is larger: some events carried several tokens
	// (merged by the engine: a character split across tokens, stop-string
	// holdback, speculative decoding), and the gap before such an event
	// spans all of them.
	EventTokensAbove
	// EventTokensBelow: OSL is smaller: some token events carried no token
	// (a role-only first chunk, a separate finish chunk).
	EventTokensBelow
)

// String returns the label value: unknown, equal, above or below.
func (e EventTokens) String() string {
	switch e {
	case EventTokensEqual:
		return "equal"
	case EventTokensAbove:
		return "above"
	case EventTokensBelow:
		return "below"
	}
	return "unknown"
}

// EventTokens compares the record's OSL with its token events.
func (r *Record) EventTokens() EventTokens {
	if r.Events <= 0 || r.OSL < 0 || (r.UsageSource != UsageUpstream && r.UsageSource != UsageContinuous) {
		return EventTokensUnknown
	}
	switch {
	case r.OSL > r.Events:
		return EventTokensAbove
	case r.OSL < r.Events:
		return EventTokensBelow
	}
	return EventTokensEqual
}

// MultiTokenEvents reports whether some token event is known to have
// carried several tokens: one with n > 1 in TokensPerEvent, or, when the
// counts per event are not known, OSL above the number of token events
// (then some event must have; with OSL at or below it, a merged event can
// hide behind events that carried none, so this is a lower bound).
func (r *Record) MultiTokenEvents() bool {
	for _, n := range r.TokensPerEvent {
		if n > 1 {
			return true
		}
	}
	return r.EventTokens() == EventTokensAbove
}
