package slo

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// The meter summarises gaps in buckets that are this sketch's, so that the
// live view adds a summary with no error of its own: the meter's bucket k
// (⌈log_γ s⌉) is the sketch's bucket k−1 (⌊log_γ s⌋), with the same
// representative value.
func TestGapKeyIsSketchIndex(t *testing.T) {
	if meter.GapAccuracy != relativeAccuracy {
		t.Fatalf("meter.GapAccuracy %v, slo.RelativeAccuracy %v", meter.GapAccuracy, relativeAccuracy)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		d := time.Duration(rng.Int64N(int64(time.Hour)>>uint(rng.IntN(40)))) / time.Microsecond * time.Microsecond
		k, z := meter.GapKey(d)
		wi, wz := sketchIndex(d.Seconds())
		if z != wz || (!z && k-1 != wi) {
			t.Fatalf("%v: meter key %d (zero %v), sketch index %d (zero %v)", d, k, z, wi, wz)
		}
		if !z {
			if got, want := sketchMapping.Value(wi), meter.GapBucketValue(k); math.Abs(got-want) > 1e-12*want {
				t.Fatalf("%v: sketch bucket value %v, meter's %v", d, got, want)
			}
		}
	}
}

// longRecord meters a stream of events token events whose gaps are gap(k).
func longRecord(events int, gap func(k int) time.Duration) *meter.Record {
	var m meter.Meter
	m.Start(t0)
	at := t0.Add(200 * time.Millisecond)
	for k := 0; k < events; k++ {
		if k > 0 {
			at = at.Add(gap(k))
		}
		info := meter.EventInfo{Token: true, Content: true, HasUsage: true, PromptTokens: 5, CompletionTokens: k + 1}
		m.Observe(&info, at)
	}
	rec := new(meter.Record)
	rec.Reset()
	m.Finish(rec)
	return rec
}

// Past the gaps a record keeps, the ITL bound still counts every gap: a
// stream whose first 4096 gaps are smooth and whose later ones stall misses.
func TestJudgeITLCountsSummarisedGaps(t *testing.T) {
	events := meter.MaxKeptGaps + 1 + 1000
	rec := longRecord(events, func(k int) time.Duration {
		if k > meter.MaxKeptGaps && k%2 == 0 {
			return 300 * ms
		}
		return 10 * ms
	})
	if rec.ITLRest.Count != 1000 {
		t.Fatalf("%d gaps summarised", rec.ITLRest.Count)
	}
	c := &Class{ITL: &ITLBound{Max: d(100 * ms), AllowedFraction: 0.05}, Objective: 0.99}
	v := judge(rec, c)
	if v.Good || !v.Reasons.has(reasonITL) || v.ITLOver != 500 {
		t.Fatalf("verdict %+v: want an itl miss with 500 gaps over", v)
	}
	c.ITL.AllowedFraction = 0.11 // 500 of 5096 gaps is 9.8%
	if v := judge(rec, c); !v.Good {
		t.Fatalf("verdict %+v: want good", v)
	}
}

// The live view's ITL percentiles, max and count take every gap of a long
// stream: the same as a sketch fed each gap.
func TestTrackerTakesSummarisedGaps(t *testing.T) {
	events := meter.MaxKeptGaps + 1 + 3000
	gap := func(k int) time.Duration {
		switch {
		case k == events-2:
			return 2 * time.Second
		case k > meter.MaxKeptGaps:
			return time.Duration(40+k%20) * ms
		}
		return time.Duration(5+k%7) * ms
	}
	rec := longRecord(events, gap)
	tr := newTracker(trackerOptions{Classes: map[string]*Class{"c": {E2E: d(time.Hour), Objective: 0.9}}, Start: t0})
	k := Key{"acme", "m", "c"}
	at := t0.Add(10 * time.Second)
	tr.Observe(k, rec, judge(rec, &Class{E2E: d(time.Hour)}), at)
	var want sketch
	for i := 1; i < events; i++ {
		want.add(gap(i).Seconds())
	}
	got := tr.snapshot(at, "").Tenants[0].Windows["5m"].ITL
	w := distOf(&want)
	if got.Count != uint64(events-1) || got.Max != w.Max || got.P50 != w.P50 || got.P90 != w.P90 || got.P99 != w.P99 {
		t.Fatalf("live ITL %+v, a sketch of every gap %+v", got, w)
	}
	approx(t, "mean", got.Mean, float64(w.Mean), 1e-9)
}

// The live view says how OSL compared with the token events of the ok
// streams behind its ITL figures.
func TestTrackerTokenEvents(t *testing.T) {
	tr := newTracker(trackerOptions{Classes: map[string]*Class{"c": {E2E: d(time.Hour), Objective: 0.9}}, Start: t0})
	at := t0.Add(10 * time.Second)
	usage := func(r *meter.Record, osl int, tpe ...int) *meter.Record {
		r.OSL, r.UsageSource, r.TokensPerEvent = osl, meter.UsageUpstream, tpe
		return r
	}
	recs := []*meter.Record{
		usage(stream(100*ms, 20*ms, 20*ms, 20*ms), 3),                                                     // role chunk + 3 tokens in 3 events: below
		usage(stream(100*ms, 20*ms, 20*ms), 3),                                                            // equal
		usage(stream(100*ms, 20*ms, 20*ms), 3, 0, 1, 2),                                                   // equal, one event of 2 tokens
		usage(stream(100*ms, 20*ms), 9),                                                                   // above: merged
		with(usage(stream(100*ms, 20*ms), 9), func(r *meter.Record) { r.Outcome = meter.OutcomeTimeout }), // not ok
		with(stream(100*ms, 20*ms), func(r *meter.Record) { r.UsageSource = meter.UsageEstimate }),        // estimated OSL
		{Outcome: meter.OutcomeOK, OSL: 5, UsageSource: meter.UsageUpstream, Events: meter.Unknown, TTFT: meter.Unknown, E2E: 50 * ms, TPOT: meter.Unknown}, // not a stream
	}
	for _, r := range recs {
		tr.Observe(Key{"acme", "m", "c"}, r, judge(r, &Class{E2E: d(time.Hour)}), at)
	}
	got := *tr.snapshot(at, "").Tenants[0].Windows["1h"].TokenEvents
	want := TokenEventStats{Requests: 4, OSLNotEvents: 2, OSLAboveEvents: 1, OSLBelowEvents: 1, MultiTokenEvents: 2}
	if got != want {
		t.Fatalf("token events %+v, want %+v", got, want)
	}
	b, err := tr.json(at, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"token_events":{"requests":4,"osl_ne_events":2,"osl_above_events":1,"osl_below_events":1,"multi_token_events":2}`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("admin API JSON lacks %s:\n%s", k, b)
		}
	}
}
