package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/bench/sweep"
	"github.com/goodput/goodput/sim"
	"github.com/valyala/fasthttp"
)

func TestBenchSweepBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sweep", "rate=1,2"}, "--sweep: "},
		{[]string{"--sweep", "request-rate=2,1"}, "must increase"},
		{[]string{"--sweep", "max-concurrency=1.5"}, "whole number"},
		{[]string{"--sweep", "request-rate=1,2", "--request-rate", "3"}, "excludes --request-rate"},
		{[]string{"--sweep", "request-rate=1,2", "--concurrency", "3"}, "excludes --concurrency"},
		{[]string{"--sweep", "max-concurrency=1,2", "--max-concurrency", "3"}, "excludes --max-concurrency"},
		{[]string{"--sweep", "concurrency=1,2", "--burstiness", "0.5"}, "excludes --burstiness"},
		{[]string{"--sweep", "request-rate=1", "--sweep-objective", "1.5"}, "--sweep-objective"},
		{[]string{"--report", "r.html"}, "--report needs --sweep"},
		{[]string{"--sweep-objective", "0.9"}, "--sweep-objective needs --sweep"},
	} {
		code, out, errOut := runCLI(append([]string{"bench"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q (want exit 2 and %q)", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := runCLI("bench", "-h"); code != 0 || !strings.Contains(errOut, "-sweep") || !strings.Contains(errOut, "-report") {
		t.Errorf("-h does not show the sweep flags: exit %d %q", code, errOut)
	}
}

// goodput bench --sweep against the simulator: a summary per step, the
// table with the knee, the result file with every step and the report
// next to it.
func TestBenchSweepAgainstSim(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Config{TTFT: time.Millisecond, MaxTraces: -1})
	go s.Serve(ln)
	defer s.Shutdown()
	dir := t.TempDir()
	result := filepath.Join(dir, "sweep.json")
	code, out, errOut := runCLI("bench", "--base-url", "http://"+ln.Addr().String(), "--endpoint", "chat",
		"--num-prompts", "6", "--sweep", "max-concurrency=1,2,3", "--warmup", "1", "--goodput", "ttft:5000",
		"--label", "engine=sim,gpus=0", "--result", result, "--no-calibrate")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"Step 1/3: max-concurrency 1\n", "Step 3/3: max-concurrency 3\n",
		"step 2/3 max-concurrency 2: 6 completed, 0 failed, ",
		"Maximum request concurrency:             3",
		"Capacity sweep max-concurrency=1,2,3 (latencies in ms)",
		"Label: engine sim · version unknown · precision unknown · gpus 0 · tp unknown · ISL ",
		"open loop, max concurrency 1 to 3 in 3 steps, request-rate inf",
		"goodput SLO ttft:5000 ms, objective 99%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "Serving Benchmark Result"); n != 3 {
		t.Errorf("%d step summaries, want 3", n)
	}
	r := readSweepResult(t, result)
	if len(r.Steps) != 3 || len(r.Results) != 3 || r.Kind != sweep.MaxConcurrency || r.Ladder != "max-concurrency=1,2,3" {
		t.Fatalf("result: %d steps, %d results, %s %s", len(r.Steps), len(r.Results), r.Kind, r.Ladder)
	}
	for i, st := range r.Steps {
		res := r.Results[i]
		if st.Completed != 6 || res.Completed != 6 || *res.MaxConcurrency != i+1 || res.Goodput.Warmup == nil || st.Attainment != 1 {
			t.Errorf("step %d: %+v; result completed %d, max concurrency %v", i, st, res.Completed, res.MaxConcurrency)
		}
	}
	if !strings.Contains(out, r.Knee.Note) {
		t.Errorf("stdout lacks the knee's note %q", r.Knee.Note)
	}
	page, err := os.ReadFile(filepath.Join(dir, "sweep.html"))
	if err != nil {
		t.Fatalf("no report next to the result: %v", err)
	}
	d := xml.NewDecoder(bytes.NewReader(page))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("report: %v", err)
		}
	}
	if !strings.Contains(string(page), "Capacity curve: max-concurrency=1,2,3") || strings.Count(string(page), "<tr data-step=") != 3 {
		t.Errorf("report lacks its title or its 3 rows")
	}

	// --report elsewhere, no result file; a concurrency sweep.
	report := filepath.Join(dir, "elsewhere.html")
	code, out, errOut = runCLI("bench", "--base-url", "http://"+ln.Addr().String(), "--num-prompts", "2",
		"--sweep", "concurrency=1,2", "--report", report, "--no-calibrate")
	if code != 0 || !strings.Contains(out, "closed loop, concurrency 1 to 2 in 2 steps") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(report); err != nil {
		t.Errorf("no report at --report: %v", err)
	}
}

