package compare

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/sweep"
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

// A goodput bench --sweep result is several runs: --bench-run picks the
// step to compare, and without it the error says so (found by a new-user
// probe: "not a benchmark result: none of vLLM bench serve's fields").
func TestGoodputSweepResult(t *testing.T) {
	step := func(completed int) *bench.Result {
		r := &bench.Result{Completed: completed, Duration: 2, Goodput: &bench.Extra{SLO: "none"}}
		for i := 0; i < completed; i++ {
			r.InputLens, r.OutputLens = append(r.InputLens, 100+i), append(r.OutputLens, 10)
			r.TTFTs, r.Latencies = append(r.TTFTs, 0.1), append(r.Latencies, 1)
			r.ITLs, r.StartTimes, r.Errors = append(r.ITLs, []float64{0.1}), append(r.StartTimes, float64(i)/10), append(r.Errors, "")
		}
		return r
	}
	ladder, err := sweep.ParseLadder("request-rate=1,2,4")
	if err != nil {
		t.Fatal(err)
	}
	res := &sweep.Result{Results: []*bench.Result{step(3), nil, step(5)}}
	res.Ladder, res.Kind = ladder.String(), ladder.Kind
	for i, r := range res.Results {
		res.Steps = append(res.Steps, sweep.StepOf(ladder.Kind, ladder.Values[i], r))
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		run  int
		want string
	}{
		{0, "sweep.json: a goodput bench --sweep result (request-rate=1,2,4, 3 steps), not one run: give --bench-run STEP (1 to 3, or -1 the last) to compare one step's run"},
		{2, "sweep.json: step 2 of the sweep (request-rate=1,2,4) could not run: it has no result"},
		{4, "sweep.json: a sweep of 3 steps (request-rate=1,2,4); there is no step 4"},
	} {
		if _, err := ReadBench("sweep.json", b, BenchOptions{Run: c.run}); err == nil || err.Error() != c.want {
			t.Errorf("--bench-run %d: %v, want %q", c.run, err, c.want)
		}
	}
	for run, want := range map[int]int{1: 3, 3: 5, -1: 5} {
		s, err := ReadBench("sweep.json", b, BenchOptions{Run: run})
		if err != nil {
			t.Fatalf("--bench-run %d: %v", run, err)
		}
		note := "a sweep result (request-rate=1,2,4): this is step " + strconv.Itoa(map[int]int{1: 1, 3: 3, -1: 3}[run]) + " of 3"
		if s.Requests != want || !strings.Contains(strings.Join(s.Notes, " "), note) {
			t.Errorf("--bench-run %d: %d requests, notes %q; want %d and %q", run, s.Requests, s.Notes, want, note)
		}
	}
}
