//go:build unix

package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// The direct read path makes one read(2) per arrival: an engine that writes
// each event on its own, waiting until the client has it before the next,
// costs one read per write, not the two (one failing with EAGAIN) of a
// buffered reader under a chunked reader.
func TestDirectReadOnePerEvent(t *testing.T) {
	reads := make(chan int, 1)
	testHookDirectReads = func(n int) { reads <- n }
	defer func() { testHookDirectReads = nil }()

	const events = 40
	next := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for i := 0; i < events; i++ {
			writeChunk(c, vllmEvents[1+i%3])
			<-next // the client has this event: the next comes in its own read
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	start := time.Now()
	body := rawStreamBody(t, g)
	for i := 0; i < events; i++ {
		if ev, err := readEvent(body); err != nil || ev != vllmEvents[1+i%3] {
			t.Fatalf("event %d: %q, %v", i, ev, err)
		}
		next <- struct{}{}
	}
	if rest, err := io.ReadAll(body); err != nil || string(rest) != done {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != events {
		t.Fatalf("record %+v", rec)
	}
	var n int
	select {
	case n = <-reads:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not take the direct read path")
	}
	// The engine wrote events+2 times after the head (the events, [DONE],
	// the last chunk); the two last may arrive together. One read per write,
	// and at most two that found nothing: the first (the head came alone)
	// and one at the end; and one more for each finRecheck the stream ran
	// (a slow run).
	rechecks := int(time.Since(start) / finRecheck)
	t.Logf("%d read(2) calls for %d upstream writes (%d rechecks at most)", n, events+2, rechecks)
	if n < events || n > events+4+rechecks {
		t.Fatalf("%d read(2) calls for %d upstream writes, want about one per write", n, events+2)
	}
}

// Bodies in every framing, written in pieces split anywhere (inside a size
// line, between CR and LF, inside the trailer), reach the client whole, are
// metered, and leave a connection that can be reused when the framing says
// where the body ends.
func TestDirectFramings(t *testing.T) {
	sse := strings.Join(vllmEvents, "") + done
	chunked := func(parts ...string) string { // each part one chunk
		var b strings.Builder
		for _, p := range parts {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
		}
		return b.String()
	}
	for _, c := range []struct {
		name   string
		head   string
		body   string // as written, then cut into pieces of split bytes
		split  int
		reused bool // the second request goes out on the first's connection
		want   string
	}{
		{"chunked, one byte at a time", "Transfer-Encoding: chunked", chunked(vllmEvents[0], vllmEvents[1]+vllmEvents[2], vllmEvents[3], done) + "0\r\n\r\n", 1, true, sse},
		{"chunked with extensions and trailers", "Transfer-Encoding: chunked", strings.Replace(chunked(sse), "\r\n", ";ext=1\r\n", 1) + "0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n", 7, true, sse},
		{"content-length", fmt.Sprintf("Content-Length: %d", len(sse)), sse, 13, true, sse},
		{"until close", "Connection: close", sse, 29, false, sse},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(sc *scriptConn) {
				fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s\r\n\r\n", c.head)
				sc.BW.Flush()
				for b := c.body; len(b) > 0; {
					k := min(c.split, len(b))
					sc.BW.WriteString(b[:k])
					sc.BW.Flush()
					b = b[k:]
				}
				if c.head == "Connection: close" {
					sc.Conn.Close()
				}
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			for i := 0; i < 2; i++ {
				status, _, got, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
				if err != nil || status != 200 || got != c.want {
					t.Fatalf("request %d: %d %v\n%q\nwant\n%q", i, status, err, got, c.want)
				}
				if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != len(vllmEvents) || rec.OSL != 2 {
					t.Fatalf("request %d: record %+v", i, rec)
				}
			}
			want := int32(2)
			if c.reused {
				want = 1
			}
			if n := up.accepts.Load(); n != want {
				t.Fatalf("%d upstream connections for 2 requests, want %d", n, want)
			}
		})
	}
}

// A body whose framing is broken, or that the engine cuts short, ends the
// stream as an upstream error saying why, and the client sees an abnormal
// end; bytes after a body's end make its connection unusable, not part of
// the body.
func TestDirectBrokenFraming(t *testing.T) {
	for _, c := range []struct {
		name    string
		body    string
		outcome meter.Outcome
		msg     string // in the record's error message
		reused  bool
	}{
		{"size not hex", "zz\r\n", meter.OutcomeUpstreamError, "malformed chunked body", false},
		{"data not followed by CRLF", fmt.Sprintf("%x\r\n%sXX", len(vllmEvents[0]), vllmEvents[0]), meter.OutcomeUpstreamError, "malformed chunked body", false},
		{"cut mid-chunk", fmt.Sprintf("%x\r\n%s", len(vllmEvents[0])+10, vllmEvents[0]), meter.OutcomeUpstreamError, "before the end of the body", false},
		{"bytes after the end", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", len(vllmEvents[3]), vllmEvents[3]), meter.OutcomeOK, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(sc *scriptConn) {
				writeSSEHead(sc)
				sc.BW.WriteString(c.body)
				sc.BW.Flush()
				if c.outcome != meter.OutcomeOK {
					sc.Conn.Close()
				}
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
			if status != 200 || (err != nil) != (c.outcome != meter.OutcomeOK) {
				t.Fatalf("client: %d %v", status, err)
			}
			rec := g.record(t)
			if rec.Outcome != c.outcome || !strings.Contains(rec.ErrorMessage, c.msg) {
				t.Fatalf("record %+v", rec)
			}
			if c.outcome == meter.OutcomeOK {
				// The next request must not read the stray bytes as its answer.
				if _, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil {
					t.Fatal(err)
				}
				g.record(t)
				if n := up.accepts.Load(); n != 2 {
					t.Fatalf("%d upstream connections, want 2 (the first not reused)", n)
				}
			}
		})
	}
}

