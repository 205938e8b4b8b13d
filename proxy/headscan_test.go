package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// headScan finds the end of a head as a lenient reader would, refuses one
// that is not CRLF CRLF, follows interim heads, and never looks at a body,
// however the bytes are split across reads.
func TestHeadScan(t *testing.T) {
	const (
		ends = iota // the head's end is found
		bad         // errBareLF
		more        // an interim head ended: the next is followed
	)
	cases := []struct {
		wire string
		want int
	}{
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n", ends},
		{"HTTP/1.1 200 OK\r\n\r\n\n\n", ends},
		{"HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n\n", ends}, // a bare LF inside: fasthttp reads it
		{"HTTP/1.1 200 OK\n\r\n\n", ends},                 // a status line alone, then CRLF: fasthttp reads it
		{"\r\nHTTP/1.1 200 OK\r\n\r\n\n\n", ends},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nA: b\r\n\r\ndata: x\n\n", ends},
		{"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\n", ends},
		{"HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\r\n\r\n\n", ends}, // fasthttp reads both at the final CRLF CRLF
		{"HTTP/1.1 100 Continue\n\n", more},
		{"HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n", bad},
		{"HTTP/1.1 200 OK\n\n", bad},
		{"HTTP/1.1 200 OK\r\nA: b\n\r\n", bad},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\n", bad},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\nA: b\n\n", bad},
		{"HTTP/1.1  100 Continue\r\n\r\nHTTP/1.1 200 OK\nA: b\n\n", bad}, // two spaces: still interim to fasthttp
		{"\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\nA: b\n\n", bad},
	}
	for _, c := range cases {
		for _, parts := range splitsOf(c.wire) {
			var h headScan
			h.start()
			var err error
			for _, p := range parts {
				if err = h.scan([]byte(p)); err != nil {
					break
				}
			}
			if (c.want == bad) != errors.Is(err, errBareLF) || (c.want == bad) != h.bad {
				t.Fatalf("%q in %d reads: %v", c.wire, len(parts), err)
			}
			if (c.want == more) != h.on {
				t.Fatalf("%q in %d reads: following a head: %v", c.wire, len(parts), h.on)
			}
		}
	}
}

// splitsOf returns the ways a test feeds wire to a scan: whole, in two
// reads split at every point, and a byte per read.
func splitsOf(wire string) [][]string {
	splits := [][]string{{wire}}
	for i := 1; i < len(wire); i++ {
		splits = append(splits, []string{wire[:i], wire[i:]})
	}
	var bytewise []string
	for i := range wire {
		bytewise = append(bytewise, wire[i:i+1])
	}
	return append(splits, bytewise)
}

