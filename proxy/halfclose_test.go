package proxy

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// A request recorded as 499 (its client looked gone) gets no answer at all:
// a client that only half-closed its side must not read an empty 200 as a
// success.
func TestClientLeftGetsNoResponse(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		time.Sleep(300 * time.Millisecond) // prefill before the headers
		vllmUpstream(0)(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	defer conn.Close()
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	rec := g.record(t)
	if rec.Status != meter.StatusClientClosed || rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("record %d %s", rec.Status, rec.Outcome)
	}
	if err == nil {
		t.Fatalf("the client got status %d for a request recorded as 499", resp.StatusCode)
	}
}
