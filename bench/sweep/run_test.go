package sweep

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/bench/workload"
	"github.com/goodput/goodput/sim"
)

func stats(median, p99 float64) *bench.Stats {
	return &bench.Stats{Mean: median, Median: median, Percentiles: []bench.Percentile{{P: 50, Value: median}, {P: 90, Value: p99 * 0.9}, {P: 99, Value: p99}}}
}

func TestStepOf(t *testing.T) {
	gp := 6.0
	withSLO := &bench.Result{
		Completed: 18, Failed: 2, Duration: 2, RequestThroughput: 9, OutputThroughput: 900, RequestGoodput: &gp,
		Metrics: map[string]*bench.Stats{bench.MetricTTFT: stats(20, 80), bench.MetricITL: stats(5, 9), bench.MetricTPOT: stats(6, 7), bench.MetricE2EL: stats(500, 700)},
		Goodput: &bench.Extra{SLO: "ttft:50", GoodRequests: 12, GoodOutputThroughput: 600},
	}
	st := StepOf(RequestRate, 10, withSLO)
	want := Step{Kind: RequestRate, Load: 10, Completed: 18, Failed: 2, Duration: 2, RequestThroughput: 9, OutputThroughput: 900,
		RequestGoodput: 6, GoodOutputThroughput: 600, Good: 12, Attainment: 0.6,
		TTFT: Pct{20, 80}, ITL: Pct{5, 9}, TPOT: Pct{6, 7}, E2EL: Pct{500, 700}}
	if st != want {
		t.Errorf("with an SLO:\n got %+v\nwant %+v", st, want)
	}

	// Without an SLO every successful request is good: goodput is the
	// throughput, good tokens all output tokens, attainment the success
	// ratio.
	noSLO := *withSLO
	noSLO.RequestGoodput = nil
	noSLO.Goodput = &bench.Extra{SLO: "none"}
	st = StepOf(MaxConcurrency, 4, &noSLO)
	if st.RequestGoodput.Known() || st.Goodput() != 9 || st.Good != 18 || st.Attainment != 0.9 || st.GoodOutputThroughput != 900 {
		t.Errorf("without an SLO: %+v", st)
	}

	// A file vllm bench serve wrote: no goodput_bench, so no good tokens;
	// good requests from request_goodput × duration.
	vllm := *withSLO
	vllm.Goodput = nil
	st = StepOf(RequestRate, 10, &vllm)
	if st.Good != 12 || st.GoodOutputThroughput.Known() || st.Attainment != 0.6 {
		t.Errorf("a vLLM result: %+v", st)
	}

	// Nothing completed: latencies unknown, attainment 0.
	empty := &bench.Result{Failed: 5, Duration: 1, Metrics: map[string]*bench.Stats{bench.MetricTTFT: stats(0, 0)}}
	st = StepOf(RequestRate, 1, empty)
	if st.TTFT.P50.Known() || st.Attainment != 0 || st.Goodput() != 0 {
		t.Errorf("an empty step: %+v", st)
	}
	// A step that did not run.
	st = StepOf(RequestRate, 1, nil)
	if st.Error == "" || st.Attainment.Known() || st.RequestGoodput.Known() {
		t.Errorf("a step that did not run: %+v", st)
	}
}

