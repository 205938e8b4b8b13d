package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goodput/goodput/meter"
)

const jsonReply = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func writeJSONReply(c *scriptConn) {
	fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(jsonReply), jsonReply)
	c.BW.Flush()
}

// cutConn drops an upstream connection after its request was read: with a
// reset, or an orderly close.
func cutConn(c *scriptConn, reset bool) {
	if tc, ok := c.Conn.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	c.Conn.Close()
}

// A reused upstream connection that fails after the request was written
// (reset, or closed without an answer) ends the request: a POST that may
// have reached the engine is never sent again (the engine would generate
// twice and the record would say ok). The client gets 502 and there is one
// upstream_error record.
func TestNoResendAfterWrite(t *testing.T) {
	for _, reset := range []bool{true, false} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			var cutSeen atomic.Int32
			up := startRawUpstream(t, func(c *scriptConn) {
				if len(c.Req.Header.Peek("X-Cut")) > 0 && cutSeen.Add(1) == 1 {
					cutConn(c, reset)
					return
				}
				writeJSONReply(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			// Warm the pool: the next request goes out on a reused connection.
			if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil); err != nil || status != 200 {
				t.Fatalf("warm-up: %d %v", status, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Fatalf("warm-up record %+v", rec)
			}
			status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, map[string]string{"X-Cut": "1"})
			if n := cutSeen.Load(); n != 1 {
				t.Errorf("the engine received the POST %d times", n)
			}
			if n := up.accepts.Load(); n != 1 {
				t.Errorf("%d upstream connections, want 1 (the request went out again on a new one)", n)
			}
			if err != nil || status != 502 {
				t.Fatalf("client: %d %v %s", status, err, body)
			}
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 {
				t.Fatalf("record %+v", rec)
			}
			if !reset && !strings.Contains(rec.ErrorMessage, "closed the connection before a complete response head") {
				t.Errorf("record's error %q does not say what happened", rec.ErrorMessage)
			}
			g.noMoreRecords(t)
		})
	}
}

// An idempotent request without a body may be sent again when the reused
// connection fails (net/http's rule): the client gets the answer of the
// second attempt.
func TestResendIdempotent(t *testing.T) {
	var cutSeen atomic.Int32
	up := startRawUpstream(t, func(c *scriptConn) {
		if len(c.Req.Header.Peek("X-Cut")) > 0 && cutSeen.Add(1) == 1 {
			cutConn(c, true)
			return
		}
		writeJSONReply(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	get := func(hdr string) (int, string) {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", hdr)
		b, _ := io.ReadAll(conn)
		var status int
		fmt.Sscanf(string(b), "HTTP/1.1 %d", &status)
		return status, string(b)
	}
	if status, b := get(""); status != 200 {
		t.Fatalf("warm-up: %s", b)
	}
	g.record(t)
	if status, b := get("X-Cut: 1\r\n"); status != 200 {
		t.Fatalf("GET after a cut reused connection: %s", b)
	}
	if n := cutSeen.Load(); n != 2 {
		t.Fatalf("the engine received the GET %d times, want 2", n)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}

// A pooled connection the server closed while it was idle (a keep-alive
// timeout) is found by peeking at it before use: the request goes out once,
// on a new connection, and succeeds.
func TestIdleConnClosedByServer(t *testing.T) {
	for _, reset := range []bool{true, false} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			closed := make(chan struct{}, 1)
			var posts atomic.Int32
			up := startRawUpstream(t, func(c *scriptConn) {
				posts.Add(1)
				writeJSONReply(c)
				if len(c.Req.Header.Peek("X-Close-After")) > 0 {
					cutConn(c, reset)
					closed <- struct{}{}
				}
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, map[string]string{"X-Close-After": "1"}); err != nil || status != 200 {
				t.Fatalf("first: %d %v", status, err)
			}
			g.record(t)
			<-closed
			status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
			if err != nil || status != 200 || body != jsonReply {
				t.Fatalf("second: %d %v %s", status, err, body)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 1 {
				t.Fatalf("record %+v", rec)
			}
			if n := posts.Load(); n != 2 {
				t.Fatalf("the engine received %d requests, want 2", n)
			}
			g.noMoreRecords(t)
		})
	}
}
