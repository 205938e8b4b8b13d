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
		// A chunked body's framing is lines too; its data is not looked at.
		{chunkedHead + "2\r\n\n\n\r\n0\r\n\r\n", false, 0},
		{chunkedHead + "2\r\nab\r\n0\r\n\nGET / HTTP/1.1\r\n\r\n", true, len(chunkedHead + "2\r\nab\r\n0\r\n")}, // the trailer's end
		{chunkedHead + "2\r\nab\r\n0;a=b\r\n\n", true, len(chunkedHead + "2\r\nab\r\n0;a=b\r\n")},
		{chunkedHead + "2\nab\r\n0\r\n\r\n", true, len(chunkedHead + "2")},          // a chunk-size line
		{chunkedHead + "0\r\nX-A: b\n\r\n", true, len(chunkedHead + "0\r\nX-A: b")}, // a trailer field line
		{"POST / HTTP/1.1\r\nTRANSFER-ENCODING:\tChunked \r\n\r\n10\r\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\r\n0\r\n\n", true, len("POST / HTTP/1.1\r\nTRANSFER-ENCODING:\tChunked \r\n\r\n10\r\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\r\n0\r\n")},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 4\r\n\r\n\n\n\n\n", false, 0}, // not chunked: not looked at
		// Requests read with the bytes of the one before (pipelined) are
		// followed too, a body of known length skipped.
		{"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\n\n\nGET / HTTP/1.1\r\n\r\n", false, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\n\n\n" + chunkedHead + "0\r\n\n", true, len("POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\n\n\n" + chunkedHead + "0\r\n")},
		{chunkedHead + "0\r\n\r\nGET / HTTP/1.1\nHost: x\n\n", true, len(chunkedHead + "0\r\n\r\nGET / HTTP/1.1")},
		{"GET / HTTP/1.1\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\n\r\n", true, len("GET / HTTP/1.1\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x")},
		// A framing the scan cannot tell as fasthttp does is not followed.
		{"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\n\n\n\r\n0\r\n\r\n", false, 0},
		// A framing field's folded lines are joined to it, as fasthttp
		// joins them.
		{"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\n\n\n\r\n0\r\n\n", true, len("POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\n\n\n\r\n0\r\n")},
		{"POST / HTTP/1.1\r\nContent-Length:\r\n \r\n\t" + strings.Repeat(" ", 50) + "2\r\n\r\n\n\nGET / HTTP/1.1\n", true, len("POST / HTTP/1.1\r\nContent-Length:\r\n \r\n\t" + strings.Repeat(" ", 50) + "2\r\n\r\n\n\nGET / HTTP/1.1")},
		// A framing field line of any length is read, and a fold that
		// continues another field.
		{"POST / HTTP/1.1\r\nContent-Length:" + strings.Repeat(" ", 40) + "2\r\n\r\n\n\nGET / HTTP/1.1\n\n", true, len("POST / HTTP/1.1\r\nContent-Length:" + strings.Repeat(" ", 40) + "2\r\n\r\n\n\nGET / HTTP/1.1")},
		{"POST / HTTP/1.1\r\nContent-Length: " + strings.Repeat("0", 60) + "2 \r\n\r\n\n\nGET / HTTP/1.1\r\n\r\n", false, 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding:" + strings.Repeat("\t", 40) + "cHunked\r\n\r\n0\r\n\n", true, len("POST / HTTP/1.1\r\nTransfer-Encoding:" + strings.Repeat("\t", 40) + "cHunked\r\n\r\n0\r\n")},
		{"POST / HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n\n\nGET / HTTP/1.1\n", true, len("POST / HTTP/1.1\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n\n\nGET / HTTP/1.1")},
		{"POST / HTTP/1.1\r\nContent-Length: 2\r\n 3\r\n\r\n\n\nGET / HTTP/1.1\n", false, 0}, // "2 3": fasthttp refuses it
		// A framing field line longer than the scan keeps, after another
		// framing field: the one before is told by its own value, not the
		// long line's (fasthttp frames both by chunked, and closes the
		// connection after them).
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length:" + strings.Repeat(" ", 40) + "3\r\n\r\n5\r\na\nb\nc\r\n0\r\n\r\n", false, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding:" + strings.Repeat(" ", 40) + "chunked\r\n\r\n5\r\nabcde\r\n0\r\n\n", true, len("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding:" + strings.Repeat(" ", 40) + "chunked\r\n\r\n5\r\nabcde\r\n0\r\n")},
	} {
		for _, step := range []int{1, 2, 3, len(c.in)} {
			passed, bad := scanHead(c.in, step)
			if bad != c.bad || (bad && passed != c.passed) || (!bad && passed != len(c.in)) {
				t.Errorf("%q in pieces of %d: bad %v after %d bytes; want bad %v after %d", c.in, step, bad, passed, c.bad, c.passed)
			}
		}
	}
}

