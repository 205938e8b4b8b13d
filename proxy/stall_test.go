package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// stallingClient sends a stream request and then never reads, nor closes.
func stallingClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	t.Cleanup(func() { c.Close() })
	return c
}

// floodUpstream streams large events until the gateway hangs up, which it
// then reports on hungUp.
func floodUpstream(t *testing.T) (up *rawUpstream, hungUp chan struct{}) {
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	hungUp = make(chan struct{}, 1)
	up = startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for writeChunk(c, ev) == nil {
		}
		hungUp <- struct{}{}
	})
	return up, hungUp
}

// A client that keeps its connection open but stops reading cannot hold a
// stream (and the engine's request) past the total timeout: the write to it
// times out, the stream ends as timeout with its record, and the engine's
// connection is closed.
func TestStalledClientEndsAtTotalTimeout(t *testing.T) {
	up, hungUp := floodUpstream(t)
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: 300 * time.Millisecond, IdleTimeout: time.Minute})
	stallingClient(t, g.addr)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "total timeout") {
		t.Fatalf("record %s %q, want timeout (total)", rec.Outcome, rec.ErrorMessage)
	}
	<-hungUp // the engine's connection was closed
}

// Without a total timeout, a client that takes no byte for the idle
// timeout has stopped reading: client_abort, as nginx's send_timeout.
func TestStalledClientEndsAtIdleTimeout(t *testing.T) {
	up, hungUp := floodUpstream(t)
	// The idle timeout is a second: at 300 ms, under the race detector on
	// a loaded machine, the flooding engine was once not run for that long
	// before the client's lag filled, and the stream ended as the engine's
	// silence (timeout) instead (8 of 15 runs on one such hour).
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: time.Hour, IdleTimeout: time.Second})
	stallingClient(t, g.addr)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || !strings.Contains(rec.ErrorMessage, "stopped reading") {
		t.Fatalf("record %s %q, want client_abort (stopped reading)", rec.Outcome, rec.ErrorMessage)
	}
	<-hungUp
}

// The write deadlines are the stream's own: a later response on the same
// keep-alive connection, written long after the stream's last deadline,
// still reaches the client.
func TestWriteDeadlineClearedForNextResponse(t *testing.T) {
	n := 0
	up := startRawUpstream(t, func(c *scriptConn) {
		if n++; n == 2 {
			time.Sleep(500 * time.Millisecond) // past the first stream's write deadline
		}
		vllmUpstream(0)(c)
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 200 * time.Millisecond, FirstTokenTimeout: 5 * time.Second})
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(string(b), done) {
			t.Fatalf("response %d: err %v body %q", i+1, err, b)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
			t.Fatalf("record %d: %+v", i+1, rec)
		}
	}
}
