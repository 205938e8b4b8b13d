package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// countedStream meters a stream whose token events each carry a running
// completion count (continuous usage, so the record has TokensPerEvent):
// tokens events of one token each, the first at first and the next ones
// every gap, then one event per entry of trail, after that gap, carrying
// no token (an empty delta, a separate finish chunk).
func countedStream(first, gap time.Duration, tokens int, trail []time.Duration) *meter.Record {
	m, t0 := startedMeter()
	ev := func(n int, content bool) *meter.EventInfo {
		return &meter.EventInfo{Token: true, Content: content, HasUsage: true, PromptTokens: 10, CompletionTokens: n}
	}
	t := t0.Add(first)
	for i := 1; i <= tokens; i++ {
		if i > 1 {
			t = t.Add(gap)
		}
		m.Observe(ev(i, true), t)
	}
	for _, g := range trail {
		t = t.Add(g)
		m.Observe(ev(tokens, false), t)
	}
	return finishedStream(m, t)
}

// SPEC §3: lateness is the largest t_i − due_i over tokens; an event that
// carried no token has no due time. A stream whose every token came exactly
// on its due time is not late however many empty events follow its last
// token: judged so when its events are all kept, it must be judged so too
// when it is longer than the kept gaps. Two trailing empty events, 1 s
// apart, put the last event 2 s after the last token, and the largest
// summarised gap (1 s) does not reach back to it: the last token taken at
// "the last event less the largest gap" is 1 s late, a false miss.
func TestDeadlineLatenessPastKeptGapsTrailingEmptyEvents(t *testing.T) {
	const first, pace = 100 * time.Millisecond, 20 * time.Millisecond
	trail := []time.Duration{time.Second, time.Second}
	c := &Class{Deadline: &Deadline{TTFT: d(first), Pace: d(pace)}, Objective: 0.9}
	for _, tokens := range []int{100, meter.MaxKeptGaps + 1000} {
		rec := countedStream(first, pace, tokens, trail)
		if len(rec.TokensPerEvent) == 0 || rec.OSL != tokens || rec.TrailEmpty != len(trail) {
			t.Fatalf("setup: %d tokens: counts %d, OSL %d, %d empty events after the last token", tokens, len(rec.TokensPerEvent), rec.OSL, rec.TrailEmpty)
		}
		if tokens > meter.MaxKeptGaps && rec.ITLRest.Count == 0 {
			t.Fatalf("setup: %d tokens: no summarised gap", tokens)
		}
		got, known := deadlineLateness(rec, firstToken(rec), first, pace)
		if !known || got != 0 {
			t.Errorf("%d tokens on time, %d empty events after: lateness %v (known %v), want 0", tokens, len(trail), got, known)
		}
		if v := judge(rec, c); !v.Good {
			t.Errorf("%d tokens on time: judged a miss (%q, lateness %v)", tokens, v.Reasons, v.Lateness)
		}
	}
}

// More empty events after the last token than the meter counts (it
// saturates): the last token cannot be placed, and only the kept events
// count, so the stream on time stays on time.
func TestDeadlineLatenessPastKeptGapsManyTrailingEmptyEvents(t *testing.T) {
	const first, pace = 100 * time.Millisecond, 20 * time.Millisecond
	trail := make([]time.Duration, 300)
	for i := range trail {
		trail[i] = time.Second
	}
	rec := countedStream(first, pace, meter.MaxKeptGaps+1000, trail)
	if rec.ITLRest.Count != 1000+len(trail)-1 {
		t.Fatalf("setup: %d summarised gaps", rec.ITLRest.Count)
	}
	if got, known := deadlineLateness(rec, firstToken(rec), first, pace); !known || got != 0 {
		t.Errorf("lateness %v (known %v), want 0", got, known)
	}
}
