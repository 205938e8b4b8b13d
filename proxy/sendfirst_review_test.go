package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

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

// The first token's event, written before it was metered, that the
// client's socket took only part of (the client lags from that write on):
// the writer goroutine writes the rest, and the client has its first token
// then. A client that reads it whole and leaves while the engine is quiet
// left after its first token: its record keeps the first token's time, as
// when the event was metered before it was written.
func TestFirstTokenWrittenFirstToALaggingClient(t *testing.T) {
	big := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"` +
		strings.Repeat("x", 300<<10) + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, big)
		io.Copy(io.Discard, c.Conn) // quiet until the gateway closes it
	})
	g := startGatewayOn(t, Config{Upstream: up.URL()}, func(c net.Conn) net.Conn {
		c.(*net.TCPConn).SetWriteBuffer(4096)
		return c
	})
	conn := smallWindowPost(t, g.addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if ev, err := readEvent(bufio.NewReaderSize(resp.Body, 64<<10)); ev != big {
		t.Fatalf("event of %d bytes, %v: want %d", len(ev), err, len(big))
	}
	conn.Close()
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.ErrorMessage != msgGoneWhileQuiet || rec.TTFT <= 0 {
		t.Fatalf("record: outcome %v, error %q, TTFT %v: want a client that left after its first token", rec.Outcome, rec.ErrorMessage, rec.TTFT)
	}
}
