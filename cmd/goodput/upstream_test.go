package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/goodput/goodput/internal/config"
	"github.com/prometheus/client_golang/prometheus"
)

// Only the absence of an upstream starts the built-in simulator: an empty
// one (an unset variable) is an error, and one without a scheme is told to
// add http:// (issue 8.11).
func TestServeUpstreamMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", ""}, "upstream: empty (an unset variable?)"},
		{[]string{"--upstream", " "}, "upstream: empty (an unset variable?)"},
		{[]string{"--upstream", "127.0.0.1:8000"}, `add http:// (http://127.0.0.1:8000)`},
		{[]string{"--upstream", "localhost:8000"}, `add http:// (http://localhost:8000)`},
		// An OpenAI client's base URL: refused with the other mistakes,
		// before anything starts (it was refused only once the gateway was
		// being built, exit 1, and config check gave no line for it).
		{[]string{"--upstream", "http://127.0.0.1:8000/v1"}, `a path prefix is not supported; give the engine's base URL (http://127.0.0.1:8000)`},
		{[]string{"--upstream", "http://engine/prefix/"}, `a path prefix is not supported`},
	} {
		// loadServeConfig, not run: before the fix an empty upstream
		// started the simulator, and run would serve until killed.
		_, err := loadServeConfig(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %q: %v; want an error saying %q", c.args, err, c.want)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--upstream", "127.0.0.1:8000"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "add http://") {
		t.Errorf("serve --upstream 127.0.0.1:8000: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"serve", "--upstream", "http://127.0.0.1:8000/v1"}, io.Discard, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), "goodput serve: upstream: ") {
		t.Errorf("serve --upstream http://127.0.0.1:8000/v1: exit %d, stderr %q; want 2 and the mistake", code, stderr.String())
	}
	// A file that sets the upstream from an unset variable.
	for _, y := range []string{"upstream: \"\"\n", "upstream:\n", "upstream: ~\n"} {
		if _, err := config.Parse(strings.NewReader(y)); !errors.Is(err, config.ErrEmptyUpstream) {
			t.Errorf("config %q: %v, want the empty-upstream error", y, err)
		}
	}
	if c, err := config.Parse(strings.NewReader("listen: ':1'\n")); err != nil || c.Upstream != "" {
		t.Errorf("config without upstream: %v", err)
	}
}

// An upstream that does not answer at start is logged as a warning and
// keeps /readyz at 503 (it was 200 with nothing on stderr).
func TestServeUnreachableUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := &config.Config{Upstream: "http://" + addr, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"}
	s, logs := startServe(t, cfg)
	waitFor(t, func() bool {
		return strings.Contains(logs.String(), "WARNING: upstream http://"+addr+" does not answer")
	})
	resp, err := http.Get("http://" + s.Admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "does not answer") {
		t.Fatalf("/readyz with the upstream down: %d %q", resp.StatusCode, body)
	}
	// The gateway alone (the chart's readiness): ready, so that its
	// clients' requests are answered 502 and recorded.
	for path, want := range map[string]int{"/readyz?upstream=false": 200, "/readyz?upstream=true": 503, "/readyz?upstream=no": 400, "/readyz?upstream=false&upstream=true": 400} {
		resp, err := http.Get("http://" + s.Admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s with the upstream down: %d %q, want %d", path, resp.StatusCode, body, want)
		}
	}
	// Only GET and HEAD, as every admin endpoint: a probe's POST or
	// DELETE was answered as a GET.
	for _, path := range []string{"/healthz", "/readyz?upstream=false"} {
		for method, want := range map[string]int{http.MethodHead: 200, http.MethodPost: 405, http.MethodDelete: 405} {
			req, _ := http.NewRequest(method, "http://"+s.Admin+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want || (want == 405 && resp.Header.Get("Allow") != "GET, HEAD") {
				t.Errorf("%s %s: %d, Allow %q; want %d", method, path, resp.StatusCode, resp.Header.Get("Allow"), want)
			}
		}
	}
	if m := scrape(t, "http://"+s.Admin+"/metrics"); !strings.Contains(m, "goodput_upstream_up 0") {
		t.Fatal("goodput_upstream_up is not 0")
	}
}

// The check follows the upstream down and up, logging each change once.
func TestUpstreamCheckTransitions(t *testing.T) {
	var logBuf syncBuffer
	u, err := newUpstreamCheck("http://e:8000", 0, log.New(&logBuf, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	var down bool
	u.dial = func(context.Context) error {
		if down {
			return errors.New("connection refused")
		}
		return nil
	}
	ctx := context.Background()
	if ok, why := u.ready(); ok || why != "upstream not checked yet" {
		t.Fatalf("before the first check: %v %q", ok, why)
	}
	for _, step := range []struct {
		down  bool
		ready bool
		logs  int
	}{{false, true, 0}, {false, true, 0}, {true, false, 1}, {true, false, 1}, {false, true, 2}, {false, true, 2}} {
		down = step.down
		u.check(ctx)
		ok, why := u.ready()
		if ok != step.ready || (!ok && !strings.Contains(why, "connection refused")) {
			t.Fatalf("down=%v: ready %v %q", step.down, ok, why)
		}
		if n := strings.Count(logBuf.String(), "\n"); n != step.logs {
			t.Fatalf("down=%v: %d log lines, want %d: %q", step.down, n, step.logs, logBuf.String())
		}
	}
	if !strings.Contains(logBuf.String(), "stopped answering") || !strings.Contains(logBuf.String(), "answers again") {
		t.Fatalf("log %q", logBuf.String())
	}
	// The gateway's own shortage of descriptors says so, once, and leaves
	// goodput_upstream_up as it was: it said 0, and GoodputUpstreamDown
	// blamed an engine no packet had reached.
	up := prometheus.NewRegistry()
	up.MustRegister(u.collector())
	upValue := func() float64 {
		t.Helper()
		mfs, err := up.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gather: %v %v", mfs, err)
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	u.dial = func(context.Context) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
	}
	seen := len(logBuf.String())
	for range 2 {
		u.check(ctx)
		if ok, why := u.ready(); ok || !strings.Contains(why, "the gateway is out of file descriptors") || !strings.Contains(why, "too many open files") {
			t.Fatalf("out of descriptors: ready %v %q", ok, why)
		}
		if v := upValue(); v != 1 {
			t.Fatalf("out of descriptors: goodput_upstream_up %v, want 1 (as it was)", v)
		}
	}
	if l := logBuf.String()[seen:]; strings.Count(l, "\n") != 1 || !strings.Contains(l, "out of file descriptors, and cannot check upstream") || strings.Contains(l, "stopped answering") {
		t.Fatalf("out of descriptors: log %q", l)
	}
	u.dial = func(context.Context) error { return errors.New("connection refused") }
	u.check(ctx)
	if ok, why := u.ready(); ok || !strings.Contains(why, "connection refused") || upValue() != 0 {
		t.Fatalf("descriptors again, upstream down: ready %v %q, up %v", ok, why, upValue())
	}
	if l := logBuf.String()[seen:]; !strings.Contains(l, "file descriptors again") || !strings.Contains(l, "stopped answering") {
		t.Fatalf("descriptors again: log %q", l)
	}
}