func TestRunRefusesContradictions(t *testing.T) {
	l := func(s string) Ladder {
		x, err := ParseLadder(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, tc := range []struct {
		ladder  Ladder
		arrival bench.Arrival
		want    string
	}{
		{Ladder{Kind: RequestRate}, bench.Arrival{}, "no steps"},
		{l("request-rate=1,2"), bench.Arrival{Concurrency: 4}, "open loop"},
		{l("max-concurrency=1,2"), bench.Arrival{Concurrency: 4}, "open loop"},
		{l("request-rate=1,2"), bench.Arrival{Offsets: []time.Duration{0}}, "offsets"},
		{l("concurrency=1,2"), bench.Arrival{Rate: 4}, "closed loop"},
		{l("concurrency=1,2"), bench.Arrival{MaxConcurrency: 4}, "closed loop"},
		{Ladder{Kind: "bogus", Values: []Load{1}}, bench.Arrival{}, "unknown sweep kind"},
	} {
		res, err := Run(context.Background(), Options{Bench: bench.Options{BaseURL: "http://127.0.0.1:1", Arrival: tc.arrival}, Ladder: tc.ladder})
		if res != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %+v: %v, %v; want an error saying %q", tc.ladder, tc.arrival, res, err, tc.want)
		}
	}
	// A server that is not there: the first step fails, and so the sweep.
	ladder := l("request-rate=1,2")
	res, err := Run(context.Background(), Options{Bench: bench.Options{BaseURL: "http://127.0.0.1:1", Requests: []bench.Request{{Prompt: "x", MaxTokens: 1}}}, Ladder: ladder})
	if res != nil || err == nil {
		t.Errorf("no server: %v, %v", res, err)
	}
}

// Each kind of ladder sets its own part of the arrival process, and every
// step sends the same requests.
func TestRunSetsTheStepsLoad(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{MaxTraces: -1})
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	reqs, isl := sweepRequests(6, 3)
	for _, tc := range []struct {
		ladder string
		base   bench.Arrival
		check  func(a bench.ArrivalInfo, v Load) bool
	}{
		{"request-rate=200,inf", bench.Arrival{Burstiness: 2, MaxConcurrency: 3}, func(a bench.ArrivalInfo, v Load) bool {
			return a.Loop == "open" && float64(a.Rate) == float64(v) && a.Burstiness == 2 && a.MaxConcurrency == 3
		}},
		{"max-concurrency=1,3", bench.Arrival{}, func(a bench.ArrivalInfo, v Load) bool {
			return a.Loop == "open" && math.IsInf(float64(a.Rate), 1) && a.MaxConcurrency == int(v)
		}},
		{"concurrency=1,2", bench.Arrival{}, func(a bench.ArrivalInfo, v Load) bool { return a.Loop == "closed" && a.Concurrency == int(v) }},
	} {
		ladder, err := ParseLadder(tc.ladder)
		if err != nil {
			t.Fatal(err)
		}
		var seen []int
		res, err := Run(context.Background(), Options{
			Bench:  bench.Options{BaseURL: "http://" + ln.Addr().String(), Requests: reqs, Arrival: tc.base, Warmup: 1},
			Ladder: ladder,
			OnStep: func(i int, _ *Step, _ *bench.Result) { seen = append(seen, i) },
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.ladder, err)
		}
		if len(res.Steps) != 2 || len(res.Results) != 2 || len(seen) != 2 || res.Ladder != ladder.String() {
			t.Fatalf("%s: %d steps, %d results, OnStep %v", tc.ladder, len(res.Steps), len(res.Results), seen)
		}
		for i, r := range res.Results {
			if !tc.check(r.Goodput.Arrival, ladder.Values[i]) {
				t.Errorf("%s step %d: arrival %+v", tc.ladder, i, r.Goodput.Arrival)
			}
			if r.Completed != 6 || r.Goodput.ISLMean != float64(isl) || r.Goodput.Warmup == nil || r.Goodput.Warmup.Completed != 1 {
				t.Errorf("%s step %d: %d completed, ISL %v, warm-up %+v", tc.ladder, i, r.Completed, r.Goodput.ISLMean, r.Goodput.Warmup)
			}
		}
		if !strings.Contains(res.Label, "ISL "+Load(isl).String()+" (mean)") || !strings.Contains(res.Label, "no SLO") {
			t.Errorf("%s: label %q", tc.ladder, res.Label)
		}
	}
}

