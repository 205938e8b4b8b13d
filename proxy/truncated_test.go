package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// An engine that announces a body length and closes after a part of it:
// the client gets the 200 head and the bytes that came, then the
// connection's end (a body cut short, as the record says: status 200,
// upstream_error), never an empty reply. A chat completion and a
// pass-through route alike.
func TestBodyOfKnownLengthCutShort(t *testing.T) {
	const part = `{"choices":[`
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n%s", part)
		c.BW.Flush()
		c.Conn.Close()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for _, req := range []string{
		fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(`{"model":"m"}`), `{"model":"m"}`),
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, req)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(bufio.NewReader(conn))
		conn.Close()
		head, body, _ := strings.Cut(string(got), "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 200 ") || !strings.Contains(head, "Content-Length: 1000") || body != part {
			t.Errorf("%.30q: the client got %q", req, got)
		}
		rec := g.record(t)
		if rec.Status != 200 || rec.Outcome != meter.OutcomeUpstreamError {
			t.Errorf("%.30q: record status %d outcome %s", req, rec.Status, rec.Outcome)
		}
	}
}
