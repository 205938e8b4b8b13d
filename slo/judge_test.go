package slo

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

const ms = time.Millisecond

// stream builds an ok streamed record whose first token event is at ttft
// and whose later events follow the given gaps; OSL is one token per event.
func stream(ttft time.Duration, gaps ...time.Duration) *meter.Record {
	r := &meter.Record{
		Outcome: meter.OutcomeOK, Stream: true, ISL: 100,
		TTFT: ttft, TTFTContent: ttft, ITL: gaps, Events: len(gaps) + 1,
		QueueWait: meter.Unknown,
	}
	e2e := ttft
	for _, g := range gaps {
		e2e += g
		r.MaxITL = max(r.MaxITL, g)
	}
	r.E2E = e2e
	r.OSL = len(gaps) + 1
	r.TPOT = meter.Unknown
	if r.OSL > 1 {
		r.TPOT = (e2e - ttft) / time.Duration(r.OSL-1)
	}
	return r
}

func d(x time.Duration) cfgtypes.Duration { return cfgtypes.Duration(x) }

func with(r *meter.Record, f func(*meter.Record)) *meter.Record { f(r); return r }

func reasons(rs ...Reason) Reasons {
	var out Reasons
	for _, r := range rs {
		out = out.with(r)
	}
	return out
}