const chunkedHead = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"

// A chunked request whose trailer section ends with a bare LF ("0\r\n\n")
// is refused (400, one record) and nothing behind it is read: fasthttp,
// which refuses a bare LF in a chunk-size line, took this one for the
// body's end, and served the bytes after it as the next request, where a
// proxy in front that ends lines only at CRLF reads them as the trailer
// (request smuggling; found by an HTTP-level probe: a request pipelined
// behind "0\r\n\n" reached the engine). The same body ending in CRLF
// CRLF is served, with the request behind it.
func TestChunkedBareLFTrailerEndRefused(t *testing.T) {
	g, engineGot := chatGateway(t)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	chunked := func(end string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(body), body) + end
	}
	behind := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: smuggled\r\nContent-Length: 2\r\n\r\n{}"
	for _, c := range []struct {
		name   string
		writes []string
	}{
		{"one write", []string{chunked("0\r\n\n") + behind}},
		{"with an extension", []string{chunked("0;a=b\r\n\n") + behind}},
		{"the bare LF in a write of its own", []string{chunked("0\r\n"), "\n" + behind}},
		{"after a request served on the connection", []string{
			"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", chunked("0\r\n\n") + behind}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := engineGot()
			conn := g.dial(t)
			br := bufio.NewReader(conn)
			writes := c.writes
			if len(writes) > 1 && strings.HasPrefix(writes[0], "GET ") {
				io.WriteString(conn, writes[0])
				resp, err := http.ReadResponse(br, nil)
				drainOK(t, resp, err)
				if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
					t.Fatalf("first record %s %d (%s)", rec.Outcome, rec.Status, rec.ErrorMessage)
				}
				before++
				writes = writes[1:]
			}
			for _, w := range writes {
				io.WriteString(conn, w)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			answer, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("no answer: %v (%q)", err, answer)
			}
			if !strings.HasPrefix(string(answer), "HTTP/1.1 400 ") || !strings.Contains(string(answer), "CRLF") ||
				strings.Count(string(answer), "HTTP/1.1 ") != 1 {
				t.Fatalf("answer %q", answer)
			}
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeRejected || rec.Status != 400 || rec.Tenant != "acme" {
				t.Errorf("record %s %d %q (%s)", rec.Outcome, rec.Status, rec.Tenant, rec.ErrorMessage)
			}
			g.noMoreRecords(t)
			if n := engineGot() - before; n != 0 {
				t.Errorf("the engine got %d requests, want none", n)
			}
		})
	}
	t.Run("pipelined behind a request of known length", func(t *testing.T) {
		before := engineGot()
		conn := g.dial(t)
		first := "{\n\n" + body[1:] // bare LFs in a body are not line ends
		io.WriteString(conn, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\nContent-Length: %d\r\n\r\n%s", len(first), first)+
			chunked("0\r\n\n")+behind)
		servedThenRefused(t, g, conn, before, engineGot)
	})
	t.Run("CRLF CRLF end", func(t *testing.T) {
		before := engineGot()
		conn := g.dial(t)
		br := bufio.NewReader(conn)
		first := "{\n\n" + body[1:]
		io.WriteString(conn, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(first), first)+
			chunked("0\r\n\r\n")+behind)
		for i := 0; i < 3; i++ {
			resp, err := http.ReadResponse(br, nil)
			drainOK(t, resp, err)
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Fatalf("record %d: %s %d (%s)", i, rec.Outcome, rec.Status, rec.ErrorMessage)
			}
		}
		g.noMoreRecords(t)
		if n := engineGot() - before; n != 3 {
			t.Errorf("the engine got %d requests, want 3", n)
		}
	})
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
			conn := g.dial(t)
			io.WriteString(conn, c.send)
			answer, took, closed := readAnswer(t, conn, 10*time.Second)
			if !closed {
				t.Fatalf("no answer after %v: %q", took, answer)
			}
			refused(t, answer)
		})
	}
	t.Run("kept-alive connection", func(t *testing.T) {
		conn := g.dial(t)
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
			conn := g.dial(t)
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

// An openai Python SDK's request head and a 1 KiB body, read in one
// piece: the scan's cost per request (the framing fields looked for in
// every head line, the body skipped).
var sdkRequest = []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gateway:8080\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.0\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.0\r\nX-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.11.7\r\nAuthorization: Bearer sk-test\r\nX-Stainless-Async: false\r\nx-stainless-retry-count: 0\r\nx-stainless-read-timeout: 600\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("x", 1024))

func BenchmarkReqHeadScanSDK(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(sdkRequest)))
	var h reqHeadScan
	for b.Loop() {
		h.arm()
		h.scan(sdkRequest)
	}
}

