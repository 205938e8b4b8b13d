package sweep

import (
	"bytes"
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/sim"
)

// startBatchingSim serves a batching simulator with cfg on a loopback port.
func startBatchingSim(t testing.TB, cfg sim.BatchConfig) string {
	t.Helper()
	b, err := sim.NewBatching(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{Scheduler: b, MaxTraces: -1})
	go s.Serve(ln)
	t.Cleanup(func() {
		s.Shutdown()
		b.Close()
	})
	return "http://" + ln.Addr().String()
}

// quickEngine is the small-gpu preset made quicker so that a sweep's steps
// take about a second each: a 16-seat batch, 20 ms steps plus 1 ms per
// decoding request. Its capacity for the test's workload is bound by
// max_num_seqs.
func quickEngine() sim.BatchConfig {
	c := sim.Presets["small-gpu"]
	c.MaxNumSeqs, c.MaxNumBatchedTokens = 16, 512
	c.StepBase, c.PrefillPerToken, c.DecodePerSeq = 20*time.Millisecond, 50*time.Microsecond, time.Millisecond
	c.Seed = 7
	return c
}

// sweepRequests are n completions of isl prompt tokens (as the simulator
// counts them) and osl output tokens.
func sweepRequests(n, osl int) ([]bench.Request, int) {
	prompt := strings.TrimSpace(strings.Repeat("word ", 31))
	isl := sim.CompletionPromptTokens(prompt)
	out := make([]bench.Request, n)
	for i := range out {
		out[i] = bench.Request{Prompt: prompt, InputTokens: isl, MaxTokens: osl}
	}
	return out, isl
}

