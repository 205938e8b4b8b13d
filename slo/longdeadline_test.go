package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// slowedStream is the record of a stream of events token events whose kept
// gaps are 10 ms and whose later ones, rest of them (summarised), 200 ms.
func slowedStream(events int) (rec *meter.Record, rest int) {
	kept := make([]time.Duration, meter.MaxKeptGaps)
	for i := range kept {
		kept[i] = 10 * ms
	}
	rec = stream(100*ms, kept...)
	rest = events - 1 - meter.MaxKeptGaps
	rec.ITLRest = meter.GapSummary{Count: rest, Sum: time.Duration(rest) * 200 * ms, Min: 200 * ms, Max: 200 * ms}
	rec.E2E += rec.ITLRest.Sum
	return rec, rest
}

// SPEC §3, deadline lateness: "lateness is the largest t_i − due_i" over
// every token. A record keeps the times of its first meter.MaxKeptGaps+1
// token events and a summary of the later gaps; a long stream (a reasoning
// model's 6,000 tokens) that keeps pace for its first 4,097 tokens and then
// slows to four times the pace ends far past its last token's due time. Its
// last token event is placed exactly (TTFT plus every gap, the summarised
// ones' sum: E2E), so its lateness is known, and the request misses.
func TestDeadlineLatenessPastKeptGaps(t *testing.T) {
	const events = 6000
	rec, _ := slowedStream(events)
	rec.MaxITL = 200 * ms
	rec.Events, rec.OSL = events, events
	rec.TPOT = (rec.E2E - rec.TTFT) / (events - 1)

	a, p := time.Second, 50*ms
	// The last token, token 6000, came at E2E and was due at a + 5999·p.
	want := rec.E2E - (a + (events-1)*p)
	if want <= 0 {
		t.Fatalf("test setup: the last token is not late (%v)", want)
	}
	got, known := deadlineLateness(rec, firstToken(rec), a, p)
	if !known || got < want {
		t.Errorf("lateness = %v (known %v), want at least the last token's %v", got, known, want)
	}
	c := &Class{Deadline: &Deadline{TTFT: d(a), Pace: d(p)}, Objective: 0.9}
	if v := judge(rec, c); v.Good || !v.Reasons.has(reasonDeadline) {
		t.Errorf("judged good (reasons %q, lateness %v): the stream's last token was %v late", v.Reasons, v.Lateness, want)
	}
}

// The same with per-event counts (vLLM's continuous usage): the kept
// events' counts say nothing of the later ones, but OSL does. The last
// token, token OSL, came at most one gap (the summary's largest) before the
// last event.
func TestDeadlineLatenessPastKeptGapsWithCounts(t *testing.T) {
	const events = 6000
	rec, rest := slowedStream(events)
	rec.TokensPerEvent = make([]int, meter.MaxKeptGaps+1)
	for i := range rec.TokensPerEvent {
		rec.TokensPerEvent[i] = 1
	}
	rec.Events, rec.OSL = events, events
	a, p := time.Second, 50*ms
	want := rec.E2E - 200*ms - (a + (events-1)*p)
	got, known := deadlineLateness(rec, firstToken(rec), a, p)
	if !known || got != want {
		t.Errorf("lateness = %v (known %v), want %v", got, known, want)
	}
	// A stream that kept pace throughout is not late.
	rec.ITLRest.Sum, rec.ITLRest.Min, rec.ITLRest.Max = time.Duration(rest)*10*ms, 10*ms, 10*ms
	rec.E2E = rec.TTFT + (events-1)*10*ms
	rec.TokensPerEvent = nil
	if got, _ := deadlineLateness(rec, firstToken(rec), a, p); got != 0 {
		t.Errorf("a stream on pace: lateness %v", got)
	}
}
