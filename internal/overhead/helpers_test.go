package main

import (
	"bufio"
	"math"
	"strings"
	"testing"
)

func TestPercentile(t *testing.T) {
	s := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0.01, 1}, {1, 10}} {
		if got := percentile(s, c.q); got != c.want {
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
