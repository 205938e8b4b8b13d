package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}

func TestPercentileIsNumpyLinear(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {25, 1.75}, {50, 2.5}, {99, 3.97}, {100, 4}} {
		near(t, "percentile", percentile(v, c.p), c.want)
	}
	near(t, "percentile of one", percentile([]float64{7}, 99), 7)
	near(t, "percentile of none", percentile(nil, 99), 0)
}

const ms = time.Millisecond

// fixedOutcomes is a run whose every figure is computed by hand below.
//
//	A: sent at 0,   ISL 10, OSL 4, TTFT 100, gaps 100 100 100 → E2E 400
//	B: sent at 400, ISL 20, OSL 1, TTFT 50, no gap            → E2E 50
//	C: sent at 900, ISL 30, OSL 3, TTFT 200, gaps 100 200     → E2E 500
//	D: failed (HTTP 503)
func fixedOutcomes() []outcome {
	t0 := time.Unix(1000, 0)
	return []outcome{
		{ok: true, send: t0, isl: 10, osl: 4, ttft: 100 * ms, e2e: 400 * ms, itl: []time.Duration{100 * ms, 100 * ms, 100 * ms}},
		{ok: true, send: t0.Add(400 * ms), isl: 20, osl: 1, ttft: 50 * ms, e2e: 50 * ms},
		{ok: true, send: t0.Add(900 * ms), isl: 30, osl: 3, ttft: 200 * ms, e2e: 500 * ms, itl: []time.Duration{100 * ms, 200 * ms}},
		{ok: false, send: t0.Add(950 * ms), isl: meter.Unknown, osl: meter.Unknown, ttft: meter.Unknown, e2e: meter.Unknown, err: "HTTP 503"},
	}
}

func TestCalculateHandComputed(t *testing.T) {
	ps := []float64{50, 99}
	// Bounds ttft ≤ 100 ms and tpot ≤ 150 ms: A is good (its TTFT equals the
	// bound: inclusive), B is good (one output token: TPOT 0), C is not
	// (TTFT 200).
	slo := SLO{TTFT: 100 * ms, TPOT: 150 * ms}
	a := calculate(fixedOutcomes(), []int{11, 21, 31, 41}, 2*time.Second, ps, slo)

	if a.completed != 3 || a.failed != 1 || a.good != 2 {
		t.Fatalf("completed %d failed %d good %d, want 3 1 2", a.completed, a.failed, a.good)
	}
	if a.totalInput != 60 || a.totalOutput != 8 {
		t.Fatalf("tokens in %d out %d, want 60 8", a.totalInput, a.totalOutput)
	}
	near(t, "request_throughput", a.requestThroughput, 1.5)
	near(t, "request_goodput", a.requestGoodput, 1)
	near(t, "output_throughput", a.outputThroughput, 4)
	near(t, "total_token_throughput", a.totalTokenThroughput, 34)
	near(t, "good_output_throughput", a.goodOutputThroughput, 2.5) // (4 + 1) / 2 s
	if g := a.goodFlags; !g[0] || !g[1] || g[2] || g[3] {
		t.Fatalf("good per request %v, want A and B", g)
	}
	// The failed request's input length is the workload's intended one; its
	// output length is 0, as in vLLM.
	if got := a.inputLens; got[0] != 10 || got[3] != 41 {
		t.Fatalf("input lens %v", got)
	}
	if got := a.outputLens; got[0] != 4 || got[1] != 1 || got[2] != 3 || got[3] != 0 {
		t.Fatalf("output lens %v", got)
	}

	check := func(name string, mean, median, std, p50, p99, maxv float64) {
		t.Helper()
		s := a.metrics[name]
		near(t, name+" mean", s.Mean, mean)
		near(t, name+" median", s.Median, median)
		near(t, name+" std", s.Std, std)
		near(t, name+" max", s.Max, maxv)
		v50, _ := s.At(50)
		v99, _ := s.At(99)
		near(t, name+" p50", v50, p50)
		near(t, name+" p99", v99, p99)
	}
	// TTFT 50 100 200: mean 116.67; population std sqrt(((−66.67)²+(−16.67)²+83.33²)/3);
	// p99 at rank 1.98: 100 + 0.98·100.
	check(MetricTTFT, 350.0/3, 100, math.Sqrt((math.Pow(50-350.0/3, 2)+math.Pow(100-350.0/3, 2)+math.Pow(200-350.0/3, 2))/3), 100, 198, 200)
	// TPOT only for OSL > 1: A (400−100)/3 = 100, C (500−200)/2 = 150.
	check(MetricTPOT, 125, 125, 25, 125, 149.5, 150)
	// ITL pooled: 100 100 100 100 200; p99 at rank 3.96: 100 + 0.96·100.
	check(MetricITL, 120, 100, 40, 100, 196, 200)
	// E2EL 50 400 500.
	check(MetricE2EL, 950.0/3, 400, math.Sqrt((math.Pow(50-950.0/3, 2)+math.Pow(400-950.0/3, 2)+math.Pow(500-950.0/3, 2))/3), 400, 498, 500)

	// Tokens (first token at send+TTFT, then each gap): A at 0.1 0.2 0.3
	// 0.4 s, B at 0.45 s, C at 1.1 1.2 1.4 s: 5 in second 0, 3 in second 1.
	// A ends at 0.4 s when B starts: an end counts before a start, so at
	// most one request was in flight.
	near(t, "max_output_tokens_per_s", a.maxOutputTokensPerS, 5)
	if a.maxConcurrentRequests != 1 {
		t.Fatalf("max_concurrent_requests %d, want 1", a.maxConcurrentRequests)
	}
}