func TestLabel(t *testing.T) {
	o := Options{
		Bench: bench.Options{Label: bench.Label{Engine: "vllm", TP: "2"}, Goodput: bench.SLO{TTFT: 200 * time.Millisecond}, Arrival: bench.Arrival{MaxConcurrency: 8}},
		Rule:  Rule{Objective: 0.99},
	}
	o.Ladder, _ = ParseLadder("request-rate=1,2,inf")
	res := &Result{Results: []*bench.Result{
		{Completed: 1, Goodput: &bench.Extra{ISLMean: 100, OSLMean: 50}},
		nil,
		{Completed: 1, Goodput: &bench.Extra{ISLMean: 120, OSLMean: 50.2}},
	}}
	got := Label(&o, res).String()
	want := "engine vllm · version unknown · precision unknown · gpus unknown · tp 2 · ISL 100 to 120 (mean, by step) · OSL 50 (mean) · " +
		"open loop, request-rate 1 to inf in 3 steps, burstiness 1, max concurrency 8 · percentile p50, p99 · goodput SLO ttft:200 ms, objective 99%"
	if got != want {
		t.Errorf("label\n got %q\nwant %q", got, want)
	}
	// A max-concurrency sweep of a profile at its own rate says so.
	w, err := workload.FromFlags("chat", "", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	o.Bench.Workload, o.Bench.Arrival = w, bench.Arrival{}
	o.Ladder, _ = ParseLadder("max-concurrency=2,4")
	res.Results = []*bench.Result{nil, {Completed: 1, Goodput: &bench.Extra{Arrival: bench.ArrivalInfo{Source: "workload", Rate: 3.5, Burstiness: 0.4}}}}
	if got := Label(&o, res).Load; got != "open loop, max concurrency 2 to 4 in 2 steps, request-rate the profile's, 3.5 req/s, burstiness 0.4" {
		t.Errorf("a profile's own rate: %q", got)
	}
	res.Results[1].Goodput.Arrival = bench.ArrivalInfo{Source: "flags", Rate: bench.Rate(math.Inf(1))}
	if got := Label(&o, res).Load; got != "open loop, max concurrency 2 to 4 in 2 steps, request-rate inf" {
		t.Errorf("a shape without a rate: %q", got)
	}
	o.Ladder, _ = ParseLadder("concurrency=4")
	o.Bench.Goodput, o.Rule = bench.SLO{}, Rule{}
	got = Label(&o, &Result{}).String()
	for _, w := range []string{"ISL unknown", "OSL unknown", "closed loop, concurrency 4 ·", "goodput no SLO (every successful request is good), no attainment objective"} {
		if !strings.Contains(got, w) {
			t.Errorf("label %q lacks %q", got, w)
		}
	}
}

func TestResultFile(t *testing.T) {
	dir := t.TempDir()
	s := sample()
	gp := 2.0
	r := &Result{Sweep: *s, Results: []*bench.Result{{Completed: 3, RequestGoodput: &gp, Metrics: map[string]*bench.Stats{bench.MetricTTFT: stats(10, 20)}}, nil}}
	path := dir + "/s.json"
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Steps) != len(s.Steps) || back.Knee.Index != s.Knee.Index || len(back.Results) != 2 || back.Results[1] != nil ||
		back.Results[0].Completed != 3 || back.Results[0].Metrics[bench.MetricTTFT].Median != 10 {
		t.Fatalf("round trip: %+v", back)
	}
}

// A server that goes away mid-sweep: the steps after it are recorded as
// not run (goodput 0, so the knee at the latest), and the sweep ends
// normally. Ending ctx stops the sweep with what it has.
func TestRunServerGoneAndStopped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{MaxTraces: -1})
	go s.Serve(ln)
	defer s.Shutdown()
	reqs, _ := sweepRequests(4, 2)
	ladder, _ := ParseLadder("concurrency=1,2,4")
	res, err := Run(context.Background(), Options{
		Bench:  bench.Options{BaseURL: "http://" + ln.Addr().String(), Requests: reqs, Timeout: 5 * time.Second},
		Ladder: ladder,
		OnStep: func(i int, _ *Step, _ *bench.Result) {
			if i == 0 {
				s.Shutdown() // closes the listener: nothing answers any more
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 3 || res.Steps[0].Completed != 4 || res.Results[0] == nil {
		t.Fatalf("steps %+v", res.Steps)
	}
	for _, st := range res.Steps[1:] {
		if st.Completed != 0 || st.Error == "" || st.Goodput() != 0 {
			t.Errorf("a step after the server went away: %+v", st)
		}
	}
	if !res.Knee.Found || res.Knee.Index != 1 {
		t.Errorf("knee %d, want step 1 (the server gone): %s", res.Knee.Index, res.Knee.Note)
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s2 := sim.New(sim.Config{MaxTraces: -1})
	go s2.Serve(ln2)
	defer s2.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err = Run(ctx, Options{
		Bench:  bench.Options{BaseURL: "http://" + ln2.Addr().String(), Requests: reqs},
		Ladder: ladder,
		OnStep: func(int, *Step, *bench.Result) { cancel() },
	})
	if err != context.Canceled || res == nil || len(res.Steps) != 1 || res.Steps[0].Completed != 4 {
		t.Fatalf("stopped after step 1: %v, %+v", err, res)
	}
}
