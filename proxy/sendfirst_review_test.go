package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// smallWindowPost sends chatBody on a connection whose receive buffer is
// small from its start, so that a large event fills it at once.
func smallWindowPost(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	return conn
}

// bigFirstToken is a role chunk of 300 KiB: a first token in an event
// larger than the sockets between the gateway and a client with a small
// window take at once.
var bigFirstToken = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"` +
	strings.Repeat("x", 300<<10) + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

// laggingClientOf starts a gateway with cfg in front of an engine that runs
// script, its client connections' send buffers 4 KiB, and posts chatBody
// to it from a client with a 4 KiB receive window, which lags from the
// first large write on. It returns the gateway, the client's connection
// and a reader of the 200 response's body.
func laggingClientOf(t *testing.T, cfg Config, script func(c *scriptConn)) (*gateway, net.Conn, *bufio.Reader) {
	t.Helper()
	cfg.Upstream = startRawUpstream(t, script).URL()
	g := startGatewayOn(t, cfg, func(c net.Conn) net.Conn {
		c.(*net.TCPConn).SetWriteBuffer(4096)
		return c
	})
	conn := smallWindowPost(t, g.addr)
	return g, conn, streamBodyOf(t, conn)
}

// The first token's event, written before it was metered, that the
// client's socket took only part of (the client lags from that write on):
// the writer goroutine writes the rest, and the client has its first token
// then. A client that reads it whole and leaves while the engine is quiet
// left after its first token: its record keeps the first token's time, as
// when the event was metered before it was written.
func TestFirstTokenWrittenFirstToALaggingClient(t *testing.T) {
	g, conn, body := laggingClientOf(t, Config{}, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, bigFirstToken)
		io.Copy(io.Discard, c.Conn) // quiet until the gateway closes it
	})
	if ev, err := readEvent(body); ev != bigFirstToken {
		t.Fatalf("event of %d bytes, %v: want %d", len(ev), err, len(bigFirstToken))
	}
	conn.Close()
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.ErrorMessage != msgGoneWhileQuiet || rec.TTFT <= 0 {
		t.Fatalf("record: outcome %v, error %q, TTFT %v: want a client that left after its first token", rec.Outcome, rec.ErrorMessage, rec.TTFT)
	}
}

// The write delay of an event written before it was metered is the time to
// its write, not to the end of its metering: the first token's event,
// whose metering is held long after it reached the client, was written at
// once.
func TestWriteDelayOfFirstTokenWrittenFirst(t *testing.T) {
	const hold = 500 * time.Millisecond
	next := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) { writeHeldStream(c, next) })
	g := startGateway(t, Config{Upstream: up.URL()})
	metering, release := make(chan struct{}), make(chan struct{})
	testHookEvent = func(raw []byte) {
		if string(raw) == vllmEvents[0] {
			close(metering)
			<-release
		}
	}
	defer func() { testHookEvent = nil }()
	conn := rawPost(t, g.addr, chatBody, "")
	defer conn.Close()
	body := streamBodyOf(t, conn)
	<-metering
	if ev, err := readEvent(body); ev != vllmEvents[0] {
		t.Fatalf("first event %q, %v", ev, err)
	}
	time.Sleep(hold) // the metering's time, after the write
	close(release)
	close(next)
	if _, err := io.ReadAll(body); err != nil {
		t.Fatal(err)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.TTFT <= 0 {
		t.Fatalf("record %+v", rec)
	}
	if rec.WriteDelay >= hold {
		t.Fatalf("write delay %v: the event was written before its metering, held %v", rec.WriteDelay, hold)
	}
}
