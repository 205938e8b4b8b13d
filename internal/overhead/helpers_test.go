package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPercentile(t *testing.T) {
	s := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 5.5}, {0.99, 9.91}, {0.1, 1.9}, {0.01, 1.09}, {0, 1}, {1, 10}} {
		// numpy.percentile(range(1, 11), 100*q)
		if got := percentile(s, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile(1..10, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("percentile of nothing = %v, want NaN", got)
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2) = %v", got)
	}
	if got := median([]float64{4, math.NaN(), 1, 2, 3}); got != 2.5 {
		t.Errorf("median(4,NaN,1,2,3) = %v, want 2.5 (NaN left out)", got)
	}
	if got := median([]float64{math.NaN()}); !math.IsNaN(got) {
		t.Errorf("median(NaN) = %v", got)
	}
}

func TestParseStat(t *testing.T) {
	// a command name with a space and a ')' in it, as /proc allows
	line := "4242 (ng) x) S 4200 4242 4242 0 -1 4194624 1000 0 0 0 731 269 0 0 20 0 1 0 100 10000000 500 18446744073709551615\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 4200 || st.cpuTicks != 1000 {
		t.Errorf("parseStat = %+v, want ppid 4200 and 731+269 ticks", st)
	}
	if _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short stat line parsed")
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tnginx\nVmPeak:\t  20000 kB\nVmHWM:\t   9000 kB\nVmRSS:\t   8123 kB\nThreads:\t1\n"
	got, err := parseVmRSS([]byte(status))
	if err != nil || got != 8123 {
		t.Errorf("parseVmRSS = %d, %v; want 8123", got, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without VmRSS parsed")
	}
}

// An engine response as a proxy may pass it on: the events re-chunked
// (two in one chunk, one split over two chunks), with chunk extensions.
const chunkedResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
	"a\r\ndata: {}\n\n\r\n" +
	"16;ext=1\r\ndata: {\"a\":1}\n\ndata: {\r\n" +
	"1\r\n}\r\n" +
	"2\r\n\n\n\r\n" +
	"e\r\ndata: [DONE]\n\n\r\n" +
	"0\r\n\r\n"

