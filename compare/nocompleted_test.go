package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/compare/comparetest"
)

// vllmAllFailed is a detailed vLLM result whose two requests both failed,
// as vLLM saves it: per-request arrays of failures (output length, TTFT
// and latency 0, no gaps, an error) and a summary of 0s, vLLM's figure for
// "no values".
const vllmAllFailed = `{"duration": 1.5, "completed": 0, "failed": 2, "total_input_tokens": 0, "total_output_tokens": 0,
 "request_throughput": 0, "request_rate": 4, "burstiness": 1,
 "input_lens": [120, 130], "output_lens": [0, 0], "ttfts": [0, 0], "itls": [[], []], "latencies": [0, 0],
 "start_times": [10.0, 10.5], "errors": ["Bad Gateway", "Bad Gateway"],
 "mean_ttft_ms": 0, "median_ttft_ms": 0, "p90_ttft_ms": 0, "p95_ttft_ms": 0, "p99_ttft_ms": 0,
 "mean_tpot_ms": 0, "median_tpot_ms": 0, "p99_tpot_ms": 0,
 "mean_itl_ms": 0, "median_itl_ms": 0, "p99_itl_ms": 0,
 "mean_e2el_ms": 0, "median_e2el_ms": 0, "p99_e2el_ms": 0}`

// The same run saved without --save-detailed: its summary alone.
const vllmAllFailedSummary = `{"duration": 1.5, "completed": 0, "failed": 2, "total_input_tokens": 0, "total_output_tokens": 0,
 "request_throughput": 0, "request_rate": 4, "burstiness": 1,
 "mean_ttft_ms": 0, "median_ttft_ms": 0, "p99_ttft_ms": 0, "mean_tpot_ms": 0, "median_tpot_ms": 0, "p99_tpot_ms": 0,
 "mean_itl_ms": 0, "median_itl_ms": 0, "p99_itl_ms": 0, "mean_e2el_ms": 0, "median_e2el_ms": 0, "p99_e2el_ms": 0}`

// noLatencyRows fails the test when a synthetic latency row holds a
// number: with no completed request there are no values, not 0 ms.
func noLatencyRows(t *testing.T, r *Result) {
	t.Helper()
	for _, row := range r.Rows {
		switch row.Group {
		case "TTFT", "TPOT", "ITL", "E2E", "ISL", "OSL":
			if !math.IsNaN(float64(row.Synthetic)) {
				t.Errorf("%s %s = %v, want no value (no request completed)", row.Group, row.Name, row.Synthetic)
			}
		}
	}
}

// wantValidJSON writes r as JSON and fails when it is not valid, or when
// side (synthetic or real) has a TTFT where no value exists.
func wantValidJSON(t *testing.T, r *Result, side string) map[string]any {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("json output: %v\n%s", err, b.String())
	}
	for _, row := range doc["rows"].([]any) {
		row := row.(map[string]any)
		if row["group"] == "TTFT" && row[side] != nil {
			t.Errorf("json row %v: want %s null", row, side)
		}
	}
	return doc
}

// A benchmark whose every request failed has no latency values (vLLM's
// summary 0s are not measurements), and its attainment is 0%: each
// failure is a miss.
func TestCompareBenchEveryRequestFailed(t *testing.T) {
	logPath, _ := realLog(t)
	rl, err := ReadReal(context.Background(), logPath, RealOptions{Filter: Filter{Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, doc, method string }{
		{"detailed", vllmAllFailed, "per request"},
		{"summary", vllmAllFailedSummary, "every request failed"},
		// Arrays without ttfts (a file cut by hand; a review found its
		// summary's 0s shown as measurements).
		{"arrays without ttfts", `{"duration": 1, "completed": 0, "failed": 2, "input_lens": [1, 2], "output_lens": [0, 0], "errors": ["x", "y"],
 "mean_ttft_ms": 0, "p99_ttft_ms": 0, "mean_e2el_ms": 0, "mean_itl_ms": 0}`, "every request failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			syn, err := ReadBench(c.name+".json", []byte(c.doc), BenchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if syn.Requests != 0 || syn.Failed != 2 {
				t.Fatalf("completed %d, failed %v; want 0 and 2", syn.Requests, syn.Failed)
			}
			r := Compare(syn, rl, SLO{TTFT: 100}, DefaultTolerances())
			noLatencyRows(t, r)
			if a := r.AttainSynth; !a.Exact() || a.Low != 0 || a.Method != c.method {
				t.Errorf("attainment %+v, want exactly 0 (%s)", a, c.method)
			}
			out := text(t, r)
			if !strings.Contains(out, "synthetic 0.0% (") || strings.Contains(out, "synthetic unknown") {
				t.Errorf("attainment line:\n%s", out)
			}
			if strings.Contains(out, "NaN") {
				t.Errorf("NaN in the output:\n%s", out)
			}
			doc := wantValidJSON(t, r, "synthetic")
			if a := doc["attainment_synthetic"].(map[string]any); a["low"] != 0.0 {
				t.Errorf("json attainment %v, want 0", a)
			}
			if c.name == "detailed" && r.ISLKS.Why != "no request of the benchmark completed" {
				t.Errorf("ISL KS %+v: want why no request of the benchmark completed", r.ISLKS)
			}
		})
	}
}

// A request log whose every inference request failed: attainment 0%, not
// unknown, and no latency values.
func TestCompareRequestLogEveryRequestFailed(t *testing.T) {
	var b []byte
	for _, q := range comparetest.Draw(comparetest.Chat, 4)[:3] {
		rec := comparetest.Record(q, "acme", "m")
		rec.Outcome = 1 // upstream_error
		b = rec.AppendJSON(b)
	}
	p := filepath.Join(t.TempDir(), "failed.jsonl")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rl, err := ReadReal(context.Background(), p, RealOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syn, err := ReadBench("b.json", comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 5)[:20], nil), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := Compare(syn, rl, SLO{TTFT: 100}, DefaultTolerances())
	if a := r.AttainReal; !a.Exact() || a.Low != 0 || !strings.Contains(a.Why, "3 failed requests") {
		t.Errorf("real attainment %+v, want exactly 0 with 3 failed requests as misses", a)
	}
	if r.ISLKS.Why != "no request of the real traffic completed" {
		t.Errorf("ISL KS %+v", r.ISLKS)
	}
	wantValidJSON(t, r, "real")
}