// A request whose framing the scan could not tell stopped it, and the
// chunked request pipelined behind it was not followed: its trailer
// section ending in a bare LF ("0\r\n\n") smuggled the request behind it
// again (found by a review of the scan: a folded field, or a
// Content-Length with 40 spaces before its value, both served by fasthttp,
// in the request before it). The scan follows such heads now: a fold
// continues a field that frames nothing, and a framing field's value is
// read whatever its length.
func TestChunkedBareLFTrailerEndAfterUnreadHead(t *testing.T) {
	g, engineGot := chatGateway(t)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	chunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(body), body) + "0\r\n\n"
	behind := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: smuggled\r\nContent-Length: 2\r\n\r\n{}"
	for _, c := range []struct{ name, field string }{
		{"a folded field", "X-Note: a\r\n b"},
		{"a long Content-Length line", "Content-Length:" + strings.Repeat(" ", 40) + fmt.Sprint(len(body))},
		{"a long Content-Length value", "Content-Length: " + strings.Repeat("0", 40) + fmt.Sprint(len(body))},
		{"a folded Content-Length", "Content-Length:\r\n " + fmt.Sprint(len(body))},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := engineGot()
			conn := g.dial(t)
			first := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\n" + c.field + "\r\n"
			if !strings.HasPrefix(c.field, "Content-Length") {
				first += fmt.Sprintf("Content-Length: %d\r\n", len(body))
			}
			io.WriteString(conn, first+"\r\n"+body+chunked+behind)
			servedThenRefused(t, g, conn, before, engineGot)
		})
	}
}

// servedThenRefused reads the answers on conn, to which a request was
// written and behind it one with a bare LF in its framing: the first is
// served (200, an ok record, one request more at the engine than before,
// which engineGot counts) and the second refused (400, a rejected record
// under acme), nothing behind it read.
func servedThenRefused(t *testing.T, g *gateway, conn net.Conn, before int, engineGot func() int) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("no answer: %v (%q)", err, answer)
	}
	ok, refusal, found := strings.Cut(string(answer), "HTTP/1.1 400 ")
	if !found || !strings.HasPrefix(ok, "HTTP/1.1 200 ") || strings.Count(ok, "HTTP/1.1 ") != 1 ||
		!strings.Contains(refusal, "CRLF") || strings.Contains(refusal, "HTTP/1.1 ") {
		t.Fatalf("answers %q", answer)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Errorf("first record %s %d (%s)", rec.Outcome, rec.Status, rec.ErrorMessage)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 400 || rec.Tenant != "acme" {
		t.Errorf("second record %s %d %q (%s)", rec.Outcome, rec.Status, rec.Tenant, rec.ErrorMessage)
	}
	g.noMoreRecords(t)
	if n := engineGot() - before; n != 1 {
		t.Errorf("the engine got %d requests, want 1", n)
	}
}

// chatGateway starts a gateway in front of an engine that answers every
// request with one chat completion; engineGot counts the requests the
// engine has had.
func chatGateway(t *testing.T) (g *gateway, engineGot func() int) {
	up := startRawUpstream(t, func(c *scriptConn) {
		const answer = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		c.BW.Flush()
	})
	g = startGateway(t, Config{Upstream: up.URL(), ReadHeaderTimeout: time.Minute})
	return g, func() int {
		up.mu.Lock()
		defer up.mu.Unlock()
		return len(up.raw)
	}
}
