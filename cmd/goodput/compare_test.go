package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/compare/comparetest"
)

// compareFiles writes a RAG-shaped request log, a chat-shaped benchmark
// and a replay of the real distribution; it returns their paths.
func compareFiles(t *testing.T) (real, chat, replay string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{
		"real.jsonl":  comparetest.RequestLog(comparetest.Draw(comparetest.RAG, 1), "acme", "llama-3-8b"),
		"chat.json":   comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 2), map[string]any{"label": "chat", "goodput": []string{"ttft:100", "tpot:25"}}),
		"replay.json": comparetest.BenchJSON(comparetest.Draw(comparetest.RAG, 3), nil),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "real.jsonl"), filepath.Join(dir, "chat.json"), filepath.Join(dir, "replay.json")
}

func TestCompareExitStatus(t *testing.T) {
	real, chat, replay := compareFiles(t)
	code, out, errOut := runCLI("compare", "--bench", chat, "--real", real, "--tenant", "acme")
	if code != 1 || errOut != "" {
		t.Fatalf("chat vs RAG: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"prefill is understated", "queueing is understated", "FAIL ISL KS", "SLO:       ttft:100,tpot:25 (the benchmark result's goodput SLO)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, out, errOut := runCLI("compare", "--bench", replay, "--real", real); code != 0 || !strings.Contains(out, "within tolerances") {
		t.Errorf("replay: exit %d, %s %s", code, out, errOut)
	}
	// Looser tolerances make the chat benchmark pass: the flags are used.
	if code, _, errOut := runCLI("compare", "--bench", chat, "--real", real, "--max-ks", "0", "--max-burstiness-ratio", "0"); code != 0 {
		t.Errorf("checks turned off: exit %d %s", code, errOut)
	}
}

func TestCompareFormats(t *testing.T) {
	real, chat, _ := compareFiles(t)
	code, out, _ := runCLI("compare", "--bench", chat, "--real", real, "--format", "json", "--slo", "ttft:100")
	var doc struct {
		Pass   bool `json:"pass"`
		Checks []struct {
			Name string
			Pass bool
		} `json:"checks"`
		ISLKS struct {
			D      float64 `json:"d"`
			Method string  `json:"method"`
		} `json:"isl_ks"`
		SLO struct {
			TTFT float64 `json:"ttft_ms"`
		} `json:"slo"`
		Findings []string `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--format json: %v\n%s", err, out)
	}
	if code != 1 || doc.Pass || doc.ISLKS.Method != "samples" || doc.ISLKS.D < 0.9 || doc.SLO.TTFT != 100 || len(doc.Findings) == 0 {
		t.Errorf("json: exit %d %+v", code, doc)
	}
	html := filepath.Join(t.TempDir(), "c.html")
	if code, _, errOut := runCLI("compare", "--bench", chat, "--real", real, "--format", "html", "--out", html); code != 1 {
		t.Fatalf("html: exit %d %s", code, errOut)
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"<svg", "<polyline", "prefill is understated", "Tolerances exceeded"} {
		if !strings.Contains(page, want) {
			t.Errorf("html lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page is not self-contained")
	}
}

func TestCompareUsageErrors(t *testing.T) {
	real, chat, _ := compareFiles(t)
	dir := t.TempDir()
	trunc := filepath.Join(dir, "t.json")
	b, _ := os.ReadFile(chat)
	if err := os.WriteFile(trunc, b[:len(b)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["ttfts"].([]any)[0] = -5
	negTTFT := filepath.Join(dir, "neg.json")
	if nb, err := json.Marshal(m); err != nil || os.WriteFile(negTTFT, nb, 0o600) != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--real", real}, "both --bench"},
		{[]string{"--bench", chat, "--real", real, "--format", "pdf"}, "--format"},
		{[]string{"--bench", chat, "--real", real, "--slo", "ttft"}, "--slo"},
		{[]string{"--bench", chat, "--real", real, "--max-rate-ratio", "0.5"}, "--max-rate-ratio"},
		{[]string{"--bench", chat, "--real", real, "--max-ks", "2"}, "--max-ks"},
		{[]string{"--bench", trunc, "--real", real}, "truncated JSON"},
		{[]string{"--bench", negTTFT, "--real", real}, "ttfts[0] is -5: want seconds from 0"},
		{[]string{"--bench", chat, "--real", empty}, "empty file"},
		{[]string{"--bench", chat, "--real", chat}, "a benchmark result, not real traffic"},
		{[]string{"--bench", real, "--real", real}, "a gateway request log, not a benchmark result"},
		{[]string{"--bench", chat, "--real", real, "--tenant", "nobody"}, "no inference request of tenant nobody"},
		{[]string{"--bench", chat, "--real", real, "extra"}, "unexpected argument"},
		{[]string{"--bench", chat, "--real", real, "--window", "0"}, "must be positive"},
		{[]string{"--bench", chat, "--real", "http://127.0.0.1:1/?window=5m"}, "without a query"},
	} {
		code, out, errOut := runCLI(append([]string{"compare"}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) || !strings.HasPrefix(errOut, "goodput compare: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// A Prometheus answering negative counts is bad input, exit 2, not a
// comparison that fails a tolerance (exit 1: "failed -10", "real -0.00278
// req/s", "load is overstated ×∞").
func TestCompareNegativePrometheusCounts(t *testing.T) {
	_, chat, _ := compareFiles(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		typ, result := "vector", `[{"metric":{"outcome":"ok"},"value":[1767607200,"-10"]}]`
		if r.URL.Path == "/api/v1/query_range" {
			typ, result = "matrix", `[]`
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":%q,"result":%s}}`, typ, result)
	}))
	defer srv.Close()
	code, out, errOut := runCLI("compare", "--bench", chat, "--real", srv.URL, "--tenant", "acme")
	if code != 2 || !strings.Contains(errOut, `answered -10 for {outcome="ok"}, which cannot be a count`) {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

// The SLO goodput bench accepts, compare reads, from --slo and from the
// result (a bound of 0 among them); one the result carries that compare
// cannot read refuses the file unless --slo replaces it, and is noted then.
func TestCompareOwnSLO(t *testing.T) {
	real, chat, _ := compareFiles(t)
	b, err := os.ReadFile(chat)
	if err != nil {
		t.Fatal(err)
	}
	withSLO := func(name string, v any) string {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "goodput")
		m["goodput_bench"] = map[string]any{"slo": v}
		p := filepath.Join(t.TempDir(), name)
		nb, _ := json.Marshal(m)
		if err := os.WriteFile(p, nb, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zero, bad := withSLO("zero.json", "ttft:0 tpot:25"), withSLO("bad.json", "ttft:abc")
	if code, out, errOut := runCLI("compare", "--bench", zero, "--real", real); code == 2 || !strings.Contains(out, "SLO:       ttft:0,tpot:25 (the benchmark result's goodput SLO)") || !strings.Contains(out, "attainment under ttft:0,tpot:25: synthetic 0.0%") {
		t.Errorf("bench's ttft:0 tpot:25: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	if code, out, errOut := runCLI("compare", "--bench", chat, "--real", real, "--slo", "ttft:0"); code == 2 || !strings.Contains(out, "SLO:       ttft:0 (--slo)") {
		t.Errorf("--slo ttft:0: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	code, out, errOut := runCLI("compare", "--bench", bad, "--real", real)
	if code != 2 || out != "" || !strings.Contains(errOut, "the result's own SLO cannot be read: goodput_bench.slo") || !strings.Contains(errOut, "give --slo") {
		t.Errorf("unreadable own SLO: exit %d, stderr %q, stdout %q; want 2", code, errOut, out)
	}
	code, out, errOut = runCLI("compare", "--bench", bad, "--real", real, "--slo", "ttft:100")
	if code == 2 || !strings.Contains(out, "SLO:       ttft:100 (--slo)") || !strings.Contains(out, "the result's own SLO cannot be read") {
		t.Errorf("unreadable own SLO with --slo: exit %d, stderr %q:\n%s", code, errOut, out)
	}
}
