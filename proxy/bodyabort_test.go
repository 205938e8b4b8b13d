package proxy

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
)

// A client that goes away while it sends its request (a closed or reset
// connection before the head or body is whole: an aborted upload, an SDK
// call cancelled early) is a client abort, as the outcome's definition
// says, not a bad request: one record, client_abort with 499, nothing
// answered. A request that is malformed while its client is still there
// stays rejected (400), and the engine sees neither.
func TestClientGoneWhileSendingTheRequest(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		t.Errorf("the engine got a request: %q", c.Req.Body())
		c.Conn.Close()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	cases := []struct {
		name, send string
		reset      bool // end with a reset rather than a close
		outcome    meter.Outcome
		status     int
	}{
		{"body cut, closed", head + "Content-Length: 100\r\n\r\n{\"model\":", false, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"body cut, reset", head + "Content-Length: 100\r\n\r\n{\"model\":", true, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"chunked body cut, closed", head + "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"model\":\r\n", false, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"chunked body cut mid-chunk, closed", head + "Transfer-Encoding: chunked\r\n\r\n20\r\n{\"model\":", false, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"chunked body cut, reset", head + "Transfer-Encoding: chunked\r\n\r\n9\r\n{\"model\":\r\n", true, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"head cut, closed", head + "Content-Le", false, meter.OutcomeClientAbort, meter.StatusClientClosed},
		{"malformed chunk size, client there", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", false, meter.OutcomeRejected, 400},
	}
	for _, c := range cases {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.send); err != nil {
			t.Fatal(err)
		}
		switch {
		case c.reset:
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		case c.outcome == meter.OutcomeClientAbort:
			conn.Close()
		default:
			// The client stays to read the answer.
			b, _ := io.ReadAll(conn)
			conn.Close()
			if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
				t.Errorf("%s: answer %q", c.name, b)
			}
		}
		rec := g.record(t)
		g.p.Wait()
		if rec.Outcome != c.outcome || rec.Status != c.status {
			t.Errorf("%s: outcome %s status %d (%s), want %s %d", c.name, rec.Outcome, rec.Status, rec.ErrorMessage, c.outcome, c.status)
		}
		if c.outcome == meter.OutcomeClientAbort && !strings.Contains(rec.ErrorMessage, "went away") {
			t.Errorf("%s: message %q", c.name, rec.ErrorMessage)
		}
		select {
		case extra := <-g.records:
			t.Errorf("%s: a second record %+v", c.name, extra)
		default:
		}
	}
}
