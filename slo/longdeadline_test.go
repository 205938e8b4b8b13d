package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// SPEC §3, deadline lateness: "lateness is the largest t_i − due_i" over
// every token. A record keeps the times of its first meter.MaxKeptGaps+1
// token events and a summary of the later gaps; a long stream (a reasoning
// model's 6,000 tokens) that keeps pace for its first 4,097 tokens and then
// slows to four times the pace ends far past its last token's due time. Its
// last token event is placed exactly (TTFT plus every gap, the summarised
// ones' sum: E2E), so its lateness is known, and the request misses.
func TestDeadlineLatenessPastKeptGaps(t *testing.T) {
	const events = 6000
	kept := make([]time.Duration, meter.MaxKeptGaps)
	for i := range kept {
		kept[i] = 10 * ms
	}
	rec := stream(100*ms, kept...)
	rest := events - 1 - meter.MaxKeptGaps
	rec.ITLRest = meter.GapSummary{Count: rest, Sum: time.Duration(rest) * 200 * ms, Min: 200 * ms, Max: 200 * ms}
	rec.E2E += rec.ITLRest.Sum
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
