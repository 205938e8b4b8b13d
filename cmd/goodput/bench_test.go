package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goodput/goodput/bench"
	"github.com/goodput/goodput/sim"
)

func TestBenchBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--request-rate", "fast"}, "--request-rate"},
		{[]string{"--request-rate", "-3"}, "--request-rate"},
		{[]string{"--request-rate", "1e-300"}, "from 1e-06"},
		{[]string{"--sweep", "request-rate=1e-300,1"}, "from 1e-06"},
		{[]string{"--concurrency", "4", "--request-rate", "5"}, "excludes --request-rate"},
		{[]string{"--concurrency", "4", "--max-concurrency", "5"}, "excludes --max-concurrency"},
		{[]string{"--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"--max-concurrency", "-1"}, "--max-concurrency"},
		{[]string{"--burstiness", "0"}, "--burstiness"},
		{[]string{"--goodput", "itl:5"}, "unknown metric"},
		{[]string{"--goodput", "ttft"}, "NAME:MILLISECONDS"},
		{[]string{"--endpoint", "/v1/embeddings"}, "--endpoint"},
		{[]string{"--label", "color=red"}, "--label"},
		{[]string{"--num-prompts", "0"}, "--num-prompts"},
		// Past the caps (a probe: 2^31 prompts ended the process out of
		// memory, a rate of 1e300 printed 300 digits, an SLO of 1e300 ms
		// overflowed into a bound of 0 and 1e-9 ms into none).
		{[]string{"--num-prompts", "2147483648"}, "--num-prompts must be from 1 to 1000000"},
		{[]string{"--num-prompts", "1000001"}, "--num-prompts must be from 1 to 1000000"},
		{[]string{"--warmup", "1000001"}, "--warmup must be from 0 to 1000000"},
		{[]string{"--request-rate", "1e300"}, "to 1e+06, or inf"},
		{[]string{"--sweep", "request-rate=1,1e7"}, "to 1e+06, or inf"},
		{[]string{"--goodput", "ttft:1e300"}, "at most 86400000 milliseconds"},
		{[]string{"--goodput", "tpot:1e-9"}, "under a nanosecond"},
		{[]string{"--metric-percentiles", "101"}, "--metric-percentiles"},
		{[]string{"--percentile-metrics", "ttft,speed"}, "--percentile-metrics"},
		{[]string{"--percentile-metrics", "ttft,client_queue_time"}, "needs --max-concurrency"},
		{[]string{"--percentile-metrics", "e2el_including_client_queue", "--max-concurrency", "4"}, "needs a finite --request-rate"},
		{[]string{"--percentile-metrics", "client_queue_time", "--sweep", "request-rate=1,2"}, "needs --max-concurrency"},
		{[]string{"--base-url", "localhost:8000"}, "--base-url"},
		{[]string{"--base-url", "http://user:pw@host:1"}, "credentials"},
		{[]string{"--header", "no-separator"}, "KEY:VALUE"},
		{[]string{"--shape", "huge"}, "shape"},
		{[]string{"stray"}, "unexpected argument"},
		// No file the run writes is one it reads or writes besides (a new
		// user's probe: the sweep's page overwrote its result).
		{[]string{"--sweep", "request-rate=1,2", "--result", "x.html"}, "--result and --report are the same file (x.html)"},
		{[]string{"--sweep", "request-rate=1,2", "--result", "r.json", "--report", "./r.json"}, "--result and --report are the same file"},
		{[]string{"--dataset", "p.jsonl", "--result", "p.jsonl"}, "--dataset and --result are the same file"},
	} {
		code, out, errOut := runCLI(append([]string{"bench"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q (want exit 2 and %q)", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := runCLI("bench", "-h"); code != 0 || !strings.Contains(errOut, "--max-concurrency") {
		t.Errorf("-h: exit %d %q", code, errOut)
	}
}

func TestBenchUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, out, errOut := runCLI("bench", "--base-url", "http://"+addr, "--num-prompts", "3")
	if code != 1 || !strings.Contains(errOut, "cannot reach the server at http://"+addr) || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A server that echoes the Authorization header in its errors: the key
// must not reach any output, the result file included.
func TestBenchKeyNeverPrinted(t *testing.T) {
	const key = "sk-gp-topsecret-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" && r.URL.Query().Get("ok") == "" && strings.Contains(r.Header.Get("Authorization"), "models-fails") {
			http.Error(w, "bad key "+r.Header.Get("Authorization"), http.StatusUnauthorized)
			return
		}
		http.Error(w, `{"error":{"message":"unknown key `+r.Header.Get("Authorization")+` or `+r.Header.Get("X-Api-Key")+`"}}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	result := filepath.Join(t.TempDir(), "r.json")

	code, out, errOut := runCLI("bench", "--base-url", srv.URL, "--model", "m", "--num-prompts", "2",
		"--api-key", key, "--result", result, "--header", "X-Other: "+key, "--header", "X-Api-Key: sk-topsecret-other")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	file, _ := os.ReadFile(result)
	for what, s := range map[string]string{"stdout": out, "stderr": errOut, "result": string(file)} {
		if strings.Contains(s, "topsecret") {
			t.Errorf("the key is in %s:\n%s", what, s)
		}
	}
	if !strings.Contains(errOut, "HTTP 401") || !strings.Contains(errOut, "[redacted]") {
		t.Errorf("stderr should list the 401 with the key redacted: %s", errOut)
	}

	// A key given as a header, and one from the environment, on the
	// /v1/models error path.
	code, out, errOut = runCLI("bench", "--base-url", srv.URL, "--num-prompts", "2", "--header", "Authorization: Bearer models-fails-"+key)
	if code != 1 || strings.Contains(out+errOut, "topsecret") || !strings.Contains(errOut, "401") {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
	t.Setenv("OPENAI_API_KEY", "models-fails-"+key)
	code, out, errOut = runCLI("bench", "--base-url", srv.URL, "--num-prompts", "2")
	if code != 1 || strings.Contains(out+errOut, "topsecret") || !strings.Contains(errOut, "401") {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
}

func TestBenchAgainstSim(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{})
	go s.Serve(ln)
	defer s.Shutdown()
	result := filepath.Join(t.TempDir(), "r.json")
	code, out, errOut := runCLI("bench", "--base-url", "http://"+ln.Addr().String(), "--endpoint", "chat",
		"--num-prompts", "12", "--request-rate", "500", "--max-concurrency", "4", "--warmup", "2",
		"--goodput", "ttft:5000", "tpot:1000", "--metric-percentiles", "50,99", "--percentile-metrics", "ttft,e2el,client_queue_time,e2el_including_client_queue",
		"--label", "engine=sim,gpus=0", "--result", result)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"============ Serving Benchmark Result ============",
		"Successful requests:                     12",
		"Maximum request concurrency:             4",
		"Request rate configured (RPS):           500.00",
		"Request goodput (req/s):",
		"P50 TTFT (ms):", "P99 TTFT (ms):", "Mean E2EL (ms):",
		"---------------Client-side Queueing---------------", "P99 Client Queue Time (ms):",
		"P99 E2EL incl. Client Queue (ms):",
		"Label: engine sim · version unknown · precision unknown · gpus 0 · tp unknown · ISL ",
		"open loop, rate 500 req/s, burstiness 1, max concurrency 4 · percentile p50,p99 · goodput ",
		"(ttft:5000 tpot:1000)",
		"Arrival lateness p99 (ms):",
		"Warm-up (not in the figures above): 2 requests, 2 completed",
		"Prompt calibration: 1.000 tokens per word + 4.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Mean TPOT") {
		t.Error("TPOT printed though --percentile-metrics left it out")
	}
	raw, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	r := new(bench.Result)
	if err := json.Unmarshal(raw, r); err != nil {
		t.Fatal(err)
	}
	if r.Metrics["client_queue_time"] == nil || r.Metrics["e2el_including_client_queue"] == nil {
		t.Fatalf("no client queue metrics in the file: %v", r.Metrics)
	}
	if r.Completed != 12 || r.RequestGoodput == nil || r.Goodput.GoodRequests != 12 || r.Goodput.Warmup.Requests != 2 {
		t.Fatalf("result: %+v", r)
	}
}

// goodput bench stopped (Ctrl-C) after its first request was sent, the
// other three not yet due: the one cut in flight is the one failed request,
// the three never sent are said apart and are in no per-request array of
// the result file (found by a new-user probe: they were failed, with start
// times of 0).
func TestBenchStoppedEarly(t *testing.T) {
	url, stalled := stallingSim(t, 0)
	result := filepath.Join(t.TempDir(), "r.json")
	// Evenly spaced (a burstiness over a million) 100 s apart: the first
	// request at 0, the next at 100 s.
	code, out, errOut := benchUntil(t, stalled, "--base-url", url, "--endpoint", "chat", "--num-prompts", "4",
		"--request-rate", "0.01", "--burstiness", "1e7", "--result", result, "--no-calibrate")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Successful requests:                     0 ", "Failed requests:                         1 ",
		"Stopped early: 1 of the failed requests were cut in flight; 3 never sent (not in the figures)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"goodput bench: stopped early (context canceled): the figures cover the 1 of 4 requests sent; the 1 cut in flight count as failed, the 3 never sent are left out\n",
		"goodput bench: 1 failed requests; the first errors:\n  bench-",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "not sent") {
		t.Errorf("stderr lists a request never sent as failed:\n%s", errOut)
	}
	b, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.NumPrompts != 4 || r.Failed != 1 || len(r.StartTimes) != 1 || len(r.Errors) != 1 || len(r.InputLens) != 1 ||
		len(r.Goodput.RequestIDs) != 1 || r.Goodput.NotSent != 3 || r.Goodput.CutInFlight != 1 {
		t.Errorf("result: num_prompts %d, failed %d, start_times %v, errors %q, not sent %d, cut %d",
			r.NumPrompts, r.Failed, r.StartTimes, r.Errors, r.Goodput.NotSent, r.Goodput.CutInFlight)
	}
}

// The client-side queue's metrics are taken where a sweep sets the queue
// (or the rate) per step: a review found them refused for a
// max-concurrency sweep, whose every step has them.
func TestBenchQueueMetricsWithASweep(t *testing.T) {
	for _, args := range [][]string{
		{"--sweep", "max-concurrency=1,2,4", "--request-rate", "10", "--percentile-metrics", "ttft,client_queue_time,e2el_including_client_queue"},
		{"--sweep", "request-rate=1,2,4", "--max-concurrency", "8", "--percentile-metrics", "e2el_including_client_queue"},
		{"--max-concurrency", "8", "--request-rate", "5", "--percentile-metrics", "client_queue_time,e2el_including_client_queue"},
	} {
		var stderr strings.Builder
		if a, code := parseBenchArgs(args, &stderr); a == nil {
			t.Errorf("%v: exit %d: %s", args, code, stderr.String())
		}
	}
}
