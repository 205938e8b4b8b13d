package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDatasetFormats(t *testing.T) {
	jsonl := `{"prompt": "What is the capital of India?", "output_tokens": 10}
{"prompt": "What is the capital of Iran?"}

{"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Name three rivers."}, {"from": "gpt", "value": "Nile Amazon Yangtze and more words here"}]}
{"conversations": [{"from": "human", "value": "Hello?"}]}
`
	array := `[{"conversations": [{"from": "human", "value": "Name three rivers."}, {"from": "gpt", "value": "Nile Amazon Yangtze"}]},
 {"prompt": "Why?", "output_tokens": 3}]`
	want := map[string]int{ // prompt → max_tokens
		"What is the capital of India?": 10,
		"What is the capital of Iran?":  DefaultOutputTokens,
		"Name three rivers.":            10, // ceil(1.3 × 7 words)
		"Hello?":                        DefaultOutputTokens,
	}
	for _, c := range []struct {
		name, body, kind string
		want             map[string]int
	}{
		{"d.jsonl", jsonl, "JSONL", want},
		{"sharegpt.json", "\ufeff  \n" + array, "JSON array", map[string]int{"Name three rivers.": 4, "Why?": 3}},
	} {
		w, err := FromFlags("", "", writeFile(t, c.name, c.body), 3)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !strings.Contains(w.Describe(), c.kind) || w.Synth() != nil {
			t.Errorf("%s: describe %q", c.name, w.Describe())
		}
		if _, _, ok := w.Rate(); ok {
			t.Errorf("%s: a dataset carries no arrival process", c.name)
		}
		reqs := w.Requests(2*len(c.want) + 1)
		seen := map[string]bool{}
		for i, r := range reqs {
			mt, ok := c.want[r.Prompt]
			if !ok || r.MaxTokens != mt || r.InputTokens != 0 {
				t.Errorf("%s: request %d: %+v", c.name, i, r)
			}
			seen[r.Prompt] = true
			// Beyond the file, the same order again.
			if i >= len(c.want) && r != reqs[i-len(c.want)] {
				t.Errorf("%s: request %d is not request %d again", c.name, i, i-len(c.want))
			}
		}
		if len(seen) != len(c.want) {
			t.Errorf("%s: %d distinct prompts of %d", c.name, len(seen), len(c.want))
		}
	}
	// The order is seeded.
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "{\"prompt\":\"prompt %d\"}\n", i)
	}
	p := writeFile(t, "many.jsonl", b.String())
	a1, _ := LoadDataset(p, 1)
	a2, _ := LoadDataset(p, 1)
	b1, _ := LoadDataset(p, 2)
	x, y, z := a1.Requests(50), a2.Requests(50), b1.Requests(50)
	diff := false
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("same seed, request %d differs", i)
		}
		diff = diff || x[i] != z[i]
	}
	if !diff {
		t.Error("seeds 1 and 2 give the same order")
	}
}

func TestDatasetErrors(t *testing.T) {
	long := `{"prompt":"` + strings.Repeat("a", MaxDatasetLine) + `"}`
	for _, c := range []struct{ body, want string }{
		{"", "empty dataset"},
		{"\n\n", "empty dataset"},
		{`{"prompt":"ok"}` + "\n" + `{"prompt": 3}`, "line 2: not a JSON object"},
		{`{"prompt":"ok"}` + "\n\n" + `{"text":"x"}`, `line 3: want a "prompt" (vLLM custom format) or "conversations" (ShareGPT)`},
		{`{"prompt":""}`, "line 1: empty prompt"},
		{`{"prompt":"x","output_tokens":0}`, "line 1: output_tokens must be positive"},
		{`{"conversations":[{"from":"gpt","value":"hi"}]}`, "line 1: no human turn"},
		{`{"prompt":"ok"}` + "\n" + long, "line 2: longer than 16 MiB"},
		{`[{"prompt":"ok"}, {"prompt":""}]`, "entry 1 of the array: empty prompt"},
		{`[{"prompt":"ok"}, 7`, "entry 1 of the array"},
		{`[]`, "no entries"},
		{`{"prompt":"ok"} trailing`, "line 1: not a JSON object"},
	} {
		_, err := LoadDataset(writeFile(t, "d.jsonl", c.body), 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: error %v, want %q", c.body, err, c.want)
		}
	}
	if _, err := LoadDataset(filepath.Join(t.TempDir(), "absent.jsonl"), 1); err == nil || !strings.Contains(err.Error(), "dataset:") {
		t.Errorf("absent file: %v", err)
	}
}

// The dataset's description gives numpy's percentiles, as every figure
// bench prints (a probe: max_tokens 1, 2, 3, 4, 10, 10 read "median 4 p90
// 10", where numpy gives 3.5 and 10; 1 to 10 gives p90 9.1, not 10).
func TestDatasetDescribedWithNumpysPercentiles(t *testing.T) {
	var b strings.Builder
	for _, n := range []int{1, 2, 3, 4, 10, 10} {
		fmt.Fprintf(&b, "{\"prompt\": \"%s\", \"output_tokens\": %d}\n", strings.Repeat("w ", n), n)
	}
	w, err := FromFlags("", "", writeFile(t, "d.jsonl", b.String()), 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "prompt words median 3.5 p90 10, max_tokens median 3.5 p90 10"; !strings.Contains(w.Describe(), want) {
		t.Errorf("describe %q, want %q", w.Describe(), want)
	}
	b.Reset()
	for n := 1; n <= 10; n++ {
		fmt.Fprintf(&b, "{\"prompt\": \"p\", \"output_tokens\": %d}\n", n)
	}
	if w, err = FromFlags("", "", writeFile(t, "e.jsonl", b.String()), 1); err != nil {
		t.Fatal(err)
	}
	if want := "max_tokens median 5.5 p90 9.1"; !strings.Contains(w.Describe(), want) {
		t.Errorf("describe %q, want %q", w.Describe(), want)
	}
}
