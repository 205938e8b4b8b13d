package meter

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// longStream meters a stream of events token events (continuous usage: one
// token each, the role chunk first with none) whose gap k is gap(k), and
// returns the record.
func longStream(m *Meter, rec *Record, events int, gap func(k int) time.Duration) {
	m.Start(testT0)
	t := testT0.Add(100 * time.Millisecond)
	for k := 0; k < events; k++ {
		if k > 0 {
			t = t.Add(gap(k))
		}
		info := EventInfo{Token: true, Content: k > 0, HasUsage: true, PromptTokens: 7, CompletionTokens: k}
		m.Observe(&info, t)
	}
	rec.Reset()
	m.Finish(rec)
}

// A stream of more than MaxKeptGaps+1 token events: the record keeps the
// first MaxKeptGaps gaps and summarises the others exactly (count, sum,
// min, max); MaxITL and TPOT are over the whole stream; the log line stays
// bounded and says how many gaps it leaves out.
func TestRecordKeepsFirstGaps(t *testing.T) {
	const extra = 3000
	events := MaxKeptGaps + 1 + extra
	gap := func(k int) time.Duration {
		switch {
		case k == events-5:
			return 900 * time.Millisecond // the stall is late in the stream
		case k%7 == 0:
			return 0 // read together with the previous event
		}
		return time.Duration(1000+k%50) * time.Microsecond
	}
	var (
		m   Meter
		rec Record
	)
	longStream(&m, &rec, events, gap)

	if rec.Events != events || len(rec.ITL) != MaxKeptGaps {
		t.Fatalf("events %d, %d gaps kept; want %d and %d", rec.Events, len(rec.ITL), events, MaxKeptGaps)
	}
	for k, g := range rec.ITL {
		if g != gap(k+1) {
			t.Fatalf("gap %d = %v, want %v", k, g, gap(k+1))
		}
	}
	var sum, minG, maxG time.Duration
	minG = time.Hour
	zero := 0
	for k := MaxKeptGaps + 1; k < events; k++ {
		g := gap(k)
		sum += g
		minG, maxG = min(minG, g), max(maxG, g)
		if g == 0 {
			zero++
		}
	}
	r := &rec.ITLRest
	if r.Count != extra || r.Sum != sum || r.Min != minG || r.Max != maxG || r.Zero != zero {
		t.Fatalf("rest count %d sum %v min %v max %v zero %d; want %d %v %v %v %d", r.Count, r.Sum, r.Min, r.Max, r.Zero, extra, sum, minG, maxG, zero)
	}
	n := r.Zero
	for _, c := range r.Buckets {
		n += int(c)
	}
	if n != extra {
		t.Fatalf("buckets count %d gaps, want %d", n, extra)
	}
	if rec.MaxITL != 900*time.Millisecond {
		t.Fatalf("max itl %v, want the late stall", rec.MaxITL)
	}
	if want := (rec.E2E - rec.TTFT) / time.Duration(rec.OSL-1); rec.OSL != events-1 || rec.TPOT != want {
		t.Fatalf("osl %d tpot %v, want %d and %v", rec.OSL, rec.TPOT, events-1, want)
	}
	if len(rec.TokensPerEvent) != MaxKeptGaps+1 || rec.TokensPerEvent[0] != 0 || rec.TokensPerEvent[MaxKeptGaps] != 1 {
		t.Fatalf("tokens per event: %d entries", len(rec.TokensPerEvent))
	}

	line := rec.AppendJSON(nil)
	var got struct {
		ITL       []float64 `json:"itl_ms"`
		Truncated *int      `json:"itl_truncated"`
		MaxITL    float64   `json:"max_itl_ms"`
		TPE       []int     `json:"tokens_per_event"`
	}
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.ITL) != MaxKeptGaps || got.Truncated == nil || *got.Truncated != extra || got.MaxITL != 900 || len(got.TPE) != MaxKeptGaps+1 {
		t.Fatalf("log line: %d gaps, itl_truncated %v, max %v, %d tokens per event", len(got.ITL), got.Truncated, got.MaxITL, len(got.TPE))
	}
	if len(line) > 80<<10 {
		t.Fatalf("log line of %d bytes", len(line))
	}

	// Ten times longer: the same line length, the same memory.
	longStream(&m, &rec, 10*events, gap)
	if l2 := rec.AppendJSON(nil); len(l2) > len(line)+64 {
		t.Fatalf("log line grew from %d to %d bytes", len(line), len(l2))
	}
	if cap(m.itl) > 2*MaxKeptGaps || cap(m.tpe) > 2*(MaxKeptGaps+1) || cap(rec.ITL) > 2*MaxKeptGaps {
		t.Fatalf("buffers grew past the cap: itl %d, tpe %d, record %d", cap(m.itl), cap(m.tpe), cap(rec.ITL))
	}

	// A short stream after a long one: nothing of the summary is left.
	longStream(&m, &rec, 10, gap)
	if rec.ITLRest.Count != 0 || len(rec.ITLRest.Buckets) != 0 || len(rec.ITL) != 9 {
		t.Fatalf("short stream after a long one: rest %+v, %d gaps", rec.ITLRest.Count, len(rec.ITL))
	}
	if l := rec.AppendJSON(nil); bytes.Contains(l, []byte("itl_truncated")) {
		t.Fatalf("itl_truncated written for a short stream: %s", l)
	}
}

// CountOver is exact for every gap more than GapAccuracy away from the
// limit.
func TestGapSummaryCountOver(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s GapSummary
	var gaps []time.Duration
	for i := 0; i < 20000; i++ {
		// 0 to ~2 s, log-spread, in whole microseconds
		us := int64(rng.ExpFloat64() * float64(rng.IntN(200000)))
		g := time.Duration(us) * time.Microsecond
		gaps = append(gaps, g)
		s.add(g)
	}
	for _, lim := range []time.Duration{0, time.Microsecond, 50 * time.Microsecond, time.Millisecond, 20 * time.Millisecond, 123456 * time.Microsecond, time.Second, time.Hour} {
		exact, near := 0, 0
		for _, g := range gaps {
			if g > lim {
				exact++
			}
			if d := float64(g - lim); d < 0.0101*float64(lim) && d > -0.0101*float64(lim) {
				near++
			}
		}
		got := s.CountOver(lim)
		if diff := got - exact; diff > near || diff < -near {
			t.Errorf("over %v: %d, exactly %d (%d gaps within 1%% of the limit)", lim, got, exact, near)
		}
	}
}
