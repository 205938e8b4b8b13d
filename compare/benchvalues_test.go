package compare

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/goodput/goodput/compare/comparetest"
)

// benchWith is a detailed benchmark result of five chat requests, changed
// by edit before it is written.
func benchWith(t *testing.T, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 1)[:5], nil), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func set(k string, i int, v any) func(map[string]any) {
	return func(m map[string]any) { m[k].([]any)[i] = v }
}

// A benchmark's per-request value that no benchmark measures is refused,
// naming the field and the index, as a request log's negative value is: it
// is not read as a figure (a TTFT mean of −218 ms, a latency shown as ∞).
func TestCompareBenchImpossibleValues(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"negative TTFT", set("ttfts", 0, -5), "ttfts[0] is -5: want seconds from 0"},
		{"negative OSL", set("output_lens", 0, -7), "output_lens[0] is -7: want a whole number of tokens"},
		{"huge OSL", set("output_lens", 1, 1e30), "output_lens[1] is 1e+30: want a whole number of tokens from 0 to 2147483647"},
		{"fractional OSL", set("output_lens", 2, 2.5), "output_lens[2] is 2.5"},
		{"negative ISL", set("input_lens", 3, -1), "input_lens[3] is -1"},
		{"null ISL", set("input_lens", 3, nil), "input_lens[3] is null"},
		{"huge latency", set("latencies", 4, 1e308), "latencies[4] is 1e+308: want seconds from 0"},
		{"negative gap", func(m map[string]any) { m["itls"].([]any)[1].([]any)[2] = -0.1 }, "itls[1][2] is -0.1"},
		{"huge start", set("start_times", 0, -1e300), "start_times[0] is -1e+300"},
		{"TTFT after the end", set("ttfts", 2, 1e6), "ttfts[2] is 1e+06, after the request's end (latencies[2] is"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadBench("b.json", benchWith(t, c.edit), BenchOptions{})
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "b.json: ") {
				t.Errorf("error %v, want an input error with %q", err, c.want)
			}
		})
	}
	// Python's NaN (null) stays an unknown time, and a failed request's
	// values are checked too but a failure's 0s are fine.
	if _, err := ReadBench("b.json", benchWith(t, set("ttfts", 0, nil)), BenchOptions{}); err != nil {
		t.Errorf("a null TTFT: %v", err)
	}
	s, err := ReadBench("b.json", benchWith(t, func(m map[string]any) {
		m["errors"].([]any)[0], m["ttfts"].([]any)[0], m["latencies"].([]any)[0], m["output_lens"].([]any)[0] = "boom", 0.0, 0.0, 0.0
	}), BenchOptions{})
	if err != nil || s.Requests != 4 {
		t.Errorf("a failure: %v, %d completed", err, s.Requests)
	}
}

