package slo

import (
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// longStream meters a stream of token events whose gaps are kept first,
// then follow: more than meter.MaxKeptGaps gaps, so the later ones are
// summarised (itl_truncated).
func longStream(first time.Duration, gaps []time.Duration) *meter.Record {
	m, t0 := startedMeter()
	tok := func() *meter.EventInfo {
		return &meter.EventInfo{Token: true, Content: true, PromptTokens: meter.Unknown, CompletionTokens: meter.Unknown}
	}
	t := t0.Add(first)
	m.Observe(tok(), t)
	for _, g := range gaps {
		t = t.Add(g)
		m.Observe(tok(), t)
	}
	return finishedStream(m, t)
}

// startedMeter is a meter started at t0, for a test's stream.
func startedMeter() (*meter.Meter, time.Time) {
	m := new(meter.Meter)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Start(t0)
	return m, t0
}

// finishedStream ends m's stream at t (its end marker) and returns its
// record, an ok stream.
func finishedStream(m *meter.Meter, t time.Time) *meter.Record {
	m.Observe(&meter.EventInfo{Done: true, PromptTokens: meter.Unknown, CompletionTokens: meter.Unknown}, t)
	var rec meter.Record
	rec.Reset()
	m.Finish(&rec)
	rec.Outcome, rec.Stream = meter.OutcomeOK, true
	return &rec
}

// SPEC §4: the itl bound is a per-gap bound with an allowed fraction of
// violating gaps, inclusive ≤; with the default fraction 0 no gap may
// exceed it. A stream longer than the kept gaps has the later ones in a
// summary of 0.5% buckets; one gap of 100.2 ms among them, over a 100 ms
// bound, falls in the bucket (99.26, 100.26] ms whose representative is
// under the bound, and was not counted: the request was judged good though
// its largest gap, known exactly (max_itl_ms), exceeds the bound.
func TestITLBoundPastKeptGaps(t *testing.T) {
	gaps := make([]time.Duration, meter.MaxKeptGaps+1000)
	for i := range gaps {
		gaps[i] = 20 * time.Millisecond
	}
	gaps[len(gaps)-10] = 100*time.Millisecond + 200*time.Microsecond
	rec := longStream(100*time.Millisecond, gaps)
	if rec.ITLRest.Count != 1000 || rec.MaxITL != 100200*time.Microsecond {
		t.Fatalf("setup: %d summarised gaps, max %v", rec.ITLRest.Count, rec.MaxITL)
	}
	c := &Class{ITL: &ITLBound{Max: d(100 * time.Millisecond)}, Objective: 0.9}
	v := judge(rec, c)
	if v.Good || !v.Reasons.has(reasonITL) || v.ITLOver != 1 {
		t.Errorf("a 100.2 ms gap against a 100 ms bound: good %v, reasons %q, %d gaps over", v.Good, v.Reasons, v.ITLOver)
	}

}
