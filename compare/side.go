package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/internal/stats"
)

// The kinds of source a side can come from.
const (
	KindBench      = "bench result"
	KindRequestLog = "request log"
	KindProfile    = "profile"
	KindPrometheus = "prometheus"
)

// Side is one side of a comparison, whatever its source: the figures the
// source has, each with a word on where it came from.
type Side struct {
	Kind   string `json:"kind"`
	Source string `json:"source"` // a file name or a URL (without a password)
	Label  string `json:"label,omitempty"`
	// Requests counts the requests that completed (outcome ok); Failed
	// the others, when known.
	Requests int `json:"requests"`
	Failed   Num `json:"failed"`
	// Seconds is the span the figures cover.
	Seconds Num `json:"seconds"`

	ISL  Dist `json:"-"`
	OSL  Dist `json:"-"`
	TTFT Dist `json:"-"` // milliseconds, as every latency
	TPOT Dist `json:"-"`
	ITL  Dist `json:"-"`
	E2E  Dist `json:"-"`

	ArrivalRate    Num    `json:"arrival_rate_per_second"`
	RateFrom       string `json:"arrival_rate_from,omitempty"`
	Burstiness     Num    `json:"burstiness"` // gamma shape k = mean²/variance of inter-arrival gaps
	Regular        bool   `json:"regular,omitempty"`
	BurstinessFrom string `json:"burstiness_from,omitempty"`
	ConcMean       Num    `json:"concurrency_mean"`
	ConcPeak       Num    `json:"concurrency_peak"`
	ConcFrom       string `json:"concurrency_from,omitempty"`

	// OwnSLO is the SLO a benchmark result carries (vLLM's --goodput), if
	// any; OwnGoodput its request_goodput (requests per second).
	OwnSLO     *SLO `json:"own_slo,omitempty"`
	OwnGoodput Num  `json:"-"`
	// ownSLOErr says why an SLO the result carries cannot be read.
	ownSLOErr error

	// perRequest says the source has per-request values (a request log, a
	// benchmark's per-request arrays with ttfts): reqs and missed then hold
	// every request, and attainment is exact, even when none completed.
	perRequest bool
	// reqs holds per-request latencies (milliseconds; NaN unknown) of the
	// completed requests, when the source has them.
	reqs []reqLat
	// missed holds, beside reqs, the failed requests that count against
	// attainment: every inference request with a valid key is in its
	// denominator, and an error, a timeout, a rate-limit refusal or a
	// client that left after the first byte is a miss, never dropped.
	missed []failedReq
	// missLo and missHi, for a source without per-request values (a
	// benchmark's summary, Prometheus), bound how many failed requests
	// count so; NaN when not known.
	missLo, missHi Num
	// Notes say what the source lacks or how a figure was derived.
	Notes []string `json:"notes,omitempty"`
}

// reqLat is one completed request's latencies in milliseconds.
type reqLat struct {
	ttft, tpot, e2e float64
}

// failedReq is a failed request of a per-request source. One whose client
// left before the engine sent anything (early) counts only when its wait,
// e2e milliseconds, already broke a bound, as the gateway judges it: the
// service had no chance to keep or break its promise otherwise.
type failedReq struct {
	early bool
	e2e   float64
}

// counts reports whether f is a miss under o.
func (f failedReq) counts(o SLO) bool {
	if !f.early {
		return true
	}
	ttft, byTTFT := bound(o.TTFT)
	e2el, byE2E := bound(o.E2EL)
	return (byTTFT && f.e2e > ttft) || (byE2E && f.e2e > e2el)
}

func newSide(kind, source string) *Side {
	return &Side{
		Kind: kind, Source: source, Failed: unknown, Seconds: unknown,
		missLo: unknown, missHi: unknown, ArrivalRate: unknown, Burstiness: unknown, ConcMean: unknown, ConcPeak: unknown,
		OwnGoodput: unknown,
	}
}

// OwnSLOError reports an SLO the benchmark result carries but compare
// cannot read (a note says so too): without another SLO the result cannot
// be judged as it asks.
func (s *Side) OwnSLOError() error { return s.ownSLOErr }