func TestSSEReaderEventsAndStamps(t *testing.T) {
	for _, step := range []int{len(chunkedResponse), 1, 2, 3, 7} {
		var r sseReader
		r.reset(nil)
		done := false
		var err error
		b := []byte(chunkedResponse)
		for i := 0; i < len(b); i += step {
			if done {
				t.Fatalf("step %d: done before the end", step)
			}
			done, err = r.feed(b[i:min(i+step, len(b))], int64(i))
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		if !done || len(r.stamps) != 4 || !r.keepAlive {
			t.Fatalf("step %d: done %v, %d events, keep-alive %v; want done, 4 events, keep-alive", step, done, len(r.stamps), r.keepAlive)
		}
		if step == 1 {
			// each event is stamped with the read that brought its last byte
			for k, want := range []string{"data: {}\n\n", "data: {\"a\":1}\n\n", "}\r\n2\r\n\n\n", "data: [DONE]\n\n"} {
				end := strings.Index(chunkedResponse, want) + len(want) - 1
				if r.stamps[k] != int64(end) {
					t.Errorf("event %d stamped %d, want %d", k, r.stamps[k], end)
				}
			}
		}
	}
}

func TestSSEReaderErrors(t *testing.T) {
	for name, resp := range map[string]string{
		"status":    "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
		"framing":   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n",
		"chunksize": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"extra":     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n\n\nHTTP",
	} {
		var r sseReader
		r.reset(nil)
		if _, err := r.feed([]byte(resp), 0); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestEngineStreamMatchesItsPlan(t *testing.T) {
	// readRequest takes a Content-Length and a chunked body alike.
	reqs := "POST /v1/chat/completions HTTP/1.1\r\nX-Bench-Id: 7\r\nContent-Length: 2\r\n\r\n{}" +
		"POST /v1/chat/completions HTTP/1.1\r\nx-bench-id: 8\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(reqs))
	for _, want := range []uint64{7, 8} {
		id, err := readRequest(br)
		if err != nil || id != want {
			t.Fatalf("readRequest = %d, %v; want %d", id, err, want)
		}
	}
	p := makePlan(1, 7)
	if p.tokens() < minTokens || p.tokens() > maxTokens {
		t.Errorf("%d tokens", p.tokens())
	}
	for _, g := range append(p.gaps, p.ttft) {
		if g < minGap || g > maxGap {
			t.Errorf("gap %v outside [%v, %v]", g, minGap, maxGap)
		}
	}
	if q := makePlan(1, 7); q.tokens() != p.tokens() || q.gaps[0] != p.gaps[0] {
		t.Error("the same seed and id gave another plan")
	}
}

// Each prototype target runs protoproxy with its own model and way to
// wait.
func TestProtoConfigArgs(t *testing.T) {
	for name, want := range map[string]string{
		"proto-goroutine":     "--model goroutine",
		"proto-epoll":         "--model epoll",
		"proto-epoll-netpoll": "--model epoll --epoll-wait netpoll",
	} {
		args, err := protoConfig(name)("pp", "", "127.0.0.1:1", "127.0.0.1:2")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(args, " "); got != "pp --listen 127.0.0.1:1 --upstream 127.0.0.1:2 "+want {
			t.Errorf("%s: %q", name, got)
		}
	}
}

// TestSignalPhases plays a phases build: it writes the file again, seq one
// higher, at each SIGUSR1, as internal/phases does.
func TestSignalPhases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "phases.json")
	if _, err := readPhases(path); err == nil {
		t.Fatal("read a file that is not there")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	seq := 0
	write := func() {
		b := fmt.Sprintf(`{"seq":%d,"phases":[{"name":"rewrite: parse","n":%d,"p10_us":1.5,"p50_us":2.5,"p90_us":4}]}`, seq, seq*10)
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Error(err)
		}
	}
	write()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-sig:
				seq++
				write()
			case <-done:
				return
			}
		}
	}()
	d, err := readPhases(path)
	if err != nil || d.Seq != 0 {
		t.Fatalf("at start: %+v, %v", d, err)
	}
	for want := 1; want <= 2; want++ {
		d, err = signalPhases(os.Getpid(), path, d.Seq)
		if err != nil || d.Seq != want || len(d.Phases) != 1 || d.Phases[0].N != want*10 || d.Phases[0].P50 != 2.5 {
			t.Fatalf("signal %d: %+v, %v", want, d, err)
		}
	}
}

func TestPrintPhases(t *testing.T) {
	fig := func(name string, p50 float64) phaseFigure {
		return phaseFigure{Name: name, N: 100, P10: num(p50 / 2), P50: num(p50), P90: num(p50 * 2), P99: num(p50 * 3)}
	}
	rounds := []roundResult{
		{Target: "goodput", Streams: 32, Round: 1, Phases: []phaseFigure{fig("start", 5), fig("rewrite: head", 9)}},
		{Target: "goodput", Streams: 32, Round: 2, Phases: []phaseFigure{fig("start", 7), fig("rewrite: head", 11)}},
		{Target: "goodput", Streams: 32, Round: 3, Phases: []phaseFigure{fig("start", 6), fig("rewrite: head", 30)}},
		{Target: "nginx", Streams: 32, Round: 1},
	}
	targets := []target{{name: "direct"}, {name: "goodput", label: "goodput", phases: true}, {name: "nginx", label: "nginx"}}
	var out strings.Builder
	printPhases(&out, rounds, []int{32}, targets)
	for _, want := range []string{"| streams | step | goodput |", "| 32 | start | 6.0 (12.0, 18.0) |", "| 32 | rewrite: head | 11.0 (22.0, 33.0) |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	printPhases(&out, rounds, []int{32}, targets[:1])
	if out.Len() != 0 {
		t.Errorf("printed without a phases target:\n%s", out.String())
	}
}
