package proxy

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// chunkReader hands out its chunks in order, at most one per Read: what a
// socket gives when the engine's writes arrive one at a time.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	return n, nil
}

// scriptedUpstreamConn returns a pool and a connection taken from it to
// an engine that takes requests into its socket buffers and answers
// nothing: the connection reads its answers from chunks instead (one per
// read, as chunkReader), and req, method to uri, is a request to send on
// it with resp for its answer.
func scriptedUpstreamConn(t *testing.T, method, uri string, chunks ...string) (u *upstream, c *upConn, now time.Time, req *fasthttp.Request, resp *fasthttp.Response) {
	t.Helper()
	ln := idleEngine(t, 4)
	u = newUpstream(ln.Addr().String(), time.Second, 4, time.Minute)
	u.noSweep = true
	t.Cleanup(u.closeIdle)
	now = time.Now()
	c, err := u.get(now, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.rc = nil // read through src, not the socket
	c.src = &chunkReader{chunks: chunks}
	req, resp = fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	t.Cleanup(func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost("engine")
	return u, c, now, req, resp
}

// An answer whose headers did not fit the small reader is read through a
// large one over it; bytes the engine sent past the answer's end can then
// sit in the small reader, and the connection must not be reused: the next
// request on it would read them as its own answer, another tenant's
// response (found by a hostile-engine probe, 5 runs of 5). The engine's
// answer and head make 64 KiB, its last 1,000 bytes come in a write of
// their own with an answer nobody asked for behind them; the reads are
// scripted, so the small reader's refill happens every run.
func TestBytesAfterALargeHeadAreNotTheNextAnswer(t *testing.T) {
	const body = `{"id":"mine"}`
	head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n"
	pad := bigHeaderBufSize - len(head) - len("X-Pad: \r\n\r\n") - len(body)
	answer := head + "X-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n" + body
	if len(answer) != bigHeaderBufSize {
		t.Fatalf("answer of %d bytes", len(answer))
	}
	leaked := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"id\":\"leaked\"}\n"
	u, c, now, req, resp := scriptedUpstreamConn(t, "POST", "/v1/chat/completions", answer[:len(answer)-1000], answer[len(answer)-1000:]+leaked)
	req.SetBodyString(`{"model":"m"}`)
	if err := u.roundTrip(c, fastUp{req}, resp, now.Add(time.Minute), false, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.BodyStream())
	if err != nil || string(got) != body {
		t.Fatalf("body %q, %v", got, err)
	}
	resp.CloseBodyStream()
	if c.under == nil {
		t.Fatal("the head was read without the large reader: the case is not set up")
	}
	u.put(c, now)
	next, err := u.get(now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer u.discard(next)
	if next == c {
		t.Fatalf("the connection was reused with %d bytes the engine sent unasked: the next request reads them as its answer", c.under.Buffered())
	}
}

// A connection whose reader grew for large headers, given a head larger
// still, fails that answer and is discarded; the pool of small readers
// gets back its small reader, never the large one (which, lent to the next
// connection, would keep it off the direct read path: found by a review).
func TestLargeHeadReaderNeverPooledAsSmall(t *testing.T) {
	answer := func(pad int) string {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n{}"
	}
	u, c, now, req, resp := scriptedUpstreamConn(t, "GET", "/v1/models", answer(3000)+answer(70000))
	for i, wantErr := range []bool{false, true} {
		err := u.roundTrip(c, fastUp{req}, resp, now.Add(time.Minute), false, nil, nil)
		if (err != nil) != wantErr {
			t.Fatalf("answer %d: %v", i, err)
		}
		if err == nil {
			if b, err := io.ReadAll(resp.BodyStream()); err != nil || string(b) != "{}" {
				t.Fatalf("answer %d: body %q, %v", i, b, err)
			}
			resp.CloseBodyStream()
		}
	}
	u.discard(c)
	for {
		br, _ := u.readers.Get().(*bufio.Reader)
		if br == nil {
			break
		}
		if br.Size() != upstreamBufSize {
			t.Fatalf("a reader of %d bytes in the pool of %d-byte readers", br.Size(), upstreamBufSize)
		}
	}
}