// headScan notes a Content-Length and a Transfer-Encoding field of the
// final head, however their names are cased or spaced and however the
// bytes are split: not one of an interim head, of the status line, of
// another field's name or value, or of the body.
func TestHeadScanFraming(t *testing.T) {
	cases := []struct {
		wire   string
		cl, te bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-LENGTH : 5\r\n\r\n", true, true},
		{"HTTP/1.1 200 OK\r\nContent-Length\t:5\r\n\r\n", true, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"HTTP/1.0 200 OK\r\nContent-Length: 5\r\ntransfer-ENCODING\t: chunked\r\n\r\n", true, true},
		{"HTTP/1.1 200 OK\r\nContent-Lengths: 5\r\nTransfer-Encodings: chunked\r\n\r\n", false, false},
		{"HTTP/1.1 200 OK\r\nX-Content-Length: 5\r\nX-Transfer-Encoding: chunked\r\n\r\n", false, false},
		{"HTTP/1.1 200 OK\r\nContent-Type: x\r\nTE: trailers\r\n\r\n", false, false},
		{"HTTP/1.1 200 OK\r\nX: Content-Length: 5\r\n\r\n", false, false},
		{"HTTP/1.1 200 OK\r\nContent-Length-X: 5\r\n\r\n", false, false},
		{"Content-Length: 5\r\n", false, false}, // a status line, however odd
		{"HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", true, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nContent-Length: 5\r\n\r\n", false, true},
		{"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nTransfer-Encoding: chunked\r\n\r\n", true, false},
	}
	for _, c := range cases {
		for _, parts := range splitsOf(c.wire) {
			var h headScan
			h.start()
			for _, p := range parts {
				h.scan([]byte(p))
			}
			if h.cl != c.cl || h.te != c.te {
				t.Fatalf("%q in %d reads: cl %v, te %v", c.wire, len(parts), h.cl, h.te)
			}
		}
	}
}

// An engine whose response head ends with a bare LF blank line gets a
// prompt 502 and an upstream_error record that says why: fasthttp's reader
// would have waited for a CRLF CRLF until the first-byte deadline (a
// minute here; the record comes within the harness's 10 s or the test
// fails). An engine that ends its head with CRLF CRLF, bare LFs inside it
// or not, streams as before.
func TestBareLFHeadRefusedAtOnce(t *testing.T) {
	for _, head := range []string{
		"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\n\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		bad := strings.HasSuffix(head, "\n\n")
		t.Run(fmt.Sprintf("bad=%v", bad), func(t *testing.T) {
			release := make(chan struct{})
			up := startRawUpstream(t, func(c *scriptConn) {
				ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
				fmt.Fprintf(c.BW, "%s%x\r\n%s\r\n", head, len(ev), ev)
				c.BW.Flush()
				<-release // the stream's end never comes before the test's
				fmt.Fprintf(c.BW, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
				c.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL(), FirstByteTimeout: time.Minute, FirstTokenTimeout: time.Minute})
			done := postAsync(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
			if !bad {
				close(release)
				if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL == 0 {
					t.Fatalf("record %+v", rec)
				}
				if r := <-done; r.err != nil || r.status != 200 {
					t.Fatalf("client %+v", r)
				}
				return
			}
			defer close(release)
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 || !strings.Contains(rec.ErrorMessage, "bare LF") {
				t.Fatalf("record %+v", rec)
			}
			if r := <-done; r.err != nil || r.status != 502 || !strings.Contains(r.body, "invalid response head") {
				t.Fatalf("client %+v", r)
			}
		})
	}
}

// A refused head is refused however fasthttp read it: with its whole
// chunked body in the same read, fasthttp finds the body's CRLF CRLF and
// parses the head before the reader's error, which then stayed in the
// reader: a small head passed to the client as a 200, and a head over the
// small reader's 2 KiB left the error on a pooled connection, where the
// next request met it as a 502 (found by a review). Both are 502 now, and
// the next request, on a new connection, is served.
func TestBareLFHeadWithItsWholeBody(t *testing.T) {
	for _, pad := range []int{0, 3000} {
		t.Run(fmt.Sprintf("pad=%d", pad), func(t *testing.T) {
			var n atomic.Int32
			up := startRawUpstream(t, func(c *scriptConn) {
				if n.Add(1) == 1 {
					fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\nContent-Type: application/json\nX-Pad: %s\nTransfer-Encoding: chunked\n\n%x\r\n%s\r\n0\r\n\r\n", strings.Repeat("p", pad), len(jsonReply), jsonReply)
					c.BW.Flush()
					return
				}
				writeJSONReply(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			for i, want := range []int{502, 200} {
				status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
				rec := g.record(t)
				if err != nil || status != want || rec.Status != want {
					t.Fatalf("request %d: %d %v, record %+v; want %d", i, status, err, rec, want)
				}
				if i == 0 && !strings.Contains(rec.ErrorMessage, "bare LF") {
					t.Fatalf("record's error %q", rec.ErrorMessage)
				}
			}
		})
	}
}

// However the connection's bytes are split into reads, headScan decides
// the same, and never reads past what it is given.
func FuzzHeadScan(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nA: b\r\n\r\ndata: x\n\n"), uint16(5))
	f.Add([]byte("HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nA: b\n\n"), uint16(23))
	f.Add([]byte("\r\n\r\nHTTP/1.1  103 x\r\n\r\n"), uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		k := int(cut) % (len(b) + 1)
		var whole, split, bytewise headScan
		whole.start()
		split.start()
		bytewise.start()
		errWhole := whole.scan(b)
		errSplit := split.scan(b[:k])
		if errSplit == nil {
			errSplit = split.scan(b[k:])
		}
		var errByte error
		for i := 0; i < len(b) && errByte == nil; i++ {
			errByte = bytewise.scan(b[i : i+1])
		}
		if (errWhole == nil) != (errSplit == nil) || (errWhole == nil) != (errByte == nil) ||
			whole.on != split.on || whole.on != bytewise.on || whole.bad != split.bad || whole.bad != bytewise.bad ||
			whole.cl != split.cl || whole.cl != bytewise.cl || whole.te != split.te || whole.te != bytewise.te {
			t.Fatalf("%q cut at %d: whole %v %+v, split %v %+v, bytewise %v %+v", b, k, errWhole, whole, errSplit, split, errByte, bytewise)
		}
	})
}

// An engine's answer with both Content-Length and Transfer-Encoding is read
// as chunked, whole, and its connection is not used again (RFC 9112, 6.3):
// a reader in front of the engine that took the Content-Length would read
// the next answer from elsewhere in the bytes than the gateway does. One
// with either alone keeps its connection. The client's own connection is
// not closed for it.
func TestBothFramingsCloseTheEngineConnection(t *testing.T) {
	ev := strings.Join(vllmEvents, "") + done
	for _, c := range []struct {
		name, ctype, framing, body string
		conns                      int32
	}{
		{"stream, both", "text/event-stream", "Content-Length: 7\r\nTransfer-Encoding: chunked\r\n", ev, 2},
		{"stream, chunked", "text/event-stream", "Transfer-Encoding: chunked\r\n", ev, 1},
		{"body, both, the length first", "application/json", "Content-Length: 7\r\nTransfer-Encoding: chunked\r\n", jsonReply, 2},
		{"body, both, the length last", "application/json", "Transfer-Encoding: chunked\r\ncontent-length : 7\r\n", jsonReply, 2},
		{"body, chunked", "application/json", "Transfer-Encoding: chunked\r\n", jsonReply, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(s *scriptConn) {
				fmt.Fprintf(s.BW, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", c.ctype, c.framing, len(c.body), c.body)
				s.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			// A client of its own, whose second request says whether it
			// reused the first one's connection (Go's client takes a
			// "Connection: close" off the header it returns, so the header
			// cannot tell).
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			for i := range 2 {
				var reused bool
				req := newPost(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused },
				}))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				rec := g.record(t)
				if err != nil || resp.StatusCode != 200 || string(b) != c.body || rec.Outcome != meter.OutcomeOK || rec.OSL <= 0 {
					t.Fatalf("request %d: %d %v %q, record %+v", i, resp.StatusCode, err, b, rec)
				}
				if i == 1 && !reused {
					t.Fatal("the client's connection was closed after the first answer")
				}
			}
			if n := up.accepts.Load(); n != c.conns {
				t.Fatalf("%d engine connections for two requests, want %d", n, c.conns)
			}
		})
	}
}

// BenchmarkHeadScan is the scan of a vLLM stream's response head (as
// uvicorn writes it), as its reads bring it: whole, the common case.
func BenchmarkHeadScan(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")
	b.ReportAllocs()
	var h headScan
	for b.Loop() {
		h.start()
		if h.scan(head) != nil || h.on {
			b.Fatal("the head's end not found")
		}
	}
}

// An HTTP/1.0 answer with Transfer-Encoding has framing in doubt (RFC 9112,
// 6.1: the recipient treats it as faulty and closes the connection after
// it). fasthttp ignores Transfer-Encoding in an HTTP/1.0 head and reads
// its Content-Length: an engine that meant the chunked framing, and sends
// the rest of its chunks a moment later, had its connection pooled after
// the Content-Length's bytes, and the next request (of any tenant) read
// those chunks as its own answer's head: a 502 for a request the engine
// never failed (found by the hostile-engine probe).
func TestHTTP10TransferEncodingClosesTheEngineConnection(t *testing.T) {
	var n atomic.Int32
	rest := make(chan struct{})   // the first answer's rest goes once closed
	second := make(chan struct{}) // the next request came on a new connection
	up := startRawUpstream(t, func(c *scriptConn) {
		if n.Add(1) > 1 {
			close(second)
			vllmUpstream(0)(c)
			return
		}
		first := fmt.Sprintf("%x\r\n%s\r\n", len(vllmEvents[0]), vllmEvents[0])
		fmt.Fprintf(c.BW, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(first), first)
		c.BW.Flush()
		<-rest
		for _, e := range vllmEvents[1:] {
			writeChunk(c, e)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
		t.Fatalf("first request: %d %v", status, err)
	}
	g.record(t)
	defer close(rest) // once the next request has its answer, or has failed
	next := postAsync(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the next request did not come on a new connection: the first one was pooled")
	}
	r := <-next
	rec := g.record(t)
	if r.err != nil || r.status != 200 || !strings.Contains(r.body, "[DONE]") || rec.Outcome != meter.OutcomeOK {
		t.Fatalf("the next request got %d %v %q, record %s %q", r.status, r.err, r.body, rec.Outcome, rec.ErrorMessage)
	}
}

// An HTTP/1.0 engine's keep-alive answer with both Content-Length and
// Transfer-Encoding closes its connection too: fasthttp drops the
// Transfer-Encoding of an HTTP/1.0 message and reads the Content-Length,
// so the length is no sign of the two (RFC 9112, 6.1: such a message's
// framing is faulty, and the connection is closed after it).
func TestBothFramingsHTTP10CloseTheEngineConnection(t *testing.T) {
	for _, c := range []struct {
		name, framing string
		conns         int32
	}{
		{"both", "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", 2},
		{"both, the encoding first", "Transfer-Encoding: chunked\r\ncontent-length : %d\r\n", 2},
		{"the length alone", "Content-Length: %d\r\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(s *scriptConn) {
				fmt.Fprintf(s.BW, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n"+c.framing+"\r\n%s", len(jsonReply), jsonReply)
				s.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			for i := range 2 {
				status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
				rec := g.record(t)
				if err != nil || status != 200 || body != jsonReply || rec.Outcome != meter.OutcomeOK {
					t.Fatalf("request %d: %d %v %q, record %+v", i, status, err, body, rec)
				}
			}
			if n := up.accepts.Load(); n != c.conns {
				t.Fatalf("%d engine connections for two requests, want %d", n, c.conns)
			}
		})
	}
}

// A 204 answer that announces a body (a Content-Length other than 0, or a
// Transfer-Encoding) has none by definition (RFC 9110, 15.3.5), so the
// reader reads nothing after its head, and bytes the engine sends as that
// body after the pooled connection's check at its next use would be read
// as the next request's answer: that connection is not used again. A 204
// with Content-Length 0, or without framing, keeps it.
func TestNoContentWithABodyClosesTheEngineConnection(t *testing.T) {
	for _, c := range []struct {
		name, framing string
		conns         int32
	}{
		{"a length", "Content-Length: 5\r\n", 2},
		{"chunked", "Transfer-Encoding: chunked\r\n", 2},
		{"a length of 0", "Content-Length: 0\r\n", 1},
		{"no framing", "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			up := startRawUpstream(t, func(s *scriptConn) {
				if n.Add(1) > 1 {
					vllmUpstream(0)(s)
					return
				}
				fmt.Fprintf(s.BW, "HTTP/1.1 204 No Content\r\n%s\r\n", c.framing)
				s.BW.Flush()
				if c.conns == 1 {
					return
				}
				// The "body", sent once the next request has come on this
				// connection: after the pooled connection's check.
				var b [1]byte
				if _, err := s.Conn.Read(b[:]); err == nil {
					fmt.Fprintf(s.BW, "hello")
					vllmUpstream(0)(s)
				}
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 204 {
				t.Fatalf("first request: %d %v", status, err)
			}
			g.record(t)
			status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
			rec := g.record(t)
			if err != nil || status != 200 || !strings.Contains(body, "[DONE]") || rec.Outcome != meter.OutcomeOK {
				t.Fatalf("the next request got %d %v %q, record %s %q", status, err, body, rec.Outcome, rec.ErrorMessage)
			}
			if got := up.accepts.Load(); got != c.conns {
				t.Fatalf("%d engine connections for two requests, want %d", got, c.conns)
			}
		})
	}
}
