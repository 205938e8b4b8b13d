package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The machine's memory is not the tests' to read: max_body_memory
	// takes the default of a process whose limit is unknown.
	readSystemFile = func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	// Every gateway served with the I/O loops on, as CI runs them too;
	// before the child's branch, so that a re-executed gateway has them.
	testIOLoop = testenv.IOLoop()
	if os.Getenv(childEnv) == "1" {
		// Re-executed by a test as the goodput binary (see startChild).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// net/http keeps idle client connections' goroutines until they close.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
	)
}

// serveRun is serve() running in the background for a test.
type serveRun struct {
	serving
	logs   *syncBuffer
	cancel context.CancelFunc // starts the shutdown
	cutNow chan struct{}      // closed: a second signal (cut what is in flight)
	done   chan error         // serve's result, once it returned
}

// launchServe runs serve() with cfg and waits until it accepts requests;
// the test stops it (cancel, then done).
func launchServe(t *testing.T, cfg *config.Config) *serveRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &serveRun{logs: &syncBuffer{}, cancel: cancel, cutNow: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan serving, 1)
	go func() { r.done <- serve(ctx, cfg, log.New(r.logs, "", 0), func(s serving) { ready <- s }, r.cutNow) }()
	select {
	case r.serving = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	return r
}

// startServe runs serve() with cfg until the test ends.
func startServe(t *testing.T, cfg *config.Config) (serving, *syncBuffer) {
	t.Helper()
	r := launchServe(t, cfg)
	t.Cleanup(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return r.serving, r.logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// The embedded default: no upstream, the simulator runs in-process. Sends a
// mix of requests and checks conservation: log lines = requests sent = the
// sum of goodput_requests_total.
func TestServeEmbeddedDefaultConservation(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", RequestLog: logPath}
	s, logs := startServe(t, cfg)
	if first, _, _ := strings.Cut(logs.String(), "\n"); !strings.Contains(first, "built-in simulator") {
		t.Fatalf("first log line does not say the simulator is the upstream: %q", first)
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	bodies := []string{
		`{"model":"sim-llama","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"sim-llama","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"sim-llama","stream":true,"max_tokens":3,"prompt":"once upon"}`,
		`{"model":"nope","stream":true,"messages":[]}`, // the engine answers 404
		`not json`, // the engine answers 400
	}
	paths := []string{"/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/v1/chat/completions", "/v1/chat/completions"}
	const rounds = 6
	sent := 0
	var wg sync.WaitGroup
	for r := 0; r < rounds; r++ {
		for i := range bodies {
			wg.Add(1)
			sent++
			go func(i, r int) {
				defer wg.Done()
				req, _ := http.NewRequest("POST", "http://"+s.Proxy+paths[i], strings.NewReader(bodies[i]))
				req.Header.Set("X-Tenant", fmt.Sprintf("t%d", r%2))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}(i, r)
		}
	}
	wg.Add(1)
	sent++
	go func() {
		defer wg.Done()
		resp, err := client.Get("http://" + s.Proxy + "/v1/models")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	wg.Wait()

	// Records are written when each response ends; wait for all of them.
	var total float64
	deadline := time.Now().Add(5 * time.Second)
	for {
		total = scrapeSum(t, "http://"+s.Admin+"/metrics", "goodput_requests_total")
		if int(total) == sent || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if int(total) != sent {
		t.Fatalf("sum of goodput_requests_total = %v, sent %d", total, sent)
	}
	// The log is flushed on a timer; wait for every line.
	var lines []map[string]any
	for time.Now().Before(deadline.Add(2 * time.Second)) {
		lines = readLog(t, logPath)
		if len(lines) >= sent {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lines) != sent {
		t.Fatalf("%d log lines, sent %d", len(lines), sent)
	}
	outcomes := map[string]int{}
	for _, l := range lines {
		outcomes[l["outcome"].(string)]++
		for _, k := range []string{"time", "request_id", "tenant", "route", "status", "outcome", "isl", "osl", "ttft_ms", "e2e_ms", "itl_ms", "upstream"} {
			if _, ok := l[k]; !ok {
				t.Fatalf("log line without %q: %v", k, l)
			}
		}
	}
	if outcomes["ok"] != 3*rounds+1 || outcomes["client_error"] != 2*rounds {
		t.Fatalf("outcomes %v", outcomes)
	}
	// Every record written: the log's writer holds none, and waits on none.
	if m := scrape(t, "http://"+s.Admin+"/metrics"); !strings.Contains(m, "\ngoodput_request_log_write_wait_seconds 0\n") {
		t.Errorf("no goodput_request_log_write_wait_seconds 0 in /metrics:\n%s", m)
	}
	if h, err := client.Get("http://" + s.Admin + "/readyz"); err != nil || h.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", h, err)
	} else {
		h.Body.Close()
	}
}

func scrapeSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	if f, ok := fams[name]; ok {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func readLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", write("a.yaml", "upstream: http://x\nlisten_port: 3\n")}, `unknown key "listen_port"`},
		{[]string{"--config", write("b.yaml", "timeouts: {idle: fast}\n")}, `"fast" is not a duration`},
		{[]string{"--config", write("c.yaml", "max_body_bytes: -1\n")}, "max_body_bytes"},
		{[]string{"--idle-timeout", "soon"}, "idle-timeout"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"--upstream", "ftp://x", "--listen", "127.0.0.1:0", "--admin-listen", "off"}, "scheme must be http"},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"serve"}, c.args...), io.Discard, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want an error naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(p, []byte("upstream: http://a:1\nlisten: ':1'\ntimeouts: {idle: 3s, connect: 1s}\n"), 0o644)
	cfg, err := loadServeConfig([]string{"--config", p, "--upstream", "http://b:2", "--idle-timeout", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream != "http://b:2" || cfg.Listen != ":1" || cfg.Timeouts.Idle.D() != 5*time.Second || cfg.Timeouts.Connect.D() != time.Second {
		t.Fatalf("%+v", cfg)
	}
}

// The upstream keep-alive is set by the file (timeouts.upstream_keepalive)
// or the flag, the flag winning.
func TestUpstreamKeepaliveSetting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(p, []byte("upstream: http://a:1\ntimeouts: {upstream_keepalive: 45s}\n"), 0o644)
	cfg, err := loadServeConfig([]string{"--config", p}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Timeouts.UpstreamKeepalive.D(); got != 45*time.Second {
		t.Fatalf("file: upstream_keepalive %v, want 45s", got)
	}
	cfg, err = loadServeConfig([]string{"--config", p, "--upstream-keepalive", "2m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Timeouts.UpstreamKeepalive.D(); got != 2*time.Minute {
		t.Fatalf("flag: upstream_keepalive %v, want 2m", got)
	}
}

func TestEmbeddedDefaults(t *testing.T) {
	cfg := &config.Config{}
	note := embeddedDefaults(cfg)
	if cfg.Sim.TTFT.D() != demoTTFT || cfg.Sim.ITL.D() != demoITL || cfg.DefaultSLO != demoClass || cfg.SLO.SLOs[demoClass] == nil {
		t.Fatalf("%+v", cfg)
	}
	if !strings.Contains(note, "demo") || cfg.SLO.Validate() != nil {
		t.Fatalf("note %q, classes valid: %v", note, cfg.SLO.Validate())
	}
	// A real upstream, or settings of the user's own, are left alone.
	real := &config.Config{Upstream: "http://e:8000"}
	if embeddedDefaults(real) != "" || real.DefaultSLO != "" {
		t.Fatalf("touched a real upstream's config: %+v", real)
	}
	own := &config.Config{Sim: config.Sim{ITL: 1}}
	embeddedDefaults(own)
	if own.Sim.TTFT != 0 || own.Sim.ITL != 1 {
		t.Fatalf("overrode the user's simulator settings: %+v", own.Sim)
	}
}

// A shutdown waits shutdown_grace for the requests in flight, then cuts
// those still streaming: the client sees an abnormal end, serve returns
// soon after, and the cut stream is in the request log.
func TestServeShutdownCutsLongStreams(t *testing.T) {
	r, logPath, body := serveWithLongStream(t, 300*time.Millisecond)
	stopAt := time.Now()
	r.cancel()
	if _, err := io.Copy(io.Discard, body); err == nil {
		t.Fatal("the cut stream ended like a complete one")
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10s after the shutdown began")
	}
	took := time.Since(stopAt)
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("serve returned %v after the shutdown began (grace 300ms)", took)
	}
	oneCutRecord(t, logPath)
	if !strings.Contains(r.logs.String(), "cutting 1 requests") {
		t.Fatalf("log: %s", r.logs.String())
	}
	t.Logf("serve returned %v after the shutdown began", took)
}

// A stream whose client reads slowly (here: not at all) is cut at the end
// of shutdown_grace like any other: its record is in the request log
// before serve returns, and serve returns nil, long before its 5 s for the
// cut requests' records. Before, the cut did not reach it: serve logged
// "1 requests still without a record 5s after the cut" and returned with an
// empty log (a probe saw it with curl --limit-rate 2k).
func TestServeShutdownCutsALaggingStream(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "requests.jsonl")
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off", RequestLog: logPath,
		ShutdownGrace: cfgtypes.Duration(300 * time.Millisecond)}
	// The simulator streams as fast as it can: far more than the client's
	// socket and its lag queue take.
	cfg.Sim.TTFT, cfg.Sim.ITL = cfgtypes.Duration(time.Millisecond), 1
	r := launchServe(t, cfg)
	t.Cleanup(r.cancel)
	c, err := net.Dial("tcp", r.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"sim-llama","stream":true,"max_tokens":100000,"ignore_eos":true,"messages":[]}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	// The client reads the response's first byte, and nothing more: its
	// stream lags from its first events on. That byte says the stream is
	// in flight: the shutdown has a stream to cut (a shutdown begun
	// before the gateway had read the request found none in flight,
	// in about 2% of runs on a machine kept busy).
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	stopAt := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("serve: %v; log:\n%s", err, r.logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve still running 15s after the shutdown began")
	}
	if took := time.Since(stopAt); took > 3*time.Second {
		t.Fatalf("serve returned %v after the shutdown began (grace 300ms); log:\n%s", took, r.logs.String())
	}
	oneCutRecord(t, logPath)
	if strings.Contains(r.logs.String(), "without a record") {
		t.Fatalf("log: %s", r.logs.String())
	}
}

// serveWithLongStream runs serve with a request log and shutdown_grace
// grace, starts a stream of about 200 s of tokens through it and reads its
// first byte: the stream is in flight. The test stops serve.
func serveWithLongStream(t *testing.T, grace time.Duration) (r *serveRun, logPath string, body io.Reader) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), "requests.jsonl")
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off", RequestLog: logPath,
		ShutdownGrace: cfgtypes.Duration(grace)}
	r, body = launchWithLongStream(t, cfg)
	return r, logPath, body
}