// vLLM stores a non-200 answer's error as its reason, or "" without one,
// with output length, TTFT and latency 0: such a request is failed, not
// completed (8 completed, a TTFT mean pulled down by two 0s, attainment
// 100%).
func TestCompareBenchEmptyErrorFailure(t *testing.T) {
	reqs := comparetest.Draw(comparetest.Chat, 1)[:8]
	failure := func(completed, failed int) func(map[string]any) {
		return func(m map[string]any) {
			for _, i := range []int{1, 5} {
				m["output_lens"].([]any)[i], m["ttfts"].([]any)[i], m["latencies"].([]any)[i], m["itls"].([]any)[i] = 0, 0, 0, []any{}
			}
			// A completed request of no output keeps its latency: completed.
			m["output_lens"].([]any)[3] = 0
			m["completed"], m["failed"] = completed, failed
		}
	}
	var m map[string]any
	if err := json.Unmarshal(comparetest.BenchJSON(reqs, nil), &m); err != nil {
		t.Fatal(err)
	}
	failure(6, 2)(m)
	b, _ := json.Marshal(m)
	s, err := ReadBench("b.json", b, BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 6 || s.Failed != 2 {
		t.Fatalf("completed %d, failed %v; want 6 and 2", s.Requests, s.Failed)
	}
	var sum float64
	for i, q := range reqs {
		if i != 1 && i != 5 {
			sum += q.TTFT * 1000
		}
	}
	if got := float64(s.TTFT.Mean()); math.Abs(got-sum/6) > 1e-9 {
		t.Errorf("TTFT mean %v, want %v (the 6 completed)", got, sum/6)
	}
	if a := s.attainment(SLO{TTFT: 1e9}, false); !a.Exact() || a.Low != 6.0/8 {
		t.Errorf("attainment %+v, want 6/8: the two failures are misses", a)
	}
	notes := strings.Join(s.Notes, "\n")
	if !strings.Contains(notes, "2 requests with an empty error") || strings.Contains(notes, "completed says") || strings.Contains(notes, "failed says") {
		t.Errorf("notes %q", s.Notes)
	}
	// A file whose own counts still disagree keeps its note.
	failure(8, 0)(m)
	b, _ = json.Marshal(m)
	if s, err = ReadBench("b.json", b, BenchOptions{}); err != nil {
		t.Fatal(err)
	}
	notes = strings.Join(s.Notes, "\n")
	if s.Requests != 6 || !strings.Contains(notes, "completed says 8, the per-request arrays hold 6") || !strings.Contains(notes, "failed says 0, the per-request arrays hold 2") {
		t.Errorf("completed %d, notes %q", s.Requests, s.Notes)
	}
}

// A summary whose request_goodput × duration is more good requests than
// it completed is inconsistent, and refused (it printed an attainment of
// 3942.4%); within the rounding of the two figures it is at most 100%.
func TestCompareBenchGoodputAboveCompleted(t *testing.T) {
	summary := func(completed, failed, goodput any) []byte {
		b, _ := json.Marshal(map[string]any{"completed": completed, "failed": failed, "duration": 0.3,
			"request_goodput": goodput, "goodput": map[string]any{"ttft": 500}, "mean_ttft_ms": 120})
		return b
	}
	for _, c := range []struct {
		name  string
		doc   []byte
		wants []string
	}{
		{"goodput above completed", summary(100, 0, 1000), []string{"request_goodput 1,000 req/s × duration 0.3 s is 300 good requests, more than the 100 completed", "inconsistent"}},
		{"negative goodput", summary(100, 0, -1), []string{"request_goodput is -1"}},
		{"negative failed", summary(100, -3, 10), []string{"failed is -3: want a whole number of requests"}},
		{"fractional completed", summary(99.5, 0, 10), []string{"completed is 99.5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadBench("b.json", c.doc, BenchOptions{})
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v, want an input error", err)
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// Every request good: request_goodput is completed ÷ duration, whose
	// product with duration may round above completed; attainment is 100%.
	dur := 0.3
	if g := 100 / dur; g*dur <= 100 {
		t.Fatalf("%v × %v = %v: the case must round above 100", g, dur, g*dur)
	}
	s, err := ReadBench("b.json", summary(100, 0, 100/dur), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.attainment(*s.OwnSLO, true); a.Low != 1 || a.High != 1 {
		t.Errorf("attainment %+v, want 1", a)
	}
}

// A result's label and model_id are printed by compare with what a
// terminal would act on escaped: a model_id is the engine's own name when
// the benchmark took the first model of /v1/models, and a hostile engine's
// ESC[2J and OSC 8 link reached the operator's terminal raw.
func TestCompareBenchLabelPrintable(t *testing.T) {
	evil := "m\x1b[2J\x1b]8;;http://evil.example\x07x\x1b]8;;\x07\nlevel=ERROR"
	for _, field := range []string{"label", "model_id"} {
		s, err := ReadBench("b.json", benchWith(t, func(m map[string]any) {
			delete(m, "label")
			m[field] = evil
		}), BenchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(s.Label, "\x1b\x07\n") || !strings.Contains(s.Label, `m\x1b[2J\x1b]8;;http://evil.example\a`) {
			t.Errorf("%s: label %q, want the control characters escaped", field, s.Label)
		}
	}
}
