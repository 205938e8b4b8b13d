package slo

import (
	"strings"
	"time"

	"github.com/goodput/goodput/meter"
)

// Reason is one reason a request missed its SLO (docs/MEASURES.md, SLOs).
type Reason uint8

// The reasons, in the order they are listed and printed.
const (
	reasonTTFT        Reason = iota // time to first token over the bound
	reasonTPOT                      // time per output token over the bound
	reasonITL                       // too many inter-token gaps over the bound
	reasonDeadline                  // a token arrived after its deadline
	reasonE2E                       // end-to-end latency over the bound
	reasonError                     // outcome upstream_error, client_error, timeout, unauthorized or rejected
	reasonAborted                   // outcome client_abort
	reasonRateLimited               // outcome rate_limited
	numReasons
)

var reasonNames = [numReasons]string{"ttft", "tpot", "itl", "deadline", "e2e", "error", "aborted", "rate_limited"}

// String returns the reason's label value.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// AllReasons lists every reason in order; useful to pre-create metric
// children.
func AllReasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Reasons is a set of Reason values. The zero value is the empty set.
type Reasons uint16

// has reports whether r is in the set.
func (rs Reasons) has(r Reason) bool { return rs&(1<<r) != 0 }

// with returns the set with r added.
func (rs Reasons) with(r Reason) Reasons { return rs | 1<<r }

// Len returns the number of reasons in the set.
func (rs Reasons) Len() int {
	n := 0
	for r := Reason(0); r < numReasons; r++ {
		if rs.has(r) {
			n++
		}
	}
	return n
}

// names returns the reasons' names in order (nil for the empty set).
func (rs Reasons) names() []string {
	var out []string
	for r := Reason(0); r < numReasons; r++ {
		if rs.has(r) {
			out = append(out, reasonNames[r])
		}
	}
	return out
}

// String returns the names joined by commas ("" for the empty set).
func (rs Reasons) String() string { return strings.Join(rs.names(), ",") }

// appendJSON appends the set as a JSON array of strings, e.g.
// ["ttft","e2e"], without allocating beyond b's growth: for the request log.
func (rs Reasons) appendJSON(b []byte) []byte {
	b = append(b, '[')
	first := true
	for r := Reason(0); r < numReasons; r++ {
		if rs.has(r) {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = append(b, reasonNames[r]...)
			b = append(b, '"')
		}
	}
	return append(b, ']')
}

// MarshalJSON writes the set as a JSON array of reason names.
func (rs Reasons) MarshalJSON() ([]byte, error) { return rs.appendJSON(nil), nil }

// Verdict is the judgement of one request.
type Verdict struct {
	// Good: the outcome is ok and every threshold of the class holds.
	Good bool
	// Reasons holds every reason for a miss; empty when Good.
	Reasons Reasons
	// Lateness is the deadline lateness (docs/MEASURES.md): the largest
	// amount by which a token arrived after its due time, floored at 0. Zero when the
	// class has no deadline or the lateness could not be computed.
	Lateness time.Duration
	// ITLOver counts the inter-token gaps over the class's itl bound (0
	// when the class has none).
	ITLOver int
}

