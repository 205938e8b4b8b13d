package compare

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/compare/comparetest"
)

// A result as goodput bench writes it (its own Result type and JSON):
// start times from the run's start (the first is 0), a failed request
// never sent, and its SLO and arrival process in goodput_bench.
func TestGoodputBenchResult(t *testing.T) {
	reqs := comparetest.Draw(comparetest.Chat, 2)[:50]
	n := len(reqs) + 1
	r := &bench.Result{
		Backend: "openai-chat", Label: "chat", NumPrompts: n, RequestRate: bench.Rate(2), Burstiness: 1,
		Completed: len(reqs), Failed: 1, Duration: 30,
		InputLens: make([]int, n), OutputLens: make([]int, n), TTFTs: make([]float64, n), ITLs: make([][]float64, n),
		Latencies: make([]float64, n), StartTimes: make([]float64, n), QueueTimes: make([]float64, n), Errors: make([]string, n),
		Goodput: &bench.Extra{SLO: "ttft:100 tpot:25", Arrival: bench.ArrivalInfo{Loop: "open", Rate: bench.Rate(2), Burstiness: 1}},
	}
	t0 := reqs[0].Start
	for i, q := range reqs {
		r.InputLens[i], r.OutputLens[i] = q.ISL, q.OSL
		r.TTFTs[i], r.ITLs[i], r.Latencies[i] = q.TTFT, q.Gaps, q.E2E()
		r.StartTimes[i] = q.Start - t0
	}
	r.InputLens[n-1], r.ITLs[n-1], r.Errors[n-1] = 300, []float64{}, "never sent: the run ended"
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadBench("goodput-bench.json", b, BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != len(reqs) || float64(s.Failed) != 1 {
		t.Errorf("%d completed, %v failed", s.Requests, s.Failed)
	}
	if s.OwnSLO == nil || *s.OwnSLO != (SLO{TTFT: 100, TPOT: 25}) {
		t.Errorf("own SLO %+v, want goodput_bench's ttft:100 tpot:25", s.OwnSLO)
	}
	// The first request, sent at 0, counts; the one never sent does not.
	want := float64(len(reqs)-1) / (reqs[len(reqs)-1].Start - t0)
	if got := float64(s.ArrivalRate); math.Abs(got-want) > 1e-9 {
		t.Errorf("rate %v, want %v over %d arrivals from 0", got, want, len(reqs))
	}
	if s.ISL.Count() != Num(len(reqs)) || strings.Contains(strings.Join(s.Notes, " "), "closed-loop") {
		t.Errorf("ISL count %v, notes %q", s.ISL.Count(), s.Notes)
	}
}
