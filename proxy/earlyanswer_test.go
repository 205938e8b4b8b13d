package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// An engine may answer a request before it has read its body (a 413 for a
// body over its own limit) and close the connection: the gateway's write
// of the body then fails, with the answer already on the connection. The
// client gets that answer, not a 502, its record says so, and the
// connection is not used again. A request whose write fails with no
// answer behind it is still a 502 (the engine never had all of it, so the
// client may send it again). An engine that answers and keeps the
// connection open, reading nothing more, gets the same: its answer at
// once, not a 504 at the first-byte deadline the write would wait for.
func TestEarlyAnswerBeforeTheBody(t *testing.T) {
	const size = 24 << 20 // more than loopback's send and receive buffers take
	const refusal = `{"error":{"message":"request body too large","type":"invalid_request_error"}}`
	cases := []struct {
		name   string
		answer int  // the engine's status before the body; 0: none, a bare reset
		warm   bool // the large request goes out on a pooled connection
		want   int  // what the client gets
		keep   bool // the engine keeps the connection open after its answer, reading nothing
	}{
		{"413", 413, false, 413, false},
		{"413 on a pooled connection", 413, true, 413, false},
		{"reset", 0, false, 502, false},
		// A server's 408 as it closes an idle connection answers no
		// request: net/http's transport ignores one on a reused connection.
		{"408 on a pooled connection", 408, true, 502, false},
		{"413 kept open", 413, false, 413, true},
		{"413 kept open on a pooled connection", 413, true, 413, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held := make(chan struct{}) // ends the kept connections, after the gateway
			t.Cleanup(func() { close(held) })
			up, accepts := headEngine(t, func(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool {
				if h.ContentLength() < size {
					return readAndAnswer(c, br, h) // a small request: read and answered
				}
				// Refused on its head: the body is never read, and the
				// close with it unread resets the connection.
				if tc.answer != 0 {
					fmt.Fprintf(c, "HTTP/1.1 %d Refused\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.answer, len(refusal), refusal)
				}
				if tc.keep {
					<-held // the body stays unread, the connection open
					return false
				}
				c.(*net.TCPConn).SetLinger(0)
				return false
			})
			g := startGateway(t, Config{Upstream: up, MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute})
			small := func() {
				t.Helper()
				if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil); err != nil || status != 200 {
					t.Fatalf("small request: %d %v", status, err)
				}
				if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
					t.Fatalf("small request's record %+v", rec)
				}
			}
			if tc.warm {
				small()
			}
			body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
			status, hdr, got, err := post(t, g.URL()+"/v1/chat/completions", body, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := g.record(t)
			if tc.want != 502 {
				if status != tc.want || got != refusal {
					t.Fatalf("client got %d %q, want the engine's %d", status, got, tc.want)
				}
				if rec.Status != tc.want || rec.UpstreamStatus != tc.want {
					t.Fatalf("record %+v", rec)
				}
			} else {
				// The engine never had the whole request: the client may
				// send it again.
				if status != 502 || hdr.Get("X-Should-Retry") != "" {
					t.Fatalf("client got %d %v %q, want 502 that may be retried", status, hdr, got)
				}
				if rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 {
					t.Fatalf("record %+v", rec)
				}
			}
			// The connection is gone: the next request gets a new one.
			small()
			if n := accepts.Load(); n != 2 {
				t.Errorf("%d upstream connections, want 2", n)
			}
			g.noMoreRecords(t)
		})
	}
}