// An engine that keeps ahead of the gateway keeps every read full, so the
// stream never waits on the poller; its deadlines must hold all the same:
// a total timeout ends it on time, not when the engine stops. (Found in
// review: the direct path read on after full reads without looking at the
// deadline, and this stream ran for the engine's 10 s.)
func TestDirectBusyStreamEndsAtTotalTimeout(t *testing.T) {
	// The gateway is slower than the engine: each event costs it 1 ms.
	testHookEvent = func([]byte) { time.Sleep(time.Millisecond) }
	defer func() { testHookEvent = nil }()
	ev := `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n"
	stop := time.Now().Add(10 * time.Second)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for time.Now().Before(stop) && writeChunk(c, strings.Repeat(ev, 64)) == nil {
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL(), TotalTimeout: 300 * time.Millisecond, IdleTimeout: time.Minute})
	start := time.Now()
	resp, err := testClient.Do(newPost(t, g.URL()+"/v1/chat/completions", chatBody, nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	rec := g.record(t)
	t.Logf("client read %d KiB in %v (%v); record %s %q", n>>10, took, err, rec.Outcome, rec.ErrorMessage)
	if rec.Outcome != meter.OutcomeTimeout || rec.ErrorMessage != errTotalTimeout.Error() {
		t.Fatalf("record %s %q, want the total timeout", rec.Outcome, rec.ErrorMessage)
	}
	if took > 3*time.Second {
		t.Fatalf("the stream ran %v under a 300 ms total timeout", took)
	}
}

// An engine's FIN that arrived, with the body's last bytes, before the
// stream began to read the socket ends the body at once: a body that ends
// at the close ends there, and a chunked one cut short is an upstream
// error at once, not at the idle timeout. The read that begins a stream
// resets the socket's readiness, so nothing that arrived before it wakes a
// wait: a short read there must be followed by one more, which finds the
// FIN, not by a wait that lasts until the idle timeout.
func TestDirectSeesFINThatCameFirst(t *testing.T) {
	sse := strings.Join(vllmEvents, "") + done
	cut := chunk(vllmEvents[0])
	for _, c := range []struct {
		name, head, body, client, msg string // msg: the record's error; "" for ok
	}{
		{"until close", "Connection: close", sse, sse, ""},
		{"chunked, cut", "Transfer-Encoding: chunked", cut, vllmEvents[0], errBodyCut.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			goOn, closed := make(chan struct{}), make(chan struct{})
			up := startRawUpstream(t, func(sc *scriptConn) {
				fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s\r\n\r\n", c.head)
				sc.BW.Flush()
				<-goOn // the gateway has read the head
				sc.BW.WriteString(c.body)
				sc.BW.Flush()
				sc.Conn.Close()
				close(closed)
			})
			testHookStreamStart = func() {
				close(goOn)
				<-closed // body and FIN are on the socket before the stream reads it
				// And Go's poller has taken their readiness events, which
				// the stream's first read then resets. The poller has no
				// barrier to wait on: a pause with nothing else to run lets
				// it poll. Without the pause the test passes more often
				// than the bug would let it.
				time.Sleep(50 * time.Millisecond)
			}
			defer func() { testHookStreamStart = nil }()
			g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 5 * time.Second})
			// Found at once, not by the read that begins again within
			// finRecheck.
			postUntilEnd(t, g, c.client, c.msg, finRecheck*3/4)
		})
	}
}

// An engine that says "Connection: close" on a stream whose chunked body
// ends cleanly does not get its connection reused, though the stream read
// the body directly and released the response early: the next request
// dials. (This engine keeps the connection open and would answer on it.)
func TestDirectHonoursConnectionClose(t *testing.T) {
	sse := strings.Join(vllmEvents, "") + done
	up := startRawUpstream(t, func(sc *scriptConn) {
		fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		fmt.Fprintf(sc.BW, "%x\r\n%s\r\n0\r\n\r\n", len(sse), sse)
		sc.BW.Flush()
	})
	reads := make(chan int, 2)
	testHookDirectReads = func(n int) { reads <- n }
	defer func() { testHookDirectReads = nil }()
	g := startGateway(t, Config{Upstream: up.URL()})
	for i := 0; i < 2; i++ {
		status, _, got, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || status != 200 || got != sse {
			t.Fatalf("request %d: %d %v %q", i, status, err, got)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
			t.Fatalf("request %d: record %s %q", i, rec.Outcome, rec.ErrorMessage)
		}
		select {
		case <-reads: // the body was read on the direct path
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not take the direct read path")
		}
	}
	if n := up.accepts.Load(); n != 2 {
		t.Fatalf("%d upstream connections for 2 requests; the one the engine closed was reused", n)
	}
}

// The engine's last bytes and its FIN, arriving together while the stream
// is between a park and its next read, wake it once; the short read that
// takes the bytes does not show the FIN behind them. A body that ends at
// the close is read until the FIN, not parked on until the idle timeout
// (found by TestDirectFramings' "until close" failing under load). One that
// its framing says is cut is found cut within finRecheck, long before its
// idle timeout: an upstream error, not a timeout; and when a total timeout
// expires first, the record still says the body was cut, not that time ran
// out. So is one the engine reset.
func TestDirectSeesFINBehindLastBytes(t *testing.T) {
	sse := strings.Join(vllmEvents, "") + done
	for _, c := range []struct {
		name   string
		head   string
		first  string        // written at once after the head
		last   string        // written with the close, once the stream parked
		reset  bool          // the close is a reset (SO_LINGER 0)
		total  time.Duration // the total timeout, 0 for none (the idle one is 5 s)
		client string        // what the client gets
		msg    string        // the record's error message; "" for ok
	}{
		{"until close", "Connection: close", vllmEvents[0], strings.Join(vllmEvents[1:], "") + done, false, 0, sse, ""},
		{"chunked, cut", "Transfer-Encoding: chunked", chunk(vllmEvents[0]), chunk(vllmEvents[1]), false, 500 * time.Millisecond, vllmEvents[0] + vllmEvents[1], errBodyCut.Error()},
		{"chunked, cut, no total timeout", "Transfer-Encoding: chunked", chunk(vllmEvents[0]), chunk(vllmEvents[1]), false, 0, vllmEvents[0] + vllmEvents[1], errBodyCut.Error()},
		{"chunked, reset", "Transfer-Encoding: chunked", chunk(vllmEvents[0]), chunk(vllmEvents[1]), true, 500 * time.Millisecond, vllmEvents[0] + vllmEvents[1], "connection reset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			goOn, closed := make(chan struct{}), make(chan struct{})
			up := startRawUpstream(t, func(sc *scriptConn) {
				fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s\r\n\r\n%s", c.head, c.first)
				sc.BW.Flush()
				<-goOn // the stream has parked after the first event
				sc.BW.WriteString(c.last)
				sc.BW.Flush()
				if c.reset {
					sc.Conn.(*net.TCPConn).SetLinger(0)
				}
				sc.Conn.Close()
				close(closed)
			})
			var once sync.Once
			testHookPark = func(int) {
				once.Do(func() {
					close(goOn)
					<-closed
					// Let Go's poller take the readiness of both (one
					// flag, set while the stream has not yet waited): as
					// in TestDirectSeesFINThatCameFirst, there is no
					// barrier to wait on.
					time.Sleep(50 * time.Millisecond)
				})
			}
			defer func() { testHookPark = nil }()
			g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 5 * time.Second, TotalTimeout: c.total})
			// A body that ends at the close is read to its end at once; a
			// cut one is found by the read that begins again within
			// finRecheck, or at the total timeout.
			limit := 4 * time.Second
			if c.msg == "" {
				limit = finRecheck * 3 / 4
			}
			postUntilEnd(t, g, c.client, c.msg, limit)
		})
	}
}

// A stream whose engine keeps sending is not ended by its idle timeout,
// however its reads fall: an engine far ahead of the gateway keeps every
// read full, and the stream still moves its idle timeout on with each read
// that brings bytes. (Found in review: only a wait moved it, so a stream
// read from behind for longer than the idle timeout ended as an idle
// timeout with bytes still arriving.)
func TestDirectBusyStreamOutlivesIdleTimeout(t *testing.T) {
	// The gateway is slower than the engine: each event costs it 1 ms,
	// and the engine writes them all at once: 1.2 s of the gateway's work
	// under a 300 ms idle timeout.
	testHookEvent = func([]byte) { time.Sleep(time.Millisecond) }
	defer func() { testHookEvent = nil }()
	const events = 1200
	ev := `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n"
	for _, head := range []string{"Connection: close", "Transfer-Encoding: chunked"} {
		t.Run(head, func(t *testing.T) {
			chunked := head != "Connection: close"
			up := startRawUpstream(t, func(sc *scriptConn) {
				fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%s\r\n\r\n", head)
				body := strings.Repeat(ev, events) + done
				if chunked {
					fmt.Fprintf(sc.BW, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
				} else {
					sc.BW.WriteString(body)
				}
				sc.BW.Flush()
				if !chunked {
					sc.Conn.Close()
				}
			})
			g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 300 * time.Millisecond})
			status, _, got, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
			rec := g.record(t)
			t.Logf("record %s %q, %d events in %v", rec.Outcome, rec.ErrorMessage, rec.Events, rec.E2E)
			if err != nil || status != 200 || rec.Outcome != meter.OutcomeOK || rec.Events != events {
				t.Fatalf("%d %v, %d bytes; record %s %q, %d events of %d", status, err, len(got), rec.Outcome, rec.ErrorMessage, rec.Events, events)
			}
		})
	}
}

// postUntilEnd posts a chat request through g and checks how it ended, and
// when: the client got want (cut short when msg is set), the record is ok
// with every vLLM event, or an upstream error saying msg, and the request
// took no more than limit.
func postUntilEnd(t *testing.T, g *gateway, want, msg string, limit time.Duration) {
	t.Helper()
	start := time.Now()
	status, _, got, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	took := time.Since(start)
	if status != 200 || got != want || (err == nil) != (msg == "") {
		t.Fatalf("%d %v %q", status, err, got)
	}
	rec := g.record(t)
	t.Logf("record %s %q; the client's request took %v", rec.Outcome, rec.ErrorMessage, took)
	switch {
	case msg == "" && (rec.Outcome != meter.OutcomeOK || rec.Events != len(vllmEvents)):
		t.Fatalf("record %s %q, %d events", rec.Outcome, rec.ErrorMessage, rec.Events)
	case msg != "" && (rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, msg)):
		t.Fatalf("record %s %q, want an upstream error saying %q", rec.Outcome, rec.ErrorMessage, msg)
	case took > limit:
		t.Fatalf("the request took %v: the stream waited for a FIN it had already been sent", took)
	}
}

// chunk frames s as one HTTP chunk.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