// judge judges one record against class c (docs/MEASURES.md, SLOs). It does
// not allocate.
//
// Outcome: anything but ok is a miss, with reason aborted (client_abort),
// rate_limited (rate_limited) or error (every other outcome: upstream_error,
// client_error, timeout, unauthorized, rejected). Unauthorized requests have
// no valid key and so no tenant; callers should not count them against a
// tenant at all (the denominator is every request with a valid key).
//
// Thresholds (inclusive ≤) are checked on every record, so a failed request
// also carries the latency reasons its partial measurements show (a client
// abort after a 3 s TTFT misses for aborted and ttft; so does any failed
// request that ended after 3 s without a first token: a client that left,
// a timeout, an engine error). A measurement that is unknown adds no reason
// to a failed request; for an ok request a bounded measurement that is
// unknown is a miss for that bound, since the promise cannot be shown to
// hold.
//
// Measures:
//   - TTFT: rec.TTFT; when unknown for an ok record (a non-streamed
//     response) the first token reached the client with the body, so E2E
//     stands in for it.
//   - TPOT: rec.TPOT; undefined counts as 0 (tpotOf); otherwise unknown.
//   - ITL: the per-event gaps; the request misses when more than
//     AllowedFraction of them exceed Max. Gaps past the ones a record keeps
//     (meter.MaxKeptGaps) are counted from its summary, exactly unless
//     within 0.5% of Max, and never 0 when the largest gap exceeds Max
//     (meter.GapSummary.CountOver).
//   - deadline: see deadlineLateness.
//   - E2E: rec.E2E.
//
// A nil class judges the outcome only.
func judge(rec *meter.Record, c *Class) Verdict {
	var v Verdict
	ok := rec.Outcome == meter.OutcomeOK
	switch rec.Outcome {
	case meter.OutcomeOK:
	case meter.OutcomeClientAbort:
		v.Reasons = v.Reasons.with(reasonAborted)
	case meter.OutcomeRateLimited:
		v.Reasons = v.Reasons.with(reasonRateLimited)
	default:
		v.Reasons = v.Reasons.with(reasonError)
	}
	if c != nil {
		ttft := firstToken(rec)
		// A request that ended before any token, whatever ended it (the
		// client left, the gateway timed it out or cut it from its queue
		// at shutdown, the engine failed, the limits refused it after a
		// wait in their queue): the first token, had it come, came after
		// that wait (E2E), so a TTFT bound below the wait is proven broken.
		// Judged by the outcome alone, a request the gateway gave up on
		// after the same wait as a client that left would escape the ttft
		// count the client's abort enters.
		waitedNoToken := time.Duration(-1)
		if ttft < 0 {
			waitedNoToken = rec.E2E
		}
		// bound checks one measure; unknown (<0) misses only an ok request.
		bound := func(r Reason, got, max time.Duration) {
			if (got < 0 && ok) || got > max {
				v.Reasons = v.Reasons.with(r)
			}
		}
		if c.TTFT > 0 {
			bound(reasonTTFT, max(ttft, waitedNoToken), dur(c.TTFT))
		}
		if c.TPOT > 0 {
			bound(reasonTPOT, tpotOf(rec), dur(c.TPOT))
		}
		if it := c.ITL; it != nil && it.Max > 0 {
			m := dur(it.Max)
			for _, g := range rec.ITL {
				if g > m {
					v.ITLOver++
				}
			}
			// The gaps after the ones the record keeps, from its summary.
			v.ITLOver += rec.ITLRest.CountOver(m)
			n := len(rec.ITL) + rec.ITLRest.Count
			// over/n ≤ f, with a tolerance for f·n's rounding (0.29·100 is
			// 28.999…): over is an integer, so 1e-9 cannot flip a real miss.
			if float64(v.ITLOver) > it.AllowedFraction*float64(n)+1e-9 {
				v.Reasons = v.Reasons.with(reasonITL)
			}
		}
		if d := c.Deadline; d != nil && d.Pace > 0 {
			late, known := deadlineLateness(rec, ttft, dur(d.TTFT), dur(d.Pace))
			if !known && waitedNoToken > dur(d.TTFT) {
				// The first token was due at the deadline's TTFT; the
				// request waited longer and got none.
				late, known = waitedNoToken-dur(d.TTFT), true
			}
			if known {
				v.Lateness = late
				if late > 0 {
					v.Reasons = v.Reasons.with(reasonDeadline)
				}
			} else if ok {
				v.Reasons = v.Reasons.with(reasonDeadline)
			}
		}
		if c.E2E > 0 {
			bound(reasonE2E, rec.E2E, dur(c.E2E))
		}
	}
	v.Good = v.Reasons == 0
	return v
}

// tpotOf is the TPOT a class bounds: rec.TPOT, or 0 where TPOT is
// undefined, as vLLM's goodput takes it: one output token or none, or at
// most one token event whatever the count (no pace between tokens), or a
// non-streamed response (every token came with the body at once). A
// stream of two or more token events whose TPOT is unknown (no count to
// divide by) has a pace that cannot be shown: Unknown.
//
// A record's TPOT is (E2E − TTFT)/(OSL − 1) truncated to the nanosecond;
// where the division leaves a remainder, the nanosecond above is returned,
// so that checking it against a bound (whole nanoseconds) is exact: a pace
// over the bound by half a nanosecond is over it.
func tpotOf(rec *meter.Record) time.Duration {
	if rec.TPOT >= 0 {
		if n := time.Duration(rec.OSL - 1); n > 0 && rec.TTFT >= 0 && rec.E2E >= rec.TTFT {
			if q, r := (rec.E2E-rec.TTFT)/n, (rec.E2E-rec.TTFT)%n; q == rec.TPOT && r > 0 {
				return q + 1
			}
		}
		return rec.TPOT
	}
	if rec.Events <= 1 || (rec.OSL >= 0 && rec.OSL <= 1) {
		return 0
	}
	return meter.Unknown
}