// An interim answer (a 103) that comes while the request's write waits on
// a full socket is no early answer: the write goes on, and the final
// answer, sent once the engine has read the whole request, is the
// client's, on a connection kept for the next request.
func TestInterimAnswerWhileTheBodyIsWritten(t *testing.T) {
	const size = 24 << 20 // more than loopback's send and receive buffers take
	up, accepts := headEngine(t, func(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool {
		if h.ContentLength() >= size {
			// Before the body is read: the gateway's write waits.
			fmt.Fprint(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
		}
		return readAndAnswer(c, br, h)
	})
	g := startGateway(t, Config{Upstream: up, MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
	for _, b := range []string{body, `{"model":"m","messages":[]}`} {
		answeredOK(t, g, b)
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d upstream connections, want 1: the first answered the whole request", n)
	}
	g.noMoreRecords(t)
}

// headEngine starts an engine on loopback that reads each request's head
// and hands it to serve, with the connection and its reader (the body
// unread); serve returns false to close the connection. It returns the
// engine's URL and its count of connections accepted.
func headEngine(t *testing.T, serve func(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool) (string, *atomic.Int32) {
	t.Helper()
	var accepts atomic.Int32
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var h fasthttp.RequestHeader
					if h.Read(br) != nil || !serve(c, br, &h) {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &accepts
}

// answeredOK posts body to g and checks that the client got the engine's
// 200 with jsonReply and the record is ok.
func answeredOK(t *testing.T, g *gateway, body string) {
	t.Helper()
	status, _, got, err := post(t, g.URL()+"/v1/chat/completions", body, nil)
	if err != nil || status != 200 || got != jsonReply {
		t.Fatalf("client got %d %q %v, want the engine's 200", status, got, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("record %+v", rec)
	}
}

// readAndAnswer is a headEngine's serve that reads the body and answers
// 200 with jsonReply.
func readAndAnswer(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool {
	if _, err := io.ReadFull(br, make([]byte, h.ContentLength())); err != nil {
		return false
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(jsonReply), jsonReply)
	return true
}

// An engine may send its 200 head as soon as it has a request's head and
// read the body after (a full-duplex server, one that flushes its head to
// hold a stream open): that head ends no write, or the engine would wait
// for the rest of a body that never comes. The client gets the answer the
// engine sends once it has read the whole request, on a connection kept
// for the next request (the whole request was written).
func TestSuccessHeadBeforeTheBodyLetsTheWriteGoOn(t *testing.T) {
	const size = 24 << 20 // more than loopback's send and receive buffers take
	up, accepts := headEngine(t, func(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool {
		if h.ContentLength() >= size {
			// The head at once, the body once the request is read.
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(jsonReply))
			if _, err := io.ReadFull(br, make([]byte, h.ContentLength())); err != nil {
				return false
			}
			fmt.Fprint(c, jsonReply)
			return true
		}
		return readAndAnswer(c, br, h)
	})
	// The idle timeout bounds a failure's wait for a body that never comes.
	g := startGateway(t, Config{Upstream: up, MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute, IdleTimeout: 3 * time.Second})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
	for _, b := range []string{body, `{"model":"m","messages":[]}`} {
		answeredOK(t, g, b)
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d upstream connections, want 1: the engine had the whole request", n)
	}
	g.noMoreRecords(t)
}

// A 413 says the engine would not read the body: one it answers before
// reading a body the socket took whole (no write waited, so no watch saw
// the answer come early) leaves that body unread on a connection it may
// keep open, reading nothing more. The connection is not used again: the
// next request, on it, would wait out the first-byte deadline for a 504.
func TestRefusalOfABodyTheSocketTookEndsTheConnection(t *testing.T) {
	const size = 64 << 10       // what loopback's buffers take at once
	held := make(chan struct{}) // ends the kept connections, after the gateway
	t.Cleanup(func() { close(held) })
	up, accepts := headEngine(t, func(c net.Conn, br *bufio.Reader, h *fasthttp.RequestHeader) bool {
		if h.ContentLength() >= size {
			// Refused on its head, the body left unread, the connection kept.
			fmt.Fprint(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
			<-held
			return false
		}
		return readAndAnswer(c, br, h)
	})
	// The first-byte timeout bounds a failure's wait on the kept connection.
	g := startGateway(t, Config{Upstream: up, MaxBodyBytes: size + 1024, FirstByteTimeout: 3 * time.Second})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 413 {
		t.Fatalf("client got %d %v, want the engine's 413", status, err)
	}
	if rec := g.record(t); rec.Status != 413 {
		t.Fatalf("record %+v", rec)
	}
	answeredOK(t, g, `{"model":"m","messages":[]}`) // the next request, on a new connection
	if n := accepts.Load(); n != 2 {
		t.Errorf("%d upstream connections, want 2", n)
	}
	g.noMoreRecords(t)
}

// An engine that answers as soon as it has read the whole request answers
// while the gateway's write may not have returned yet (loopback hands the
// last bytes over within the write's system call): a 2xx is no early
// answer, and the connection is kept for the next request. Under the race
// detector the head watch starts before every write of a body over the
// head buffer, and such answers came before the write's end was seen. (A
// refusal so read ends its connection: it may have come before the
// engine read the body, which would then be the connection's next
// request.)
func TestAnswerAsTheWriteEndsKeepsTheConnection(t *testing.T) {
	const size = 256 << 10
	up, accepts := headEngine(t, readAndAnswer)
	g := startGateway(t, Config{Upstream: up, MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
	for i := 0; i < 40; i++ {
		if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", body, nil); err != nil || status != 200 {
			t.Fatalf("client got %d %v, want the engine's 200", status, err)
		}
		if rec := g.record(t); rec.Status != 200 {
			t.Fatalf("record %+v", rec)
		}
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d upstream connections for 40 requests, want 1", n)
	}
	g.noMoreRecords(t)
}
