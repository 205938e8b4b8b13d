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

// vllmResult is shaped as `vllm bench serve --save-result --save-detailed`
// writes it (fields and types as vLLM's benchmarks/serve.py sets them; the
// values are made up): request_rate "inf", label null, per-metric fields
// for the selected metrics only, plus fields goodput does not know.
const vllmResult = `{"date": "20250101-120000", "endpoint_type": "openai-chat", "backend": "openai-chat",
"label": null, "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
"num_prompts": 3, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
"duration": 1.5, "completed": 2, "failed": 1, "total_input_tokens": 300, "total_output_tokens": 40,
"request_throughput": 1.3333333333333333, "request_goodput": null, "output_throughput": 26.666666666666668,
"total_token_throughput": 226.66666666666666, "input_lens": [100, 200, 150], "output_lens": [10, 30, 0],
"ttfts": [0.05, 0.07, 0.0], "itls": [[0.01, 0.02], [0.01], []], "latencies": [0.5, 0.9, 0.0],
"start_times": [12345.1, 12345.2, 12345.3], "queue_times": [0.0, 0.1, 0.2],
"generated_texts": ["a", "b", ""], "errors": ["", "", "boom"],
"max_output_tokens_per_s": 30.0, "max_concurrent_requests": 2, "rtfx": 0.0,
"mean_ttft_ms": 60.0, "median_ttft_ms": 60.0, "std_ttft_ms": 10.0, "p99_ttft_ms": 69.8, "p99.9_ttft_ms": 69.98,
"mean_tpot_ms": 20.0, "median_tpot_ms": 20.0, "std_tpot_ms": 1.0, "p99_tpot_ms": 21.0,
"mean_itl_ms": 13.3, "median_itl_ms": 10.0, "std_itl_ms": 4.7, "p99_itl_ms": 19.8,
"probe_median_e2el_ms": 5.0, "spec_decode_acceptance_rate": 50.0}`

func TestReadVLLMResult(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vllm.json")
	if err := os.WriteFile(path, []byte(vllmResult), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(float64(r.RequestRate), 1) || r.Label != "" || r.MaxConcurrency == nil || *r.MaxConcurrency != 2 {
		t.Fatalf("rate %v label %q max concurrency %v", r.RequestRate, r.Label, r.MaxConcurrency)
	}
	if r.Completed != 2 || r.Failed != 1 || r.Duration != 1.5 || r.RequestGoodput != nil || r.Goodput != nil {
		t.Fatalf("%+v", r)
	}
	if len(r.ITLs) != 3 || len(r.ITLs[0]) != 2 || r.Errors[2] != "boom" || r.StartTimes[0] != 12345.1 {
		t.Fatalf("per-request arrays: %+v %+v", r.ITLs, r.Errors)
	}
	if len(r.Metrics) != 3 || r.Metrics[MetricE2EL] != nil {
		t.Fatalf("metrics %v", r.Metrics)
	}
	ttft := r.Metrics[MetricTTFT]
	if ttft.Mean != 60 || ttft.Std != 10 || len(ttft.Percentiles) != 2 {
		t.Fatalf("ttft %+v", ttft)
	}
	if v, ok := ttft.At(99.9); !ok || v != 69.98 {
		t.Fatalf("p99.9 %v %v", v, ok)
	}
	// "probe_median_e2el_ms" is not a metric field.
	if r.Metrics["e2el"] != nil || r.Metrics["probe_median_e2el"] != nil {
		t.Fatal("probe field read as a metric")
	}

	// An --append-result file holds one result per line: the last is read.
	second := strings.Replace(vllmResult, `"completed": 2`, `"completed": 7`, 1)
	if err := os.WriteFile(path, []byte(vllmResult+"\n"+second+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err = ReadResult(path); err != nil || r.Completed != 7 {
		t.Fatalf("appended: %v %v", r, err)
	}

	// Python's json module writes non-finite floats as NaN and Infinity.
	py := strings.Replace(vllmResult, `"std_itl_ms": 4.7`, `"std_itl_ms": NaN, "x": -Infinity, "note": "NaN \" Infinity"`, 1)
	if r, err = ParseResult([]byte(py)); err != nil || r.Metrics[MetricITL].Std != 0 || r.Metrics[MetricITL].Mean != 13.3 {
		t.Fatalf("NaN: %v %+v", err, r)
	}

	for _, bad := range []string{"", "{}", "[1,2]", `{"duration": "x"}`, "not json"} {
		if _, err := ParseResult([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

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
	back, err := ReadResult(path)
	if err != nil {
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