// TestSweepFindsTheSimulatorsKnee is issue 10's done-when test: a sweep
// against the batching simulator, at rates from a quarter to twice the
// capacity its formula predicts, shows goodput flattening and TTFT p99
// climbing, with the knee within one step of the predicted one (the ×1
// step). It logs the predicted and the found knee.
func TestSweepFindsTheSimulatorsKnee(t *testing.T) {
	cfg := quickEngine()
	const osl, n = 8, 64
	reqs, isl := sweepRequests(n, osl)
	capa := cfg.Capacity(isl, osl)
	mults := []float64{0.5, 0.75, 1, 1.25, 1.5, 2}
	const predicted = 2 // the ×1 step
	ladder := Ladder{Kind: RequestRate}
	for _, m := range mults {
		ladder.Values = append(ladder.Values, Load(m*capa.MaxRate))
	}
	// TTFT bound: 2.5 times a prefill step plus a step at the knee. Below
	// the knee a request waits at most about a step for its prefill step;
	// past it the waiting queue grows through the step, and so does TTFT.
	ttftBound := 5 * (capa.IdleTTFT + capa.StepTime) / 2
	url := startBatchingSim(t, cfg)
	start := time.Now()
	res, err := Run(context.Background(), Options{
		Bench: bench.Options{
			BaseURL: url, Endpoint: bench.EndpointCompletions, Requests: reqs, Seed: 1,
			Arrival: bench.Arrival{Burstiness: 1}, Goodput: bench.SLO{TTFT: ttftBound},
			Label: bench.Label{Engine: "goodput sim (batching)", Precision: "simulated", GPUs: "0", TP: "1"},
		},
		Ladder: ladder,
		Rule:   Rule{Objective: 0.9},
		OnStep: func(i int, st *Step, _ *bench.Result) { t.Log(StepLine(st, i, len(ladder.Values))) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep of %d steps took %v", len(res.Steps), time.Since(start).Round(time.Millisecond))
	t.Logf("predicted: %s", strings.ReplaceAll(strings.TrimSpace(capa.String()), "\n", "; "))
	t.Logf("predicted knee: max rate %.1f req/s (step %d, %s); found: %s", capa.MaxRate, predicted+1, ladder.Values[predicted], res.Knee.Note)

	if len(res.Steps) != len(mults) || len(res.Results) != len(mults) {
		t.Fatalf("%d steps, %d results; want %d", len(res.Steps), len(res.Results), len(mults))
	}
	for i, st := range res.Steps {
		if st.Completed != n || st.Failed != 0 {
			t.Fatalf("step %d: %d completed, %d failed: %v", i, st.Completed, st.Failed, res.Results[i].Errors)
		}
		if res.Results[i].Goodput.ISLMean != float64(isl) || res.Results[i].Goodput.OSLMean != osl {
			t.Fatalf("step %d: ISL %v OSL %v, want %d and %d", i, res.Results[i].Goodput.ISLMean, res.Results[i].Goodput.OSLMean, isl, osl)
		}
	}
	if !res.Knee.Found {
		t.Fatalf("no knee found at up to twice the predicted capacity: %s", res.Knee.Note)
	}
	// Where the knee falls, and how steep TTFT and goodput turn, depend on
	// the simulator keeping its step times: strict only on a quiet machine
	// (GOODPUT_TIMING_TESTS=1), else logged.
	check := t.Logf
	if testenv.StrictTiming() {
		check = t.Errorf
	}
	if math.Abs(float64(res.Knee.Index-predicted)) > 1 {
		check("knee at step %d (%s), want within one step of step %d (%s req/s, the predicted max rate)",
			res.Knee.Index+1, res.Knee.Note, predicted+1, ladder.Values[predicted])
	}
	first, last := res.Steps[0], res.Steps[len(res.Steps)-1]
	// TTFT p99 climbs: past the knee the queue grows through the step.
	if !(float64(last.TTFT.P99) > 3*float64(first.TTFT.P99)) {
		check("TTFT p99 %.1f ms at ×%v, %.1f ms at ×%v: not climbing", first.TTFT.P99, mults[0], last.TTFT.P99, mults[len(mults)-1])
	}
	// Goodput flattens: at twice the capacity it is no higher than the
	// best up to ×1 plus a margin, far from twice the ×1 figure.
	best := 0.0
	for _, st := range res.Steps[:predicted+1] {
		best = math.Max(best, st.Goodput())
	}
	if g := last.Goodput(); g > 1.25*best {
		check("goodput %.1f req/s at ×%v against %.1f at most up to ×1: not flattening", g, mults[len(mults)-1], best)
	}
	// Below the knee the service keeps up: goodput near the offered rate.
	if g, offered := first.Goodput(), float64(ladder.Values[0]); g < 0.6*offered {
		check("goodput %.1f req/s at the first step, offered %.1f", g, offered)
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, &res.Sweep); err != nil {
		t.Fatal(err)
	}
	els := parseXML(t, page.Bytes())
	for _, e := range els {
		if e.attrs["id"] == "knee" && e.attrs["data-step"] != itoa(res.Knee.Index) {
			t.Errorf("the page marks step %s, the knee is %d", e.attrs["data-step"], res.Knee.Index)
		}
	}
}

// TestSweepLong runs a longer ladder with more requests per step on the
// small-gpu preset itself (about two minutes).
func TestSweepLong(t *testing.T) {
	testenv.Long(t, "a sweep of 7 steps of 200 requests on the small-gpu preset")
	cfg := sim.Presets["small-gpu"]
	cfg.Seed = 7
	const osl, n = 32, 200
	reqs, isl := sweepRequests(n, osl)
	capa := cfg.Capacity(isl, osl)
	ladder := Ladder{Kind: RequestRate}
	for _, m := range []float64{0.25, 0.5, 0.75, 1, 1.25, 1.5, 2} {
		ladder.Values = append(ladder.Values, Load(m*capa.MaxRate))
	}
	url := startBatchingSim(t, cfg)
	res, err := Run(context.Background(), Options{
		Bench:  bench.Options{BaseURL: url, Requests: reqs, Seed: 1, Goodput: bench.SLO{TTFT: 5 * (capa.IdleTTFT + capa.StepTime)}},
		Ladder: ladder, Rule: Rule{Objective: 0.9},
		OnStep: func(i int, st *Step, _ *bench.Result) { t.Log(StepLine(st, i, len(ladder.Values))) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("predicted knee: max rate %.1f req/s (step 4); found: %s", capa.MaxRate, res.Knee.Note)
	check := t.Logf
	if testenv.StrictTiming() {
		check = t.Errorf
	}
	if !res.Knee.Found || res.Knee.Index < 2 || res.Knee.Index > 4 {
		check("knee at step %d, want within one step of step 4", res.Knee.Index+1)
	}
}

func itoa(i int) string { return Load(i).String() }
