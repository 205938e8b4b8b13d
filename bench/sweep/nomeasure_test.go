package sweep

import (
	"testing"

	"github.com/goodput/goodput/bench"
)

// SPEC (sections 3 and 6): TPOT is undefined when OSL ≤ 1, and an unknown
// figure prints "unknown", never as a value. A step whose completed requests
// each generated one token (max_tokens 1, a TTFT-only run) has no TPOT and,
// when each request had one token event, no ITL gap: bench's figures over
// no values are zeros (vLLM's "values or 0"), and the step must not chart
// or print them as a measured 0 ms.
func TestStepOfNoTPOTNoITL(t *testing.T) {
	zero := func() *bench.Stats {
		return &bench.Stats{Percentiles: []bench.Percentile{{P: 50}, {P: 90}, {P: 95}, {P: 99}}}
	}
	r := &bench.Result{
		Completed: 3, Failed: 1, Duration: 1, RequestThroughput: 3, OutputThroughput: 3,
		OutputLens: []int{1, 1, 0, 1},
		ITLs:       [][]float64{{}, {}, {0.5, 0.7}, {}}, // the failed request's gaps are not in the figures
		Errors:     []string{"", "", "cut", ""},
		Metrics: map[string]*bench.Stats{
			bench.MetricTTFT: stats(20, 80), bench.MetricE2EL: stats(21, 81),
			bench.MetricTPOT: zero(), bench.MetricITL: zero(),
		},
	}
	st := StepOf(RequestRate, 1, r)
	if st.TPOT.P50.Known() || st.TPOT.P99.Known() {
		t.Errorf("TPOT of a step without a request of OSL > 1: %+v, want unknown", st.TPOT)
	}
	if st.ITL.P50.Known() || st.ITL.P99.Known() {
		t.Errorf("ITL of a step without a gap: %+v, want unknown", st.ITL)
	}
	if st.TTFT.P50 != 20 || st.E2EL.P99 != 81 {
		t.Errorf("TTFT %+v E2EL %+v", st.TTFT, st.E2EL)
	}

	// One request of two tokens: TPOT and ITL are measured, and a measured
	// 0 stays 0.
	r.OutputLens = []int{1, 2, 0, 1}
	r.ITLs = [][]float64{{}, {0}, {0.5, 0.7}, {}}
	st = StepOf(RequestRate, 1, r)
	if st.TPOT.P50 != 0 || !st.TPOT.P50.Known() || st.ITL.P99 != 0 || !st.ITL.P99.Known() {
		t.Errorf("measured zeros: TPOT %+v ITL %+v", st.TPOT, st.ITL)
	}
}
