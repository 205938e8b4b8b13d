package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// scanHead runs a reqHeadScan over s delivered in pieces of size step, and
// returns how many bytes it passed on and whether it found a bare LF.
func scanHead(s string, step int) (int, bool) {
	var h reqHeadScan
	h.arm()
	passed := 0
	for b := []byte(s); len(b) > 0 && !h.bad; {
		n := min(step, len(b))
		passed += h.scan(b[:n])
		b = b[n:]
	}
	return passed, h.bad
}

func TestReqHeadScan(t *testing.T) {
	for _, c := range []struct {
		in     string
		bad    bool
		passed int // bytes passed on before the bare LF, when bad
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, 0},
		{"\r\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", false, 0},                           // leading empty lines, either kind
		{"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\nab", false, 0},                // the body is not looked at
		{"GET / HTTP/1.1\nHost: x\n\n", true, len("GET / HTTP/1.1")},                    // every line
		{"GET / HTTP/1.1\r\nHost: x\n\r\n", true, len("GET / HTTP/1.1\r\nHost: x")},     // a field line
		{"GET / HTTP/1.1\r\nHost: x\r\n\n", true, len("GET / HTTP/1.1\r\nHost: x\r\n")}, // the blank line
		{"GET / HTTP/1.1\r\nA: \r\r\n\r\n", false, 0},                                   // CR CR LF: its LF follows a CR
		{"GET / HTTP/1.1\n", true, len("GET / HTTP/1.1")},                               // nothing after it needed
	} {
		for _, step := range []int{1, 2, 3, len(c.in)} {
			passed, bad := scanHead(c.in, step)
			if bad != c.bad || (bad && passed != c.passed) || (!bad && passed != len(c.in)) {
				t.Errorf("%q in pieces of %d: bad %v after %d bytes; want bad %v after %d", c.in, step, bad, passed, c.bad, c.passed)
			}
		}
	}
}

// A request head whose lines end with a bare LF is refused at once (400,
// one record), not left waiting for read_header's 408 (fasthttp finds a
// head's end only at CRLF CRLF), nor served when a CRLF CRLF follows;
// on a kept-alive connection too. A CRLF head is served, whatever blank
// lines come before it or its body holds.
func TestBareLFRequestHeadRefusedAtOnce(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		io.WriteString(c.BW, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.BW.Flush()
	})
	// A minute for the head: the answers below come long before it.
	g := startGateway(t, Config{Upstream: up.URL(), ReadHeaderTimeout: time.Minute})
	refused := func(t *testing.T, answer string) {
		t.Helper()
		if !strings.HasPrefix(answer, "HTTP/1.1 400 ") || !strings.Contains(answer, "CRLF") {
			t.Errorf("answer %q", answer)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 {
			t.Errorf("record %s %d (%s)", rec.Outcome, rec.Status, rec.ErrorMessage)
		}
		g.noMoreRecords(t)
	}
	for _, c := range []struct{ name, send string }{
		{"every line", "GET /v1/models HTTP/1.1\nHost: x\n\n"},
		{"the request line alone, the rest not sent", "GET /v1/models HTTP/1.1\n"},
		{"the blank line", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\n{}"},
		{"a field line before a CRLF blank line", "GET /v1/models HTTP/1.1\r\nHost: x\n\r\n"},
		// fasthttp would have served this one, taking the bare LF for a
		// line end because a CRLF CRLF came after it.
		{"a field line in a head ending in CRLF CRLF", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\nContent-Length: 2\r\n\r\n{}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, c.send)
			answer, took, closed := readAnswer(t, conn, 10*time.Second)
			if !closed {
				t.Fatalf("no answer after %v: %q", took, answer)
			}
			refused(t, answer)
		})
	}
	t.Run("kept-alive connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		// Leading blank lines, and a body with bare LFs, are no head's lines.
		for _, req := range []string{
			"\r\n\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
			"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n{\n\n\n\n}\n\n",
		} {
			io.WriteString(conn, req)
			resp, err := http.ReadResponse(br, nil)
			drainOK(t, resp, err)
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Fatalf("record %s %d (%s)", rec.Outcome, rec.Status, rec.ErrorMessage)
			}
		}
		io.WriteString(conn, "GET /v1/models HTTP/1.1\nHost: x\n\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(br)
		if err != nil {
			t.Fatalf("no answer: %v (%q)", err, b)
		}
		refused(t, string(b))
	})
}

func TestHasBareLF(t *testing.T) {
	for _, c := range []struct {
		raw string
		bad bool
	}{
		{"", false},
		{"Host: x\r\n\r\n", false},
		{"Host: x\r\nA: \r\r\n\r\n", false}, // CR CR LF: its LF follows a CR
		{"Host: x\nA: 1\r\n\r\n", true},
		{"Host: x\r\n\n", true},
		{"\nHost: x\r\n\r\n", true},
		{"Host: x\r\nA: 1\r\n folded\n\r\n", true},
	} {
		if got := hasBareLF([]byte(c.raw)); got != c.bad {
			t.Errorf("%q: %v, want %v", c.raw, got, c.bad)
		}
	}
}

// A head with bare-LF lines pipelined behind an earlier request (read with
// that request's bytes, where the connection's scan does not follow it)
// is refused as one that came alone: 400, one record, the connection
// closed, nothing of it or behind it sent to the engine. fasthttp served
// it, reading the bare LFs as line ends, and with a bare-LF blank line
// took what followed for the next request (request smuggling, where a
// proxy in front reads the bytes otherwise).
func TestPipelinedBareLFHeadRefused(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		io.WriteString(c.BW, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL(), ReadHeaderTimeout: time.Minute})
	const first = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, c := range []struct{ name, behind string }{
		{"a field line in a head ending in CRLF CRLF", "GET /v1/models HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n"},
		{"a bare-LF blank line, a CRLF head behind it", "GET /v1/models HTTP/1.1\r\nHost: x\n\nGET /v1/models HTTP/1.1\r\nHost: y\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up.mu.Lock()
			before := len(up.raw)
			up.mu.Unlock()
			conn, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, first+c.behind)
			answer, took, closed := readAnswer(t, conn, 10*time.Second)
			if !closed {
				t.Fatalf("the connection still open after %v: %q", took, answer)
			}
			ok, refusal, found := strings.Cut(answer, "HTTP/1.1 400 ")
			if !found || !strings.HasPrefix(ok, "HTTP/1.1 200 ") || !strings.Contains(refusal, "CRLF") || strings.Contains(refusal, "HTTP/1.1 ") {
				t.Fatalf("answers %q", answer)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Errorf("first record %s %d (%s)", rec.Outcome, rec.Status, rec.ErrorMessage)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 || rec.Tenant != DefaultTenant {
				t.Errorf("second record %s %d %q (%s)", rec.Outcome, rec.Status, rec.Tenant, rec.ErrorMessage)
			}
			g.noMoreRecords(t)
			up.mu.Lock()
			sent := len(up.raw) - before
			up.mu.Unlock()
			if sent != 1 {
				t.Errorf("the engine got %d requests, want 1", sent)
			}
		})
	}
}
