package compare

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// Even gaps read from times rounded to the µs are regular arrivals, not a
// burstiness of hundreds of millions (a review: a log of requests 50 ms
// apart showed k 721,679,522,678); a spread of 1% is still measured.
func TestSetArrivalsRegularDespiteRounding(t *testing.T) {
	even, spread := make([]float64, 200), make([]float64, 200)
	for i := range even {
		jitter := float64(i%3-1) * 1e-6 // ±1 µs of rounding
		even[i] = 1000 + float64(i)*0.05 + jitter
		spread[i] = 1000 + float64(i)*0.05 + float64(i%2)*0.0005 // gaps of 50 ± 0.5 ms
	}
	s := newSide("", "")
	s.setArrivals(even, "")
	if !s.Regular || !math.IsInf(float64(s.Burstiness), 1) {
		t.Errorf("even gaps: regular %v, k %v", s.Regular, s.Burstiness)
	}
	s = newSide("", "")
	s.setArrivals(spread, "")
	if s.Regular || !(s.Burstiness > 1000 && s.Burstiness < 1e5) {
		t.Errorf("gaps spread by 1%%: regular %v, k %v; want k near 10,000", s.Regular, s.Burstiness)
	}
}

// A stream the engine ended with no token in it is ok in a request log
// and failed in vLLM's and goodput bench's results: the real side says how
// many it holds (a probe found the two sides counting it apart unsaid).
func TestRequestLogNotesEmptyStreams(t *testing.T) {
	log := `{"time":"2026-01-01T00:00:00Z","route":"chat","stream":true,"status":200,"outcome":"ok","isl":5,"osl":0,"e2e_ms":12,"events":0}
{"time":"2026-01-01T00:00:01Z","route":"chat","stream":true,"status":200,"outcome":"ok","isl":5,"osl":3,"ttft_ms":10,"e2e_ms":30,"tpot_ms":10,"itl_ms":[10,10],"events":3}
{"time":"2026-01-01T00:00:02Z","route":"chat","stream":false,"status":200,"outcome":"ok","isl":5,"osl":0,"e2e_ms":9}
{"time":"2026-01-01T00:00:03Z","route":"chat","stream":true,"status":200,"outcome":"ok","isl":5,"osl":7,"e2e_ms":9,"events":0}
`
	s, err := ReadRequestLog("r.jsonl", strings.NewReader(log), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := "2 completed streams carried no token event"
	if s.Requests != 4 || !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, want) }) {
		t.Errorf("%d completed, notes %q; want 4 and %q", s.Requests, s.Notes, want)
	}
}