func (s *Side) note(format string, a ...any) { s.Notes = append(s.Notes, fmt.Sprintf(format, a...)) }

// setArrivals derives the arrival rate and burstiness from arrival times
// (seconds, any origin): the rate is (n-1) / (last - first), the mean gap's
// inverse; k = mean² / population variance of the gaps, vLLM bench's
// --burstiness (1 Poisson, < 1 burstier, > 1 more regular).
func (s *Side) setArrivals(times []float64, from string) {
	const maxShape = 1e6 // as bench's schedule: above it, gaps are constant
	if len(times) < 2 {
		s.note("fewer than two arrivals: no arrival rate or burstiness")
		return
	}
	ts := append([]float64(nil), times...)
	sort.Float64s(ts)
	span := ts[len(ts)-1] - ts[0]
	if span <= 0 {
		s.note("every request arrived at the same instant: no arrival rate or burstiness")
		return
	}
	n := float64(len(ts) - 1)
	mean := span / n
	var v float64
	for i := 1; i < len(ts); i++ {
		g := ts[i] - ts[i-1] - mean
		v += g * g
	}
	v /= n
	s.ArrivalRate = Num(1 / mean)
	s.RateFrom = from
	s.BurstinessFrom = from
	switch {
	case len(ts) < 3:
		s.note("one inter-arrival gap: no burstiness")
		s.BurstinessFrom = ""
	case v <= mean*mean/maxShape:
		// Constant gaps: k is infinite. Past maxShape (gaps spread by
		// under 0.1% of their mean: a log's times are rounded, so even
		// gaps read as k of hundreds of millions).
		s.Regular = true
		s.Burstiness = Num(math.Inf(1))
	default:
		s.Burstiness = Num(mean * mean / v)
	}
}

