package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResultRoundTrip(t *testing.T) {
	a := calculate(fixedOutcomes(), nil, 2e9, resultPercentiles([]float64{99.9}), SLO{TTFT: 100 * ms})
	g := a.requestGoodput
	mc := 4
	r := &Result{
		Label: "engine=sim", RequestRate: Rate(math.Inf(1)), MaxConcurrency: &mc, Duration: 2, Completed: a.completed,
		Failed: a.failed, RequestGoodput: &g, Metrics: a.metrics,
		Goodput: &Extra{Label: Label{Engine: "sim"}, SLO: "ttft:100", Lateness: LatenessStats{P99: 1.5},
			Warmup: &WarmupResult{Requests: 2, Completed: 2, Metrics: a.metrics}},
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p99.9_ttft_ms", "p50_itl_ms", "mean_e2el_ms", "std_tpot_ms", "median_ttft_ms", "request_goodput", "goodput_bench"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("no %s in the file", k)
		}
	}
	if string(fields["request_rate"]) != `"inf"` {
		t.Errorf("request_rate %s", fields["request_rate"])
	}
	back := new(Result)
	if err := json.Unmarshal(raw, back); err != nil {
		t.Fatal(err)
	}
	if back.Completed != 3 || *back.RequestGoodput != g || back.Goodput.Lateness.P99 != 1.5 || back.Goodput.Label.Engine != "sim" {
		t.Fatalf("%+v", back)
	}
	if v, _ := back.Metrics[MetricTTFT].At(99.9); math.Abs(v-a.metrics[MetricTTFT].Percentiles[len(a.metrics[MetricTTFT].Percentiles)-1].Value) > 1e-9 {
		t.Fatalf("p99.9 ttft %v", v)
	}
	w := back.Goodput.Warmup
	if w == nil || w.Requests != 2 || w.Metrics[MetricITL] == nil || math.Abs(w.Metrics[MetricITL].Mean-120) > 1e-9 {
		t.Fatalf("warmup %+v", w)
	}
	// Warm-up metrics live inside goodput_bench, never at the top level.
	if bytes.Count(raw, []byte(`"mean_itl_ms"`)) != 2 {
		t.Fatalf("mean_itl_ms should appear twice (run, warm-up)")
	}
}

func TestSecretNeverPrints(t *testing.T) {
	o := Options{APIKey: "sk-supersecret", BaseURL: "http://x"}
	for _, s := range []string{fmtV(o), fmtPlusV(o), fmtGoV(o), jsonOf(t, o)} {
		if strings.Contains(s, "supersecret") {
			t.Fatalf("the key printed: %s", s)
		}
	}
}

func fmtV(v any) string     { return fmt.Sprintf("%v %s", v, v) }
func fmtPlusV(v any) string { return fmt.Sprintf("%+v", v) }
func fmtGoV(v any) string   { return fmt.Sprintf("%#v", v) }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The summary shows each metric's mean, median, p90, p95, p99, the
// percentiles asked and its maximum: never a mean alone, nor a median and
// one tail (vLLM's default prints mean, median and p99).
func TestSummaryShowsEveryPercentile(t *testing.T) {
	a := calculate(fixedOutcomes(), nil, 2e9, resultPercentiles([]float64{99.9}), SLO{})
	r := &Result{Label: "engine=sim", RequestRate: Rate(math.Inf(1)), Duration: 2, Completed: a.completed, Failed: a.failed, Metrics: a.metrics}
	for _, asked := range [][]float64{nil, {99.9}} {
		var out bytes.Buffer
		WriteSummary(&out, r, nil, asked)
		for _, m := range []string{"TTFT", "TPOT", "ITL"} {
			want := []string{"Mean " + m, "Median " + m, "P90 " + m, "P95 " + m, "P99 " + m, "Max " + m}
			if asked != nil {
				want = []string{"Mean " + m, "Median " + m, "P90 " + m, "P95 " + m, "P99 " + m, "P99.9 " + m, "Max " + m}
			}
			at := 0
			for _, w := range want {
				i := strings.Index(out.String()[at:], w+" (ms):")
				if i < 0 {
					t.Fatalf("asked %v: no %q after the lines before it in\n%s", asked, w, out.String())
				}
				at += i
			}
		}
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "Max TTFT (ms): "+fmt.Sprintf("%.2f", a.metrics[MetricTTFT].Max)) {
			t.Errorf("the maximum TTFT %.2f is not printed:\n%s", a.metrics[MetricTTFT].Max, out.String())
		}
	}
}