func TestJudgeTable(t *testing.T) {
	interactive := &Class{TTFT: d(500 * ms), TPOT: d(50 * ms), E2E: d(60 * time.Second), Objective: 0.99}
	reader := &Class{Deadline: &Deadline{TTFT: d(time.Second), Pace: d(60 * ms)}, Objective: 0.95}
	batch := &Class{E2E: d(300 * time.Second), Objective: 0.9}
	smooth := &Class{ITL: &ITLBound{Max: d(100 * ms), AllowedFraction: 0.25}, Objective: 0.99}
	strictITL := &Class{ITL: &ITLBound{Max: d(100 * ms)}, Objective: 0.99}
	all := &Class{
		TTFT: d(100 * ms), TPOT: d(10 * ms), E2E: d(200 * ms),
		ITL:       &ITLBound{Max: d(20 * ms)},
		Deadline:  &Deadline{TTFT: d(100 * ms), Pace: d(10 * ms)},
		Objective: 0.9,
	}
	outcome := func(o meter.Outcome) *meter.Record {
		return with(stream(100*ms, 20*ms), func(r *meter.Record) { r.Outcome = o })
	}
	cases := []struct {
		name string
		rec  *meter.Record
		c    *Class
		want Reasons
	}{
		{"interactive good", stream(200*ms, 40*ms, 40*ms), interactive, 0},
		{"ttft equal to bound holds (inclusive)", stream(500*ms, 50*ms), interactive, 0},
		{"ttft 1ns over", stream(500*ms+1, 50*ms), interactive, reasons(reasonTTFT)},
		{"tpot equal to bound holds", stream(100*ms, 50*ms, 50*ms), interactive, 0},
		{"tpot over", stream(100*ms, 50*ms, 51*ms), interactive, reasons(reasonTPOT)},
		{"e2e over", stream(100*ms, 60*time.Second), interactive, reasons(reasonTPOT, reasonE2E)},
		{"e2e equal holds", with(stream(100*ms), func(r *meter.Record) { r.E2E = 60 * time.Second }), interactive, 0},

		// 1-token outputs: TPOT is undefined and counts as 0.
		{"1-token output, TPOT undefined", stream(300 * ms), interactive, 0},
		{"1-token output with TPOT 0", with(stream(300*ms), func(r *meter.Record) { r.TPOT = 0 }), interactive, 0},
		{"1-token output late first token", stream(600 * ms), interactive, reasons(reasonTTFT)},
		{"1-token output meets a deadline", stream(time.Second), reader, 0},

		{"deadline: early tokens bank slack", stream(200*ms, 500*ms, 10*ms), reader, 0},
		{"deadline: token 3 late by 1ns", stream(time.Second, 60*ms, 60*ms+1), reader, reasons(reasonDeadline)},
		{"deadline: first token late", stream(time.Second+ms, 1*ms), reader, reasons(reasonDeadline)},
		{"deadline exactly on time", stream(time.Second, 60*ms, 60*ms, 60*ms), reader, 0},

		{"batch good slow", stream(10*time.Second, 100*time.Second), batch, 0},
		{"batch e2e over", stream(10*time.Second, 291*time.Second), batch, reasons(reasonE2E)},

		{"itl 1 of 4 gaps over, 25% allowed", stream(0, 10*ms, 200*ms, 10*ms, 10*ms), smooth, 0},
		{"itl 2 of 4 gaps over", stream(0, 10*ms, 200*ms, 200*ms, 10*ms), smooth, reasons(reasonITL)},
		{"itl gap equal to max holds", stream(0, 100*ms, 100*ms), strictITL, 0},
		{"itl no gap allowed over", stream(0, 100*ms, 101*ms), strictITL, reasons(reasonITL)},
		{"itl no gaps at all", stream(0), strictITL, 0},

		{"client abort", outcome(meter.OutcomeClientAbort), batch, reasons(reasonAborted)},
		{"rate limited", outcome(meter.OutcomeRateLimited), batch, reasons(reasonRateLimited)},
		{"upstream error", outcome(meter.OutcomeUpstreamError), batch, reasons(reasonError)},
		{"client error", outcome(meter.OutcomeClientError), batch, reasons(reasonError)},
		{"timeout", outcome(meter.OutcomeTimeout), batch, reasons(reasonError)},
		{"unauthorized", outcome(meter.OutcomeUnauthorized), batch, reasons(reasonError)},
		{"rejected", outcome(meter.OutcomeRejected), batch, reasons(reasonError)},
		{"failure with nil class", outcome(meter.OutcomeTimeout), nil, reasons(reasonError)},
		{"ok with nil class", stream(time.Hour), nil, 0},

		{"abort after a late first token carries both reasons",
			with(stream(3*time.Second, 10*ms), func(r *meter.Record) { r.Outcome = meter.OutcomeClientAbort }),
			interactive, reasons(reasonAborted, reasonTTFT)},
		{"client left after waiting longer than the ttft bound for a token that never came",
			&meter.Record{Outcome: meter.OutcomeClientAbort, Status: meter.StatusClientClosed, TTFT: meter.Unknown, E2E: 800 * ms, TPOT: meter.Unknown},
			interactive, reasons(reasonAborted, reasonTTFT)},
		{"client left before any token, within the ttft bound",
			&meter.Record{Outcome: meter.OutcomeClientAbort, Status: meter.StatusClientClosed, TTFT: meter.Unknown, E2E: 300 * ms, TPOT: meter.Unknown},
			interactive, reasons(reasonAborted)},
		{"client left before any token, past the deadline's first token",
			&meter.Record{Outcome: meter.OutcomeClientAbort, TTFT: meter.Unknown, E2E: 1500 * ms, TPOT: meter.Unknown},
			reader, reasons(reasonAborted, reasonDeadline)},
		{"rate limited: unknown measures add nothing",
			&meter.Record{Outcome: meter.OutcomeRateLimited, TTFT: meter.Unknown, E2E: meter.Unknown, TPOT: meter.Unknown, ISL: meter.Unknown, OSL: meter.Unknown},
			all, reasons(reasonRateLimited)},
		{"ok without any timing misses every bound it cannot show",
			&meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, E2E: meter.Unknown, TPOT: meter.Unknown},
			all, reasons(reasonTTFT, reasonDeadline, reasonE2E)},
		{"non-streamed: E2E stands in for TTFT",
			&meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, E2E: 400 * ms, TPOT: 5 * ms, OSL: 50, Events: meter.Unknown},
			interactive, 0},
		{"non-streamed slow body misses ttft",
			&meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, E2E: 700 * ms, TPOT: 5 * ms, OSL: 50, Events: meter.Unknown},
			interactive, reasons(reasonTTFT)},
		{"non-streamed without a count: TPOT bounds nothing",
			&meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, E2E: 400 * ms, TPOT: meter.Unknown, OSL: meter.Unknown, ISL: meter.Unknown, Events: meter.Unknown},
			interactive, 0},
		{"a stream without a count misses the TPOT it cannot show",
			with(stream(100*ms, 20*ms, 20*ms), func(r *meter.Record) { r.OSL, r.TPOT = meter.Unknown, meter.Unknown }),
			interactive, reasons(reasonTPOT)},
		{"a stream without a token event or a count holds TPOT (undefined: 0)",
			&meter.Record{Outcome: meter.OutcomeOK, TTFT: meter.Unknown, E2E: 100 * ms, TPOT: meter.Unknown, OSL: meter.Unknown, ISL: meter.Unknown, Events: 0},
			interactive, 0},
		{"a stream of one token event without a count holds TPOT",
			with(stream(100*ms), func(r *meter.Record) { r.OSL, r.TPOT = meter.Unknown, meter.Unknown }),
			interactive, 0},
		{"a stream of one token holds TPOT",
			with(stream(100*ms, 20*ms), func(r *meter.Record) { r.OSL, r.TPOT = 1, meter.Unknown }),
			interactive, 0},
		{"every latency reason at once",
			stream(150*ms, 30*ms, 30*ms), all,
			reasons(reasonTTFT, reasonTPOT, reasonITL, reasonDeadline, reasonE2E)},
		{"every latency reason plus the outcome",
			with(stream(150*ms, 30*ms, 30*ms), func(r *meter.Record) { r.Outcome = meter.OutcomeUpstreamError }), all,
			reasons(reasonTTFT, reasonTPOT, reasonITL, reasonDeadline, reasonE2E, reasonError)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.rec, tc.c)
			if v.Reasons != tc.want {
				t.Fatalf("reasons = %q, want %q", v.Reasons, tc.want)
			}
			if v.Good != (tc.want == 0) {
				t.Fatalf("good = %v with reasons %q", v.Good, v.Reasons)
			}
			if tc.rec.Outcome != meter.OutcomeOK && v.Good {
				t.Fatal("a failed request was judged good")
			}
		})
	}
}