// A sweep whose server is not there fails before the first step, with
// nothing written.
func TestBenchSweepUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	result := filepath.Join(t.TempDir(), "s.json")
	code, out, errOut := runCLI("bench", "--base-url", "http://"+addr, "--num-prompts", "2", "--sweep", "request-rate=1,2", "--result", result)
	if code != 1 || !strings.Contains(errOut, "cannot reach the server") || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(result); err == nil {
		t.Error("a result file was written")
	}
}

// stallingSim serves the simulator through a handler that lets the first
// pass generation requests through and stalls every later one after its
// first token, until the client goes; stalled is closed when the first of
// them arrives (a request the client has sent and that is still in
// flight).
func stallingSim(t *testing.T, pass int) (url string, stalled <-chan struct{}) {
	t.Helper()
	s := sim.New(sim.Config{TTFT: time.Millisecond, MaxTraces: -1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	ch := make(chan struct{})
	var once sync.Once
	h := s.Handler()
	fs := &fasthttp.Server{MaxIdleWorkerDuration: 50 * time.Millisecond, CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() && n.Add(1) > int64(pass) {
			ctx.Request.Header.Set("X-Sim-Fault", "stall-after=1")
			once.Do(func() { close(ch) })
		}
		h(ctx)
	}}
	served := make(chan error, 1)
	go func() { served <- fs.Serve(ln) }()
	t.Cleanup(func() {
		s.Shutdown()
		fs.Shutdown()
		<-served
	})
	return "http://" + ln.Addr().String(), ch
}

// benchUntil runs goodput bench with args, its context ended (as by
// Ctrl-C) once stop is closed.
func benchUntil(t *testing.T, stop <-chan struct{}, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	a, code := loadBenchArgs(args, &e)
	if a == nil {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	code = runBench(ctx, a, &o, &e)
	return code, o.String(), e.String()
}

// A sweep stopped (Ctrl-C) while a step runs leaves that step out: it is
// not a step done, so it is neither the knee nor on the curve, in print,
// in the result file or in the report (found by a new-user probe: the cut
// step, 0 completed, was the knee, and "2 of 2 steps ran").
func TestBenchSweepStoppedMidStep(t *testing.T) {
	url, stalled := stallingSim(t, 4)
	dir := t.TempDir()
	result := filepath.Join(dir, "sw.json")
	code, out, errOut := benchUntil(t, stalled, "--base-url", url, "--endpoint", "chat", "--num-prompts", "4",
		"--sweep", "request-rate=1000,2000", "--result", result, "--no-calibrate")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "step 1/2 request-rate 1000 req/s: 4 completed, 0 failed") || strings.Contains(out, "step 2/2") ||
		strings.Contains(out, "Step 2/2") || strings.Contains(out, "knee at") {
		t.Errorf("stdout, want step 1 alone and no knee:\n%s", out)
	}
	stopped := "the sweep was stopped (context canceled) during step 2 of 2 (request-rate 2000 req/s), which is left out: 1 of 2 steps ran"
	if !strings.Contains(errOut, "goodput bench: "+stopped+"\n") {
		t.Errorf("stderr lacks %q:\n%s", stopped, errOut)
	}
	r := readSweepResult(t, result)
	if len(r.Steps) != 1 || len(r.Results) != 1 || r.Steps[0].Completed != 4 || r.Knee.Found || r.Stopped != stopped {
		t.Errorf("result file: %d steps, %d results, knee %+v, stopped %q", len(r.Steps), len(r.Results), r.Knee, r.Stopped)
	}
	page, err := os.ReadFile(filepath.Join(dir, "sw.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<tr data-step="); n != 1 || !strings.Contains(string(page), `<p class="meta" id="stopped">`+stopped+"</p>") ||
		strings.Contains(string(page), `id="knee"`) {
		t.Errorf("report: %d rows, want 1 and the stop said, no knee line", n)
	}
}

// readSweepResult reads a sweep's result file.
func readSweepResult(t *testing.T, path string) sweep.Result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r sweep.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}