// setConcurrency derives concurrency from request intervals (seconds): the
// peak by a sweep over half-open [start, end) intervals (an end before a
// start at the same instant, as vLLM counts it), and the time-weighted
// mean over the span from the first start to the last end.
func (s *Side) setConcurrency(starts, ends []float64, from string) {
	if len(starts) == 0 {
		return
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	var busy float64
	for i := range starts {
		lo, hi = min(lo, starts[i]), max(hi, ends[i])
		busy += ends[i] - starts[i]
	}
	s.ConcPeak = Num(stats.PeakOverlap(starts, ends))
	if hi > lo {
		s.ConcMean = Num(busy / (hi - lo))
	}
	s.ConcFrom = from
}

// SLO is a per-request service level objective in vLLM bench's --goodput
// form: a request is good when each bound given holds: TTFT ≤ ttft, TPOT ≤
// tpot (a request of one output token or none has TPOT 0), E2E latency ≤
// e2el. A positive field is a bound in milliseconds, 0 no bound, and a
// negative one a bound of 0 ms, which only a 0 meets (what "ttft:0" asks
// for), as bench.SLO holds them.
type SLO struct {
	TTFT float64
	TPOT float64
	E2EL float64
}

// zeroBound is a field's bound of 0 ms.
const zeroBound = -1

// bound returns a field's bound in milliseconds and whether it is set.
func bound(v float64) (float64, bool) {
	switch {
	case v < 0:
		return 0, true
	case v > 0:
		return v, true
	}
	return 0, false
}

// IsZero reports whether no bound is set.
func (o SLO) IsZero() bool { return o.TTFT == 0 && o.TPOT == 0 && o.E2EL == 0 }

func (o SLO) bounds() []struct {
	name string
	v    float64
} {
	return []struct {
		name string
		v    float64
	}{{"ttft", o.TTFT}, {"tpot", o.TPOT}, {"e2el", o.E2EL}}
}

func (o SLO) String() string {
	var parts []string
	for _, b := range o.bounds() {
		if ms, ok := bound(b.v); ok {
			parts = append(parts, b.name+":"+strconv.FormatFloat(ms, 'f', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}

// MarshalJSON writes the bounds set, in milliseconds: {"ttft_ms": 0,
// "tpot_ms": 25}.
func (o SLO) MarshalJSON() ([]byte, error) {
	m := map[string]float64{}
	for _, b := range o.bounds() {
		if ms, ok := bound(b.v); ok {
			m[b.name+"_ms"] = ms
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *SLO) UnmarshalJSON(data []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*o = SLO{}
	for k, p := range map[string]*float64{"ttft_ms": &o.TTFT, "tpot_ms": &o.TPOT, "e2el_ms": &o.E2EL} {
		if v, ok := m[k]; ok {
			*p = v
			if v <= 0 {
				*p = zeroBound
			}
		}
	}
	return nil
}

// ParseSLO reads "ttft:MS,tpot:MS,e2el:MS" (any subset, in any order; also
// separated by spaces, as vLLM's --goodput takes them; e2e for e2el) with
// goodput bench's rule (bench.ParseSLO), so that compare reads every SLO
// bench accepts, and --slo and a result's own SLO are one: a bound is a
// number of milliseconds, 0 included (met only by 0).
func ParseSLO(s string) (SLO, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(fields) == 0 {
		return SLO{}, fmt.Errorf("empty SLO: want e.g. ttft:500,tpot:50,e2el:10000")
	}
	for i, f := range fields {
		if k, v, ok := strings.Cut(f, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "e2e") {
			fields[i] = "e2el:" + v
		}
	}
	b, err := bench.ParseSLO(fields)
	if err != nil {
		return SLO{}, err
	}
	ms := func(d time.Duration) float64 {
		if d < 0 {
			return zeroBound
		}
		return float64(d) / float64(time.Millisecond)
	}
	o := SLO{TTFT: ms(b.TTFT), TPOT: ms(b.TPOT), E2EL: ms(b.E2EL)}
	if o.IsZero() {
		return SLO{}, fmt.Errorf("SLO %q sets no bound", s)
	}
	return o, nil
}

// Attainment is the share of completed requests that met an SLO. From
// per-request values it is exact (Low = High); from latency histograms
// only each bound's share is known, and the joint share lies between
// max(0, 1 - Σ misses) and the smallest single share.
type Attainment struct {
	Low    Num    `json:"low"`
	High   Num    `json:"high"`
	Method string `json:"method,omitempty"`
	Why    string `json:"why,omitempty"`
}

// Exact reports whether the attainment is one number.
func (a Attainment) Exact() bool { return known(a.Low) && a.Low == a.High }

// Mid is the middle of the range.
func (a Attainment) Mid() Num { return (a.Low + a.High) / 2 }

// attainment computes the side's attainment of o with one rule for every
// source.
func (s *Side) attainment(o SLO, own bool) Attainment {
	if s.perRequest {
		misses := 0
		for _, f := range s.missed {
			if f.counts(o) {
				misses++
			}
		}
		if len(s.reqs)+misses == 0 {
			return Attainment{Low: unknown, High: unknown, Why: "no completed request"}
		}
		good, unknownMetric := 0, 0
		for _, r := range s.reqs {
			ok := true
			for _, c := range []struct{ v, bound float64 }{{r.ttft, o.TTFT}, {r.tpot, o.TPOT}, {r.e2e, o.E2EL}} {
				b, set := bound(c.bound)
				if !set {
					continue
				}
				if math.IsNaN(c.v) {
					unknownMetric++
					ok = false
					break
				}
				if c.v > b {
					ok = false
					break
				}
			}
			if ok {
				good++
			}
		}
		a := Num(float64(good) / float64(len(s.reqs)+misses))
		at := Attainment{Low: a, High: a, Method: "per request"}
		var why []string
		if misses > 0 {
			if misses == 1 {
				why = append(why, "1 failed request counts as a miss")
			} else {
				why = append(why, fmt.Sprintf("%d failed requests count as misses", misses))
			}
		}
		if unknownMetric > 0 {
			why = append(why, fmt.Sprintf("%d requests lack a measure the SLO bounds and count as misses", unknownMetric))
		}
		at.Why = strings.Join(why, "; ")
		return at
	}
	if a, ok := s.histAttainment(o); ok {
		return a
	}
	if s.Requests == 0 && known(s.missLo) && s.missLo > 0 {
		// A summary whose every request failed: each failure is a miss.
		return Attainment{Low: 0, High: 0, Method: "every request failed"}
	}
	if own && known(s.OwnGoodput) && known(s.Seconds) && s.Requests > 0 {
		// At most the completed requests (ReadBench refuses more), but for
		// the rounding of request_goodput and duration.
		good := min(float64(s.OwnGoodput)*float64(s.Seconds), float64(s.Requests))
		if !known(s.missLo) {
			a := Num(good / float64(s.Requests))
			return Attainment{Low: a, High: a, Method: "request_goodput × duration / completed",
				Why: "the result does not say how many requests failed: failed requests, misses, are left out"}
		}
		lo := Num(good / (float64(s.Requests) + float64(s.missHi)))
		hi := Num(good / (float64(s.Requests) + float64(s.missLo)))
		return Attainment{Low: lo, High: hi, Method: "request_goodput × duration / (completed + failed)"}
	}
	return Attainment{Low: unknown, High: unknown, Why: "no per-request latencies or latency histograms"}
}

// histAttainment bounds the attainment of o from the side's latency
// histograms (Prometheus), over its completed requests (Requests), when every
// bounded measure has one. A histogram counts more than the completed
// requests and leaves some of them out, so each bound's misses among them
// are themselves a range:
//   - a bound inside a bucket (not one of its bounds) may have any of the
//     bucket's observations on either side (Dist.Over);
//   - it holds the requests of every outcome that had the measure (a 429's
//     few milliseconds, an error's TTFT): at most Failed of the observations
//     above a bound are not completed requests;
//   - it leaves out the completed requests without the measure: TPOT has no
//     request of one output token (TPOT 0, within any bound) and no
//     non-streamed one (TPOT bounds nothing there); TTFT has no non-streamed
//     one, whose E2E stands in for it and may be over the TTFT bound.
//
// With m_b in [lo_b, hi_b] for each bound, good requests are at least
// N − Σ hi_b and at most N − max lo_b.
func (s *Side) histAttainment(o SLO) (Attainment, bool) {
	n := float64(s.Requests)
	failed := 0.0
	if known(s.Failed) {
		failed = float64(s.Failed)
	}
	sumHi, maxLo, any := 0.0, 0.0, false
	for _, c := range []struct {
		d     *Dist
		bound float64
		ttft  bool
	}{{&s.TTFT, o.TTFT, true}, {&s.TPOT, o.TPOT, false}, {&s.E2E, o.E2EL, false}} {
		b, set := bound(c.bound)
		if !set {
			continue
		}
		if !c.d.hasHist() {
			return Attainment{}, false
		}
		any = true
		// Observations above the bound, of every outcome: a range unless
		// the bound is a bucket's.
		overLo, overHi, _ := c.d.Over(b)
		lo, hi := max(0, overLo-failed), overHi
		if c.ttft {
			// Completed requests the TTFT histogram may lack.
			hi += max(0, n-max(0, c.d.Total-failed))
		}
		sumHi += min(hi, n)
		maxLo = max(maxLo, min(lo, n))
	}
	if !any {
		return Attainment{}, false
	}
	mLo, mHi := 0.0, 0.0
	if known(s.missLo) {
		mLo, mHi = float64(s.missLo), float64(s.missHi)
	}
	switch {
	case n <= 0 && mLo > 0:
		return Attainment{Low: 0, High: 0, Method: "every request failed"}, true
	case n <= 0:
		return Attainment{Low: unknown, High: unknown, Why: "no completed request"}, true
	}
	goodLo, goodHi := max(0, n-sumHi), n-maxLo
	at := Attainment{Low: Num(goodLo / (n + mHi)), High: Num(goodHi / (n + mLo)),
		Method: "from latency histograms (a range: they count every outcome, and do not say which requests missed together)"}
	if mHi > 0 {
		at.Why = fmt.Sprintf("%s to %s failed requests count as misses (by outcome: a client error or abort may not)", strconv.FormatFloat(mLo, 'f', 0, 64), strconv.FormatFloat(mHi, 'f', 0, 64))
	}
	return at, true
}