func TestJudgeITLFractionRounding(t *testing.T) {
	// 29 of 100 gaps over with 0.29 allowed: 0.29·100 is 28.999… in
	// floating point, but 29/100 ≤ 0.29 holds.
	gaps := make([]time.Duration, 100)
	for i := range gaps {
		gaps[i] = 10 * ms
		if i < 29 {
			gaps[i] = 200 * ms
		}
	}
	c := &Class{ITL: &ITLBound{Max: d(100 * ms), AllowedFraction: 0.29}, Objective: 0.9}
	v := judge(stream(0, gaps...), c)
	if !v.Good || v.ITLOver != 29 {
		t.Fatalf("29/100 over with 0.29 allowed: good=%v over=%d", v.Good, v.ITLOver)
	}
	gaps[29] = 200 * ms
	if v := judge(stream(0, gaps...), c); v.Good || v.ITLOver != 30 {
		t.Fatalf("30/100 over with 0.29 allowed: good=%v over=%d", v.Good, v.ITLOver)
	}
}

// TPOT is judged exactly, inclusive: a record's TPOT is (E2E − TTFT) /
// (OSL − 1) truncated to the nanosecond, and a pace over the bound by less
// than a nanosecond passed: 100,000,001 ns over 2 paces is 50,000,000.5 ns
// a token, over a 50 ms bound (vLLM's goodput, in floating point, counts
// it a miss); exactly 50 ms a token holds.
func TestJudgeTPOTExact(t *testing.T) {
	c := &Class{TPOT: d(50 * ms), Objective: 0.9}
	for _, tc := range []struct {
		since time.Duration // E2E − TTFT over two paces (OSL 3)
		good  bool
	}{{100 * ms, true}, {100*ms - 1, true}, {100*ms + 1, false}, {100*ms + 2, false}} {
		r := stream(100*ms, 50*ms, tc.since-50*ms)
		if v := judge(r, c); v.Good != tc.good {
			t.Errorf("E2E − TTFT %v over OSL 3 (TPOT %v as the record has it): good %v, want %v", tc.since, r.TPOT, v.Good, tc.good)
		}
	}
}