func TestCalculateGoodputBounds(t *testing.T) {
	outs := fixedOutcomes()
	for _, c := range []struct {
		slo  SLO
		good int
	}{
		{SLO{}, 0}, // no bounds: no goodput at all
		{SLO{TTFT: 200 * ms}, 3},
		{SLO{TTFT: 199 * ms}, 2},
		{SLO{E2EL: 400 * ms}, 2},                 // A (400, inclusive) and B
		{SLO{TPOT: 100 * ms}, 1},                 // only B (TPOT 0): A's (0.4−0.1)/3 is a hair over 0.1 in floating point, as in vLLM
		{SLO{TTFT: zeroBound}, 0},                // ttft:0
		{SLO{TTFT: 1 * time.Second, TPOT: 1}, 1}, // B only: TPOT 0 ≤ 1 ns
	} {
		a := calculate(outs, nil, time.Second, []float64{99}, c.slo)
		if a.good != c.good {
			t.Errorf("%s: %d good, want %d", c.slo, a.good, c.good)
		}
	}
}

func TestCalculateEmpty(t *testing.T) {
	// Every request failed: vLLM's "values or 0" gives 0 everywhere.
	outs := fixedOutcomes()[3:]
	a := calculate(outs, nil, time.Second, []float64{99}, SLO{})
	if a.completed != 0 || a.failed != 1 {
		t.Fatalf("completed %d failed %d", a.completed, a.failed)
	}
	for _, m := range []string{MetricTTFT, MetricTPOT, MetricITL, MetricE2EL} {
		s := a.metrics[m]
		if v, _ := s.At(99); s.Mean != 0 || s.Median != 0 || s.Std != 0 || v != 0 {
			t.Fatalf("%s: %+v", m, s)
		}
	}
	if a.maxOutputTokensPerS != 0 || a.maxConcurrentRequests != 0 {
		t.Fatal("peaks of no request")
	}
}

func TestParseSLO(t *testing.T) {
	s, err := ParseSLO([]string{"ttft:200", "tpot:12.5 e2el:1000"})
	if err != nil {
		t.Fatal(err)
	}
	if s.TTFT != 200*ms || s.TPOT != 12500*time.Microsecond || s.E2EL != time.Second {
		t.Fatalf("%+v", s)
	}
	if s.String() != "ttft:200 tpot:12.5 e2el:1000" {
		t.Fatalf("String %q", s.String())
	}
	if z, err := ParseSLO([]string{"ttft:0"}); err != nil || z.IsZero() || z.String() != "ttft:0" {
		t.Fatalf("ttft:0: %+v %v", z, err)
	}
	if s, err := ParseSLO([]string{"e2el:86400000 tpot:0.000001"}); err != nil || s.E2EL != 24*time.Hour || s.TPOT != time.Nanosecond {
		t.Fatalf("a day and a nanosecond: %+v %v", s, err)
	}
	for _, bad := range []string{"ttft", "itl:5", "ttft:-1", "ttft:x", "ttft:NaN", "ttft:1e300", "e2el:86400000.5", "tpot:1e-9", "ttft:Inf"} {
		if _, err := ParseSLO([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseLabelAndHeaders(t *testing.T) {
	l, err := ParseLabel("engine=vllm, tp=2,precision=fp16")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "engine=vllm,version=unknown,precision=fp16,gpus=unknown,tp=2" {
		t.Fatalf("label %q", got)
	}
	if _, err := ParseLabel("engine=vllm,color=red"); err == nil {
		t.Fatal("unknown label key accepted")
	}
	h, err := ParseHeader("X-A: b:c")
	if err != nil || h.Key != "X-A" || h.Value != "b:c" {
		t.Fatalf("%+v %v", h, err)
	}
	h, err = ParseHeader("X-B=v")
	if err != nil || h.Key != "X-B" || h.Value != "v" {
		t.Fatalf("%+v %v", h, err)
	}
	_, err = ParseHeader("nosep-supersecretvalue")
	if err == nil || strings.Contains(err.Error(), "supersecretvalue") {
		t.Fatalf("bad header error %v", err)
	}
}