// firstToken returns the time of the first token: TTFT, or for an ok record
// without one (a non-streamed response) E2E, when the body arrived.
func firstToken(rec *meter.Record) time.Duration {
	if rec.TTFT < 0 && rec.Outcome == meter.OutcomeOK {
		return rec.E2E
	}
	return rec.TTFT
}

// deadlineLateness returns the deadline lateness of rec, whose first token
// came at ttft (firstToken), for a deadline with first-token time a and pace
// p (docs/MEASURES.md, Latencies): token i
// (1-based) is due at a + (i−1)·p, and the lateness is the largest t_i − due_i, floored at 0.
// known is false when the record has no token time (TTFT unknown, and for
// an ok record E2E unknown too).
//
// Token times are rebuilt from the record: the first token event at TTFT (or
// E2E for an ok non-streamed response, which delivers every token at once), each
// later event at the previous one plus its ITL gap. Which tokens an event
// carries:
//   - when rec.TokensPerEvent is known (one count per token event), event k
//     delivers tokens c+1 … c+n_k, where c counts the tokens of the events
//     before it. All of them arrive at t_k, and the first of them is due
//     earliest, so the event's lateness is t_k − (a + c·p); an event with
//     n_k = 0 (such as a role-only first chunk) delivers nothing. A token can
//     never count as shown before the event that carried it arrived, so a
//     per-token spread (gap/n) is deliberately not used here.
//   - otherwise each token event stands for one token (event k is token k),
//     as in the ITL view (one gap per token event), except the events before
//     the first one with content (rec.LeadEvents): a chat stream's
//     role-only first chunk carries no token, and counting it as token 1
//     would give every real token one pace of slack, so that the verdict
//     would hang on whether the engine sent per-event counts.
//
// A record keeps the times of its first meter.MaxKeptGaps+1 token events
// only (a summary of the later gaps cannot place them one by one): for a
// longer stream the lateness is the largest over those and the last token
// event, at the kept events' end plus the summarised gaps' sum. One token
// per event, that event is token (events − lead); with per-event counts,
// which the record keeps for the kept events only, the last token (OSL) is
// taken at the last event less the largest summarised gap once for each
// event after it that carried none (rec.TrailEmpty, at least once), so
// that an empty finish chunk or two never make an on-time stream late.
//
// Since lateness is a maximum over t_i − due_i, delaying any token can only
// raise it: evening out a stream never turns a deadline miss into a pass.
func deadlineLateness(rec *meter.Record, ttft, a, p time.Duration) (time.Duration, bool) {
	if ttft < 0 {
		return 0, false
	}
	tpe := rec.TokensPerEvent
	if len(tpe) != len(rec.ITL)+1 {
		tpe = nil // unknown or inconsistent: one token per event
	}
	// Without counts, the events before the first with content carry no
	// token (by index: events read together share a time).
	lead := 0
	if tpe == nil {
		lead = rec.LeadEvents
	}
	var late time.Duration
	t := ttft
	var before int64 // tokens delivered by earlier events
	for k := 0; ; k++ {
		if k > 0 {
			t += rec.ITL[k-1]
		}
		n := int64(1)
		if tpe != nil {
			n = int64(tpe[k])
		} else if k < lead {
			n = 0
		}
		if n > 0 {
			if l := t - (a + time.Duration(before)*p); l > late {
				late = l
			}
			before += n
		}
		if k == len(rec.ITL) {
			break
		}
	}
	if rest := &rec.ITLRest; rest.Count > 0 {
		// The events after the kept ones cannot be placed one by one, but
		// the last is: t plus every later gap. One token per event, it is
		// token (events − lead); with counts, the events after the kept
		// ones carried tokens up to OSL, the last one (if the last event
		// carried none, that token came at most one gap, Max, before it
		// for each of the TrailEmpty events after it).
		last := t + rest.Sum
		if tpe == nil {
			if l := last - (a + time.Duration(int64(len(rec.ITL)+rest.Count-lead))*p); l > late {
				late = l
			}
		} else if int64(rec.OSL) > before && rec.TrailEmpty < rest.Count { // some token came after the kept events
			// The last token came TrailEmpty events before the last one
			// (events that carried none), each at most Max after the one
			// before it; at least one gap is taken, as a record not from
			// a meter may not say. Never more than every summarised gap.
			n := max(rec.TrailEmpty, 1)
			back := rest.Sum
			if rest.Max > 0 && int64(n) <= int64(rest.Sum/rest.Max) {
				back = time.Duration(n) * rest.Max
			}
			if l := last - back - (a + time.Duration(int64(rec.OSL-1))*p); l > late {
				late = l
			}
		}
	}
	return late, true
}