func TestDeadlineLateness(t *testing.T) {
	a, p := time.Second, 100*ms
	cases := []struct {
		name string
		rec  *meter.Record
		want time.Duration
	}{
		{"all early", stream(500*ms, 100*ms, 100*ms), 0},
		{"first late", stream(1200*ms, 10*ms), 200 * ms},
		// tokens at 0.5, 1.6, 1.7: due 1.0, 1.1, 1.2: lateness 0.5 (token 2).
		{"stall after banked slack", stream(500*ms, 1100*ms, 100*ms), 500 * ms},
		// tokens at 0.9, 1.0, 1.5, 1.55: due 1.0, 1.1, 1.2, 1.3: max(1.5-1.2, 1.55-1.3) = 0.3.
		{"max over tokens", stream(900*ms, 100*ms, 500*ms, 50*ms), 300 * ms},
		{"per-event counts: event 2 carries tokens 2..5 at 1.05",
			with(stream(900*ms, 150*ms, 100*ms), func(r *meter.Record) { r.TokensPerEvent = []int{1, 4, 1} }),
			// event times 0.9, 1.05, 1.15; first tokens 1, 2, 6: due 1.0, 1.1, 1.5.
			0},
		{"per-event counts: many tokens then a late event",
			with(stream(900*ms, 150*ms, 500*ms), func(r *meter.Record) { r.TokensPerEvent = []int{1, 2, 1} }),
			// event times 0.9, 1.05, 1.55; first tokens 1, 2, 4: due 1.0, 1.1, 1.3.
			250 * ms},
		{"role-only first chunk carries no token",
			with(stream(50*ms, 1100*ms, 50*ms), func(r *meter.Record) { r.TokensPerEvent = []int{0, 1, 1} }),
			// the first real token at 1.15 is token 1, due 1.0.
			150 * ms},
		{"role-only first chunk without counts carries no token either",
			with(stream(50*ms, 1100*ms, 50*ms), func(r *meter.Record) { r.TTFTContent, r.LeadEvents = 1150*ms, 1 }),
			// events at 0.05 (no content), 1.15, 1.2: tokens 1 and 2, due 1.0 and 1.1.
			150 * ms},
		{"two events before the content, then a late token",
			with(stream(20*ms, 10*ms, 990*ms, 300*ms), func(r *meter.Record) { r.TTFTContent, r.LeadEvents = 1020*ms, 2 }),
			// events at 0.02, 0.03 (no content), 1.02, 1.32: due 1.0, 1.1.
			220 * ms},
		{"the role chunk read with the first content: one time, still no token",
			with(stream(1000*ms, 0, 150*ms), func(r *meter.Record) { r.LeadEvents = 1 }),
			// events at 1.0 (role), 1.0, 1.15: tokens 1 and 2, due 1.0 and 1.1.
			50 * ms},
		{"counts that do not match the events are ignored",
			with(stream(900*ms, 150*ms, 500*ms), func(r *meter.Record) { r.TokensPerEvent = []int{1, 2} }),
			// one token per event: due 1.0, 1.1, 1.2 for 0.9, 1.05, 1.55.
			350 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, known := deadlineLateness(tc.rec, firstToken(tc.rec), a, p)
			if !known || got != tc.want {
				t.Fatalf("lateness = %v (known %v), want %v", got, known, tc.want)
			}
			c := &Class{Deadline: &Deadline{TTFT: d(a), Pace: d(p)}, Objective: 0.9}
			v := judge(tc.rec, c)
			if v.Lateness != tc.want || v.Reasons.has(reasonDeadline) != (tc.want > 0) {
				t.Fatalf("Judge: lateness %v reasons %q", v.Lateness, v.Reasons)
			}
		})
	}
	failed := &meter.Record{Outcome: meter.OutcomeTimeout, TTFT: meter.Unknown, E2E: 5 * time.Second}
	if _, known := deadlineLateness(failed, firstToken(failed), a, p); known {
		t.Fatal("a failed record without a first token has no lateness")
	}
}

