package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goodput/goodput/compare/comparetest"
	"github.com/goodput/goodput/internal/stats"
)

// realLog writes the RAG-shaped request log of tenant acme (with records
// the filters must drop: another tenant, a model listing, a failed
// request) and returns its path and the drawn requests.
func realLog(t *testing.T) (string, []comparetest.Request) {
	t.Helper()
	reqs := comparetest.Draw(comparetest.RAG, 1)
	b := comparetest.RequestLog(reqs, "acme", "llama-3-8b")
	// Another tenant's chat traffic, which --tenant acme leaves out.
	b = append(b, comparetest.RequestLog(comparetest.Draw(comparetest.Chat, 9)[:50], "globex", "llama-3-8b")...)
	listing := comparetest.Record(reqs[0], "acme", "llama-3-8b")
	listing.Route, listing.ISL, listing.OSL = "other", -1, -1
	b = listing.AppendJSON(b)
	failed := comparetest.Record(reqs[1], "acme", "llama-3-8b")
	failed.Outcome, failed.OSL = 1, 3 // upstream_error, truncated output
	b = failed.AppendJSON(b)
	p := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, reqs
}

func benchFile(t *testing.T, shape comparetest.Shape, seed uint64, extra map[string]any) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bench.json")
	if err := os.WriteFile(p, comparetest.BenchJSON(comparetest.Draw(shape, seed), extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func readBoth(t *testing.T, bench, real string, f Filter) (*Side, *Side) {
	t.Helper()
	syn, err := ReadBenchFile(bench, BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := ReadReal(context.Background(), real, RealOptions{Filter: f})
	if err != nil {
		t.Fatal(err)
	}
	return syn, rl
}

func check(t *testing.T, r *Result, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

func hasFinding(r *Result, parts ...string) bool {
	for _, f := range r.Findings {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(f, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// A chat-shaped Poisson benchmark does not represent bursty RAG traffic.
func TestChatBenchFailsAgainstRAGLog(t *testing.T) {
	logPath, reqs := realLog(t)
	syn, rl := readBoth(t, benchFile(t, comparetest.Chat, 2, nil), logPath, Filter{Tenant: "acme"})
	if rl.Requests != len(reqs) || float64(rl.Failed) != 1 {
		t.Fatalf("real side: %d completed, %v failed; want %d and 1 (filters: tenant, inference routes)", rl.Requests, rl.Failed, len(reqs))
	}
	r := Compare(syn, rl, SLO{TTFT: 100, TPOT: 25}, DefaultTolerances())
	if r.Pass {
		t.Fatalf("chat bench vs RAG traffic passed:\n%s", text(t, r))
	}
	for _, name := range []string{"ISL KS", "burstiness ratio"} {
		if c := check(t, r, name); c.Pass {
			t.Errorf("%s passed: %+v", name, c)
		}
	}
	if c := check(t, r, "arrival rate ratio"); !c.Pass {
		t.Errorf("both arrive at ~2/s, yet the rate check failed: %+v", c)
	}
	if r.ISLKS.Method != "samples" || float64(r.ISLKS.D) < 0.99 {
		t.Errorf("ISL KS = %+v, want exact and ~1 (128 vs 4,000 tokens)", r.ISLKS)
	}
	if !hasFinding(r, "synthetic ISL median", "prefill is understated") {
		t.Errorf("no ISL finding in %q", r.Findings)
	}
	if !hasFinding(r, "synthetic arrivals are Poisson", "real traffic is bursty", "queueing is understated") {
		t.Errorf("no burstiness finding in %q", r.Findings)
	}
	k := float64(rl.Burstiness)
	if k < 0.15 || k > 0.5 {
		t.Errorf("real burstiness k = %v, drawn with 0.3", k)
	}
	// Prefill of 128 tokens is faster: the benchmark meets the TTFT bound
	// more often than the real traffic.
	if !(r.AttainSynth.Exact() && r.AttainReal.Exact() && r.AttainSynth.Low > r.AttainReal.Low+0.2) {
		t.Errorf("attainment synthetic %+v real %+v: want exact, synthetic well above real", r.AttainSynth, r.AttainReal)
	}
	if !hasFinding(r, "benchmark is optimistic") {
		t.Errorf("no attainment finding in %q", r.Findings)
	}
}

// A benchmark that replays the real distribution (another seed) passes.
func TestReplayBenchPasses(t *testing.T) {
	logPath, _ := realLog(t)
	syn, rl := readBoth(t, benchFile(t, comparetest.RAG, 3, nil), logPath, Filter{Tenant: "acme", Model: "llama-3-8b"})
	tol := DefaultTolerances()
	tol.MaxConcurrencyRatio, tol.MaxAttainmentDiff = 2, 0.1
	r := Compare(syn, rl, SLO{TTFT: 150, TPOT: 25, E2EL: 5000}, tol)
	if !r.Pass {
		t.Fatalf("a replay of the same distribution failed:\n%s", text(t, r))
	}
	for _, c := range r.Checks {
		if c.Skipped != "" {
			t.Errorf("check %s skipped: %s", c.Name, c.Skipped)
		}
	}
	t.Logf("replay: ISL KS %.3f, OSL KS %.3f, burstiness %.2f vs %.2f", r.ISLKS.D, r.OSLKS.D, syn.Burstiness, rl.Burstiness)
	if !hasFinding(r, "within the tolerances") {
		t.Errorf("findings %q", r.Findings)
	}
}

func text(t *testing.T, r *Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A result file saved by vLLM's benchmark (summary fields only, nine runs
// one per line) is read, and its figures come out as in the file.
func TestVLLMSavedResult(t *testing.T) {
	s, err := ReadBenchFile("testdata/vllm_saved_results.json", BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The last run: request_rate "inf", 900 prompts.
	eq := func(name string, got Num, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v (as in the file)", name, got, want)
		}
	}
	if s.Requests != 900 {
		t.Errorf("completed = %d, want 900", s.Requests)
	}
	eq("duration", s.Seconds, 21.835562008000124)
	eq("TTFT median", s.TTFT.Quantile(0.5), 867.6726769999732)
	eq("TTFT p99", s.TTFT.Quantile(0.99), 1249.6421772296253)
	eq("TTFT mean", s.TTFT.Mean(), 884.9588357166714)
	eq("TPOT p99", s.TPOT.Quantile(0.99), 71.62702592521168)
	eq("ITL median", s.ITL.Quantile(0.5), 37.49666700059606)
	eq("ISL mean", s.ISL.Mean(), 899100.0/900)
	eq("OSL mean", s.OSL.Mean(), 240439.0/900)
	eq("arrival rate (request_throughput, rate inf)", s.ArrivalRate, 41.21716673334341)
	if present(s.Burstiness) || present(s.OwnGoodput) {
		t.Errorf("rate inf and request_goodput: null, yet burstiness %v goodput %v", s.Burstiness, s.OwnGoodput)
	}
	if s.TTFT.Form() != "summary" || s.ISL.hasSamples() {
		t.Errorf("a summary-only file: TTFT form %q", s.TTFT.Form())
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "holds 9 results") {
		t.Errorf("notes %q do not say the file holds 9 results", s.Notes)
	}
	first, err := ReadBenchFile("testdata/vllm_saved_results.json", BenchOptions{Run: 1})
	if err != nil {
		t.Fatal(err)
	}
	if first.Requests != 300 || float64(first.ArrivalRate) != 10 || float64(first.Burstiness) != 1 || first.RateFrom != "configured request_rate" {
		t.Errorf("run 1: %d requests, rate %v (%s), k %v; want 300, 10 configured, 1", first.Requests, first.ArrivalRate, first.RateFrom, first.Burstiness)
	}
	eq("run 1 TTFT p99", first.TTFT.Quantile(0.99), 98.69780922984769)
	if _, err := ReadBenchFile("testdata/vllm_saved_results.json", BenchOptions{Run: 10}); err == nil || !strings.Contains(err.Error(), "holds 9 results") {
		t.Errorf("run 10 of 9: %v", err)
	}
	// Against real traffic, the summary-only result skips the distribution
	// tests and says so, rather than passing or failing them.
	logPath, _ := realLog(t)
	rl, err := ReadReal(context.Background(), logPath, RealOptions{Filter: Filter{Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	r := Compare(s, rl, SLO{}, DefaultTolerances())
	if c := check(t, r, "ISL KS"); c.Skipped == "" {
		t.Errorf("ISL KS on a summary: %+v", c)
	}
	if !hasFinding(r, "ISL mean 999 vs real", "prefill is understated") {
		t.Errorf("findings %q", r.Findings)
	}
}

// A detailed result built to vLLM's saving rules: the figures derived from
// the per-request arrays agree with vLLM's own summary fields.
func TestVLLMDetailedResult(t *testing.T) {
	data, err := os.ReadFile("testdata/vllm_detailed_constructed.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadBench("detailed.json", data, BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := jsonUnmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	f := func(k string) float64 { return file[k].(float64) }
	if s.Requests != int(f("completed")) || float64(s.Failed) != f("failed") {
		t.Errorf("completed %d failed %v, file %v %v", s.Requests, s.Failed, f("completed"), f("failed"))
	}
	for _, c := range []struct {
		name string
		got  Num
		key  string
	}{
		{"TTFT median", s.TTFT.Quantile(0.5), "median_ttft_ms"},
		{"TTFT p99", s.TTFT.Quantile(0.99), "p99_ttft_ms"},
		{"TTFT mean", s.TTFT.Mean(), "mean_ttft_ms"},
		{"TPOT median", s.TPOT.Quantile(0.5), "median_tpot_ms"},
		{"TPOT p99", s.TPOT.Quantile(0.99), "p99_tpot_ms"},
		{"ITL p99", s.ITL.Quantile(0.99), "p99_itl_ms"},
		{"E2E median", s.E2E.Quantile(0.5), "median_e2el_ms"},
		{"concurrency peak", s.ConcPeak, "max_concurrent_requests"},
	} {
		if math.Abs(float64(c.got)-f(c.key)) > 1e-6 {
			t.Errorf("%s = %v, the file's %s = %v", c.name, c.got, c.key, f(c.key))
		}
	}
	if s.RateFrom != "measured from start_times" || !known(s.ArrivalRate) || !known(s.Burstiness) {
		t.Errorf("arrivals: rate %v (%s), k %v", s.ArrivalRate, s.RateFrom, s.Burstiness)
	}
	// (n-1)/(last-first) over all eight starts, the failed one included.
	st := file["start_times"].([]any)
	want := 7 / (st[7].(float64) - st[0].(float64))
	if math.Abs(float64(s.ArrivalRate)-want) > 1e-9 {
		t.Errorf("rate %v, want %v", s.ArrivalRate, want)
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "configured request_rate 4, burstiness 1; measured from start_times") {
		t.Errorf("notes %q do not set the configured rate beside the measured one", s.Notes)
	}
	// vLLM's goodput rule: TPOT 0 for a request of one output token. The
	// failed request is a miss, in the denominator (vLLM leaves it out).
	a := s.attainment(SLO{TPOT: 1}, false)
	if !a.Exact() || math.Abs(float64(a.Low)-1.0/8) > 1e-9 {
		t.Errorf("attainment of tpot ≤ 1 ms = %+v, want 1/8 (the one-token request of 7 completed and 1 failed)", a)
	}
}

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := string(comparetest.BenchJSON(comparetest.Draw(comparetest.Chat, 1)[:5], nil))
	logLine := string(comparetest.RequestLog(comparetest.Draw(comparetest.RAG, 1)[:3], "acme", "m"))
	for _, c := range []struct {
		name, bench, real, want string
	}{
		{"truncated bench", write("t.json", full[:len(full)/2]), "", "truncated JSON"},
		{"empty bench", write("e.json", " \n"), "", "empty file"},
		{"bench not JSON", write("n.json", "completed: 3\n"), "", "not valid JSON"},
		{"bench of another format", write("p.json", `{"format":"goodput.profile","version":1}`), "", "not a benchmark result"},
		{"bench without fields", write("o.json", `{"hello": 1}`), "", "not a benchmark result"},
		{"pytorch format", write("pt.json", `[{"benchmark":{}}]`), "", "JSON array"},
		{"arrays of different lengths", write("l.json", `{"completed":2,"input_lens":[1,2],"output_lens":[1]}`), "", "different lengths"},
		{"no bench file", filepath.Join(dir, "missing.json"), "", "no such file"},
		{"empty log", "", write("empty.jsonl", ""), "empty file"},
		// A folder given as the log was called an empty file.
		{"a folder as the log", "", dir, "is a directory"},
		{"a last line of the wrong type", "", write("ty.jsonl", logLine+`{"isl":"x","route":"chat"}`+"\n"), "line 4: not a JSON request record"},
		{"a negative count", "", write("neg.jsonl", logLine+strings.Replace(strings.SplitAfter(logLine, "\n")[0], `"isl":`, `"isl":-`, 1)), "line 4: isl is -"},
		{"a BOM before a negative time", "", write("bom.jsonl", "\xef\xbb\xbf"+strings.Replace(logLine, `"ttft_ms":`, `"ttft_ms":-`, 1)), "line 1: ttft_ms is -"},
		// Counts no engine reports and times no clock measured (a probe:
		// an osl of 1e30 or 2.5 was read).
		{"a fractional count", "", write("frac.jsonl", regexp.MustCompile(`"osl":\d+`).ReplaceAllString(logLine, `"osl":2.5`)), "line 1: osl is 2.5: want a whole number of tokens"},
		{"a huge count", "", write("hc.jsonl", regexp.MustCompile(`"osl":\d+`).ReplaceAllString(logLine, `"osl":1e30`)), "line 1: osl is 1e+30: want a whole number of tokens from 0 to 2147483647"},
		{"a huge time", "", write("ht.jsonl", regexp.MustCompile(`"e2e_ms":[0-9.]+`).ReplaceAllString(logLine, `"e2e_ms":1e300`)), "line 1: e2e_ms is 1e+300: want milliseconds"},
		{"log of another tenant", "", write("o.jsonl", logLine), "no inference request of tenant nobody"},
		{"bench as real", "", write("b.jsonl", full), "a benchmark result, not real traffic"},
		{"real not JSON", "", write("x.txt", "hello\n"), "not JSON"},
		{"profile of an unknown version", "", write("v.json", `{"format":"goodput.profile","version":9,"tenants":[]}`), "version 9"},
		{"JSON that is no source", "", write("j.json", "{\n\"a\": 1\n}\n"), "not a goodput profile"},
	} {
		var err error
		if c.bench != "" {
			_, err = ReadBenchFile(c.bench, BenchOptions{})
		} else {
			_, err = ReadReal(context.Background(), c.real, RealOptions{Filter: Filter{Tenant: "nobody"}})
		}
		var ie *InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want an input error with %q", c.name, err, c.want)
		}
	}
}

// Python's json module writes NaN and Infinity; they read as null.
func TestPythonNaN(t *testing.T) {
	s, err := ReadBench("nan.json", []byte(`{"completed": 3, "duration": 1.5, "mean_ttft_ms": NaN, "median_ttft_ms": 12.5, "std_ttft_ms": Infinity, "label": "a NaN Infinity b", "request_rate": "inf"}`), BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Label != "a NaN Infinity b" || present(s.TTFT.Mean()) || float64(s.TTFT.Quantile(0.5)) != 12.5 {
		t.Errorf("label %q, TTFT mean %v, median %v", s.Label, s.TTFT.Mean(), s.TTFT.Quantile(0.5))
	}
}

// ksOf is the exact KS statistic of two sorted samples.
func ksOf(xs, ys []float64) float64 {
	a, b := Dist{Samples: xs}, Dist{Samples: ys}
	return ksSamples(&a, &b)
}

func TestKSAndQuantiles(t *testing.T) {
	a := []float64{1, 2, 3, 4}
	b := []float64{3, 4, 5, 6}
	if d := ksOf(a, b); d != 0.5 {
		t.Errorf("KS = %v, want 0.5", d)
	}
	if d := ksOf(a, a); d != 0 {
		t.Errorf("KS of equal samples = %v", d)
	}
	if d := ksOf([]float64{1}, []float64{2}); d != 1 {
		t.Errorf("KS of disjoint samples = %v", d)
	}
	// numpy.percentile([1, 2, 3, 4], 90) = 3.7
	if q := stats.Quantile(a, 0.9); math.Abs(q-3.7) > 1e-12 {
		t.Errorf("p90 = %v, want 3.7", q)
	}
	// A histogram: 10 values ≤ 10, 10 in (10, 20], 0 above.
	h := histDist([]float64{10, 20}, []float64{10, 10, 0})
	if q := h.Quantile(0.75); float64(q) != 15 {
		t.Errorf("histogram p75 = %v, want 15", q)
	}
	// Bucketed KS against samples looks at the bounds only: a lower bound.
	s := sampleDist([]float64{1, 1, 1, 1, 1, 19, 19, 19, 19, 19})
	k := ksStat(&s, &h)
	if k.Method != "buckets" || k.Points != 2 || float64(k.D) != 0 {
		t.Errorf("bucketed KS = %+v, want 0 at 2 bounds", k)
	}
	o := sampleDist([]float64{5, 5, 5, 5, 5, 15, 15, 15, 15, 15})
	if ex := ksSamples(&s, &o); ex <= float64(k.D) {
		t.Errorf("exact KS %v is not above the bucketed %v", ex, k.D)
	}
}

func TestParseSLO(t *testing.T) {
	o, err := ParseSLO("ttft:500, tpot:50,e2el:10000")
	if err != nil || o != (SLO{TTFT: 500, TPOT: 50, E2EL: 10000}) || o.String() != "ttft:500,tpot:50,e2el:10000" {
		t.Errorf("%+v %v", o, err)
	}
	// A bound of 0 ms is one (only a 0 meets it), as goodput bench reads
	// it; e2e is e2el.
	if o, err := ParseSLO("ttft:0,e2e:100"); err != nil || o != (SLO{TTFT: zeroBound, E2EL: 100}) || o.String() != "ttft:0,e2el:100" {
		t.Errorf("ttft:0,e2e:100: %+v %v", o, err)
	}
	for _, bad := range []string{"", " , ", "ttft", "ttft:-1", "ttft:x", "latency:5", "ttft:NaN", "tpot:+Inf"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// A request log's largest figures (counts of 2^31 − 1 tokens, times of
// 9.2e12 ms; past them a record is refused) and figures beyond what an
// int64 holds are printed as the numbers they are, never as an int64's
// wrapped value, in the table and the findings.
func TestHugeFiguresPrinted(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "huge.jsonl")
	var b strings.Builder
	for i, v := range []string{"2147483647", "2147483646", "2147483000"} {
		b.WriteString(`{"time":"2026-01-01T00:00:0` + string(rune('0'+i)) + `Z","route":"chat","outcome":"ok","isl":` + v + `,"osl":` + v + `,"ttft_ms":` + v + `000,"e2e_ms":9.2e12}` + "\n")
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	syn, rl := readBoth(t, benchFile(t, comparetest.Chat, 1, nil), p, Filter{})
	r := Compare(syn, rl, SLO{}, DefaultTolerances())
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String() + strings.Join(r.Findings, "\n")
	for _, bad := range []string{"9,223,372,036,854,775,80", "--"} {
		if strings.Contains(text, bad) {
			t.Errorf("the text holds %q:\n%s", bad, text)
		}
	}
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1e20, "1e+20"}, {-2e19, "-2e+19"}, {1e300, "1e+300"}, {math.Inf(-1), "-∞"}, {math.Inf(1), "∞"},
		{123456789012, "123,456,789,012"}, {-1234.4, "-1,234"}, {999_999_999_999_999, "999,999,999,999,999"},
		{999.6, "1,000"}, {-999.5, "-1,000"}, {999.4, "999"}, {12.34, "12.3"},
	} {
		if got := fmtNum(c.f); got != c.want {
			t.Errorf("fmtNum(%g) = %q, want %q", c.f, got, c.want)
		}
	}
}

// The last line of a log still being written (or of a gateway stopped
// mid-write) is cut: it is left out with a note, not the whole log refused
// (a new user's probe). A first line longer than the 1 MiB the format was
// told by (a record whose model a client made 1.5 MB long) is read whole.
func TestRequestLogCutLastLineAndLongFirstLine(t *testing.T) {
	dir := t.TempDir()
	logLine := string(comparetest.RequestLog(comparetest.Draw(comparetest.RAG, 1)[:3], "acme", "m"))
	path := filepath.Join(dir, "cut.jsonl")
	if err := os.WriteFile(path, []byte(logLine+logLine[:40]), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadReal(context.Background(), path, RealOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 3 || !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "the last line (4) is not a whole record") }) {
		t.Errorf("%d requests, notes %q: want 3 and the cut line noted", s.Requests, s.Notes)
	}
	// A record cut within the log (a gateway stopped in it; the next run
	// goes on from a new line) is left out too.
	if err := os.WriteFile(path, []byte(logLine+logLine[:40]+"\n"+logLine), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = ReadReal(context.Background(), path, RealOptions{})
	if err != nil || s.Requests != 6 || !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.Contains(n, "line 4 is not a whole record") }) {
		t.Errorf("%v: %d requests, notes %q: want 6 and the cut line noted", err, s.Requests, s.Notes)
	}
	big := strings.Replace(logLine, `"model":"m"`, `"model":"`+strings.Repeat("m", 3<<20/2)+`"`, 1)
	if len(big) < 1<<20 {
		t.Fatal("the log's first line names no model m")
	}
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadReal(context.Background(), path, RealOptions{}); err != nil || s.Requests != 3 {
		t.Errorf("a 1.5 MB first line: %v, want the log read", err)
	}
}
