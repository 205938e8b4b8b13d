//go:build unix && !race

// Not under the race detector: the test reads the connection's reader
// field while the round trip's goroutine is parked, an order the detector
// cannot see (the barrier is the goroutine's state, not a channel).

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A request whose answer has not begun holds no reader: the engine may
// queue it or prefill for a long time, and a burst of new streams (every
// client connecting at once) would each hold the response head's 2 KiB
// meanwhile. The wait for the head's first byte reads nothing; the head is
// then read as before, and an answer that never comes still fails at the
// first-byte deadline.
func TestWaitForHeadHoldsNoReader(t *testing.T) {
	nc, engine := tcpPair(t)
	c := &upConn{Conn: nc}
	c.src = newUpReader(c)
	if c.rc == nil {
		t.Skip("no raw socket here")
	}
	u := newUpstream(nc.RemoteAddr().String(), time.Second, 1, time.Minute)
	received := make(chan struct{})
	answer := make(chan struct{})
	go func() {
		req, err := http.ReadRequest(bufio.NewReader(engine))
		if err == nil {
			io.Copy(io.Discard, req.Body)
		}
		close(received)
		<-answer
		io.WriteString(engine, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n0\r\n\r\n")
	}()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetHost("engine")
	req.SetBodyString(`{"stream":true}`)
	var peeks atomic.Int32
	testHookHeadPeek = func() { peeks.Add(1) }
	t.Cleanup(func() { testHookHeadPeek = nil })
	done := make(chan error, 1)
	go func() { done <- u.roundTrip(c, fastUp{req}, resp, time.Now().Add(time.Minute), false, nil, nil) }()
	<-received
	// The round trip's goroutine parks in the poller, waiting for the head.
	waitParkedIn(t, "proxy.(*upstream).roundTrip")
	if c.br != nil {
		t.Fatalf("a request waiting for its answer holds a %d-byte reader", c.br.Size())
	}
	close(answer)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "text/event-stream" {
		t.Fatalf("head read as %d %q", resp.StatusCode(), resp.Header.ContentType())
	}
	// One peek found nothing; the poller's wake said the head had come,
	// and the head was read without a second.
	if n := peeks.Load(); n != 1 {
		t.Fatalf("%d peeks while waiting for the head, want 1", n)
	}
	body, err := io.ReadAll(resp.BodyStream())
	if err != nil || string(body) != "data:" {
		t.Fatalf("body %q, %v", body, err)
	}
	resp.CloseBodyStream()

	// An engine that never answers: the wait ends at the first-byte
	// deadline, with the error a read gives there.
	nc2, engine2 := tcpPair(t)
	c2 := &upConn{Conn: nc2}
	c2.src = newUpReader(c2)
	go io.Copy(io.Discard, engine2)
	resp.Reset()
	deadline := time.Now().Add(50 * time.Millisecond)
	err = u.roundTrip(c2, fastUp{req}, resp, deadline, false, nil, nil)
	if !errors.Is(err, fasthttp.ErrTimeout) && !isTimeout(err) {
		t.Fatalf("an engine that never answers: %v, want a timeout", err)
	}
	if time.Now().Before(deadline) {
		t.Fatal("the wait ended before the first-byte deadline")
	}
}

// waitParkedIn waits until a goroutine whose stack holds fn is parked in
// the network poller ("IO wait"), or fails the test after 10 s.
func waitParkedIn(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		n := runtime.Stack(buf, true)
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			if bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte(fn)) {
				return
			}
		}
	}
	t.Fatalf("no goroutine in %s parked in the poller", fn)
}