// Delaying tokens — for example to even out the gaps of a bursty stream —
// can never turn a deadline miss into a pass, though it can improve ITL.
func TestDeadlineDelayNeverHelps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := &Class{Deadline: &Deadline{TTFT: d(500 * ms), Pace: d(40 * ms)}, Objective: 0.9}
	smoothed := 0
	for iter := 0; iter < 3000; iter++ {
		n := 1 + rng.IntN(60)
		// A bursty schedule: token times t_1 < t_2 < … (ns).
		times := make([]time.Duration, n)
		t0 := time.Duration(rng.Int64N(int64(800 * ms)))
		times[0] = t0
		for i := 1; i < n; i++ {
			g := time.Duration(rng.ExpFloat64() * float64(35*ms))
			if rng.IntN(10) == 0 {
				g += time.Duration(rng.Int64N(int64(400 * ms))) // stall
			}
			times[i] = times[i-1] + g
		}
		orig := fromTimes(times)
		base := judge(orig, c)

		// Even out: uniform gaps g' from t'_1 = t_1, with g' just large
		// enough that no token arrives earlier than it did.
		var g time.Duration
		for i := 1; i < n; i++ {
			g = max(g, (times[i]-times[0]+time.Duration(i)-1)/time.Duration(i))
		}
		even := make([]time.Duration, n)
		for i := range even {
			even[i] = times[0] + time.Duration(i)*g
			if even[i] < times[i] {
				t.Fatalf("evened token %d earlier than original", i)
			}
		}
		ev := judge(fromTimes(even), c)
		if !base.Good && ev.Good {
			t.Fatalf("iter %d: evening out turned a deadline miss into a pass: %v -> %v", iter, times, even)
		}
		if ev.Lateness < base.Lateness {
			t.Fatalf("iter %d: lateness fell from %v to %v after delaying tokens", iter, base.Lateness, ev.Lateness)
		}
		if maxGap(even) < maxGap(times) {
			smoothed++
		}

		// Any random delay, too.
		delayed := make([]time.Duration, n)
		var shift time.Duration
		for i := range times {
			shift += time.Duration(rng.Int64N(int64(20 * ms)))
			delayed[i] = times[i] + shift
		}
		if dl := judge(fromTimes(delayed), c); dl.Lateness < base.Lateness || (!base.Good && dl.Good) {
			t.Fatalf("iter %d: a delayed stream did better: %v vs %v", iter, dl.Lateness, base.Lateness)
		}
	}
	if smoothed == 0 {
		t.Fatal("the property test never smoothed a stream: it tests nothing")
	}
}

func fromTimes(ts []time.Duration) *meter.Record {
	gaps := make([]time.Duration, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		gaps[i-1] = ts[i] - ts[i-1]
	}
	return stream(ts[0], gaps...)
}

func maxGap(ts []time.Duration) time.Duration {
	var m time.Duration
	for i := 1; i < len(ts); i++ {
		m = max(m, ts[i]-ts[i-1])
	}
	return m
}

func TestReasonsFormatting(t *testing.T) {
	rs := reasons(reasonTTFT, reasonE2E, reasonRateLimited)
	if got := rs.String(); got != "ttft,e2e,rate_limited" {
		t.Fatalf("String = %q", got)
	}
	if got := string(rs.appendJSON(nil)); got != `["ttft","e2e","rate_limited"]` {
		t.Fatalf("AppendJSON = %s", got)
	}
	if got := string(Reasons(0).appendJSON(nil)); got != `[]` {
		t.Fatalf("empty AppendJSON = %s", got)
	}
	if rs.Len() != 3 || !rs.has(reasonE2E) || rs.has(reasonTPOT) {
		t.Fatal("Len/Has wrong")
	}
	names := []string{}
	for _, r := range AllReasons() {
		names = append(names, r.String())
	}
	want := "ttft tpot itl deadline e2e error aborted rate_limited"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("reasons = %q, want %q", got, want)
	}
}

func TestJudgeDoesNotAllocate(t *testing.T) {
	c := &Class{
		TTFT: d(100 * ms), TPOT: d(10 * ms), E2E: d(200 * ms),
		ITL:       &ITLBound{Max: d(20 * ms), AllowedFraction: 0.1},
		Deadline:  &Deadline{TTFT: d(100 * ms), Pace: d(10 * ms)},
		Objective: 0.9,
	}
	rec := benchRecord(256)
	if n := testenv.AllocsPerRun(100, func() { _ = judge(rec, c) }); n != 0 {
		t.Fatalf("Judge allocates %v times per call", n)
	}
}