// launchWithLongStream runs serve with cfg (its simulator streaming every
// 20 ms) and starts a stream that will not end on its own; it returns once
// the stream's first bytes have come.
func launchWithLongStream(t *testing.T, cfg *config.Config) (r *serveRun, body io.Reader) {
	t.Helper()
	cfg.Sim.ITL = cfgtypes.Duration(20 * time.Millisecond)
	r = launchServe(t, cfg)
	t.Cleanup(r.cancel)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Post("http://"+r.Proxy+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":10000,"ignore_eos":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return r, resp.Body
}

// oneCutRecord checks that the request log holds one record, the stream's,
// cut by the shutdown.
func oneCutRecord(t *testing.T, logPath string) {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"outcome":"timeout"`) || !strings.Contains(lines[0], "shutting down") {
		t.Fatalf("request log after the cut: %q", data)
	}
}

// With the configuration's otel section on, serve traces each request and
// exports it (and the GenAI metrics) to the OTLP endpoint before it returns.
func TestServeExportsOTLP(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off"}
	cfg.OTel.Traces, cfg.OTel.Metrics, cfg.OTel.Endpoint = true, true, col.URL
	r := launchServe(t, cfg)
	s, logs, cancel, done := r.serving, r.logs, r.cancel, r.done
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post("http://"+s.Proxy+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if paths["/v1/traces"] == 0 || paths["/v1/metrics"] == 0 {
		t.Fatalf("collector got %v, want traces and metrics; log:\n%s", paths, logs.String())
	}
	if !strings.Contains(logs.String(), "OpenTelemetry over OTLP/HTTP: traces on, metrics on") {
		t.Errorf("log does not say OpenTelemetry is on:\n%s", logs.String())
	}
}

// gc_percent sets the collector's target (10 when unset), unless GOGC is
// set in the environment, which wins and is named in the log line.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct {
		percent int
		env     string
		want    int
		note    string
	}{
		{0, "", defaultGCPercent, "gc_percent 10"},
		{60, "", 60, "gc_percent 60"},
		{60, "150", 100, "GOGC=150 from the environment (gc_percent not applied)"},
	} {
		debug.SetGCPercent(100)
		note := setGCPercent(c.percent, c.env)
		if got := debug.SetGCPercent(100); got != c.want || note != c.note {
			t.Errorf("setGCPercent(%d, %q): target %d, note %q; want %d, %q", c.percent, c.env, got, note, c.want, c.note)
		}
	}
}

// A second signal during the drain cuts what is in flight at once, long
// before shutdown_grace, and the cut stream still has its record.
func TestServeSecondSignalCutsNow(t *testing.T) {
	r, logPath, _ := serveWithLongStream(t, time.Minute)
	r.cancel()      // the first signal: drain
	close(r.cutNow) // the second: cut now
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve still running 20s after a second signal (grace 1m)")
	}
	oneCutRecord(t, logPath)
	if !strings.Contains(r.logs.String(), "cutting 1 requests still in flight on a second signal") {
		t.Fatalf("log: %s", r.logs.String())
	}
}

// uploadOverLimit starts a chat request whose head declares a body over
// serve's 1 KiB limit, sends 4 KiB of it and reads the 413 the gateway
// answers at once: the connection is now in its lingering close, which
// drains the rest of the upload so that the answer is not lost to a reset.
func uploadOverLimit(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20)
	if _, err := c.Write(bytes.Repeat([]byte("a"), 4<<10)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return c
}

// waitLog waits until serve's log holds s.
func waitLog(t *testing.T, r *serveRun, s string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !strings.Contains(r.logs.String(), s); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %q in the log: %s", s, r.logs.String())
		}
	}
}

// A shutdown waits, within its grace, for the lingering closes of error
// answers given before their request was read (an upload over the limit):
// the process's exit would turn each into a reset, and a client still
// uploading would lose its 413 and send the upload again. (This test sees
// serve return, not the process exit: before the change serve returned at
// once, with the client still uploading.)
func TestServeShutdownWaitsForALingeringClose(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off", MaxBodyBytes: 1 << 10,
		ShutdownGrace: cfgtypes.Duration(time.Minute)}
	r := launchServe(t, cfg)
	t.Cleanup(r.cancel)
	c := uploadOverLimit(t, r.Proxy)
	r.cancel()
	waitLog(t, r, "shutting down")
	// The client goes on uploading for half a second (well past the
	// 100 ms fasthttp's shutdown takes to see no connection of its own).
	chunk := bytes.Repeat([]byte("a"), 16<<10)
	for i := 0; i < 10; i++ {
		if _, err := c.Write(chunk); err != nil {
			t.Fatalf("upload cut during the shutdown: %v", err)
		}
		select {
		case <-r.done:
			t.Fatal("serve returned while a client was still sending the body its 413 answered")
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.Close()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10s after the client closed")
	}
	if strings.Contains(r.logs.String(), "cutting") {
		t.Fatalf("a cut within the grace: %s", r.logs.String())
	}
}

// Once the grace is over, a lingering close ends with the cut, and the log
// says it was there.
func TestServeShutdownCutsALingeringClose(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off", MaxBodyBytes: 1 << 10,
		ShutdownGrace: cfgtypes.Duration(200 * time.Millisecond)}
	r := launchServe(t, cfg)
	t.Cleanup(r.cancel)
	c := uploadOverLimit(t, r.Proxy)
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10s after a 200ms grace")
	}
	if !strings.Contains(r.logs.String(), "cutting 0 requests still in flight (and 1 connections closing after an error answer)") {
		t.Fatalf("log: %s", r.logs.String())
	}
	// The cut closed the connection: the client reads its end.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the lingering connection was not closed: %v", err)
	}
}

// max_event_bytes in the configuration file is accepted (config check, and
// serve) and is the proxy's MaxEventBytes; one out of range is refused with
// an error naming it. It was an unknown key, though the docs and the
// record's message for a skipped event said to raise it.
func TestMaxEventBytesReachesTheProxy(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(p, []byte("listen: \"127.0.0.1:0\"\nadmin_listen: \"off\"\nmax_event_bytes: 4194304\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("config", "check", p); code != 0 {
		t.Fatalf("config check: exit %d: %s", code, errOut)
	}
	cfg, err := loadServeConfig([]string{"--config", p}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, logs := startServe(t, cfg)
	// The debug line of the settings the proxy runs with (its Settings()).
	if !strings.Contains(logs.String(), "max_event_bytes 4194304") {
		t.Fatalf("the proxy does not run with max_event_bytes 4194304: %s", logs.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("max_event_bytes: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("config", "check", bad); code == 0 || !strings.Contains(errOut, "line 1: max_event_bytes: must be from 4096 (4 KiB) to 67108864 (64 MiB)") {
		t.Fatalf("config check of max_event_bytes 100: exit %d, %q", code, errOut)
	}
}