func benchRecord(events int) *meter.Record {
	rng := rand.New(rand.NewPCG(3, 4))
	gaps := make([]time.Duration, events-1)
	for i := range gaps {
		gaps[i] = time.Duration(5e6 + rng.Int64N(30e6))
	}
	r := stream(250*ms, gaps...)
	r.ISL = 1200
	return r
}

func BenchmarkJudge(b *testing.B) {
	c := &Class{
		TTFT: d(500 * ms), TPOT: d(50 * ms), E2E: d(60 * time.Second),
		ITL:       &ITLBound{Max: d(100 * ms), AllowedFraction: 0.01},
		Deadline:  &Deadline{TTFT: d(time.Second), Pace: d(60 * ms)},
		Objective: 0.99,
	}
	rec := benchRecord(256)
	b.ReportAllocs()
	for b.Loop() {
		_ = judge(rec, c)
	}
}

// MEASURES, "The verdict": a failed request also carries the latency
// reasons its partial figures prove. A request that ended without a token
// after waiting longer than the TTFT bound proves that bound broken whatever
// ended it: a client that left, the gateway's timeout (first_token, or a
// queued request cut at shutdown), an engine error, a refusal after a wait
// in the limits queue. So does the deadline's first-token time. A shorter
// wait proves nothing, and a token that came in time is judged by its TTFT.
func TestJudgeFailedWithoutTokenProvesTTFT(t *testing.T) {
	ttft := &Class{TTFT: d(500 * ms), Objective: 0.99}
	deadline := &Class{Deadline: &Deadline{TTFT: d(500 * ms), Pace: d(50 * ms)}, Objective: 0.99}
	failed := func(o meter.Outcome, status int, firstToken, e2e time.Duration) *meter.Record {
		rec := &meter.Record{}
		rec.Reset()
		rec.Tenant, rec.Model, rec.Route, rec.Outcome, rec.Status = "acme", "m", "chat", o, status
		rec.TTFT, rec.E2E = firstToken, e2e
		return rec
	}
	outcomes := []struct {
		o      meter.Outcome
		status int
		reason string
	}{
		{meter.OutcomeClientAbort, 200, "aborted"},
		{meter.OutcomeTimeout, 504, "error"},
		{meter.OutcomeUpstreamError, 502, "error"},
		{meter.OutcomeUpstreamError, 500, "error"},
		{meter.OutcomeRateLimited, 429, "rate_limited"},
		{meter.OutcomeClientError, 400, "error"},
	}
	for _, o := range outcomes {
		for _, c := range []struct {
			name     string
			class    *Class
			rec      *meter.Record
			reasons  string
			lateness time.Duration
		}{
			{"2 s without a token", ttft, failed(o.o, o.status, meter.Unknown, 2*time.Second), "ttft," + o.reason, 0},
			{"300 ms without a token", ttft, failed(o.o, o.status, meter.Unknown, 300*ms), o.reason, 0},
			{"a token at 100 ms, ended at 2 s", ttft, failed(o.o, o.status, 100*ms, 2*time.Second), o.reason, 0},
			{"E2E unknown", ttft, failed(o.o, o.status, meter.Unknown, meter.Unknown), o.reason, 0},
			{"deadline: 2 s without a token", deadline, failed(o.o, o.status, meter.Unknown, 2*time.Second), "deadline," + o.reason, 1500 * ms},
			{"deadline: 300 ms without a token", deadline, failed(o.o, o.status, meter.Unknown, 300*ms), o.reason, 0},
		} {
			v := judge(c.rec, c.class)
			if v.Reasons.String() != c.reasons || v.Lateness != c.lateness || v.Good {
				t.Errorf("%s %d, %s: reasons %q lateness %v, want %q lateness %v", o.o, o.status, c.name, v.Reasons, v.Lateness, c.reasons, c.lateness)
			}
		}
	}
}
