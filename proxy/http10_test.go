package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// A client that asks in HTTP/1.0 cannot read a chunked body: a response
// of unknown length reaches it without Transfer-Encoding, ending where the
// connection closes, and metered as any other; one that fails ends with a
// reset, so the client cannot take a cut stream for a whole one. It used
// to get "Transfer-Encoding: chunked" and the chunks' framing.
func TestHTTP10ClientGetsNoChunks(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		switch {
		case strings.Contains(body, `"m-gzip"`): // decoded by the gateway: its length no longer holds
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			io.WriteString(zw, strings.Join(vllmEvents, "")+done)
			zw.Close()
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", buf.Len(), buf.Bytes())
			c.BW.Flush()
		case strings.Contains(body, `"m-json"`):
			js := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(js), js)
			c.BW.Flush()
		case strings.Contains(body, `"m-wait"`): // the rest once the test says so
			writeHeldStream(c, release)
		case strings.Contains(body, `"m-die"`): // the engine dies after the first event
			writeSSEHead(c)
			writeChunk(c, vllmEvents[0])
			c.Conn.Close()
		default:
			vllmUpstream(0)(c)
		}
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	// ask sends one HTTP/1.0 request for model and reads the answer to the
	// connection's end.
	// askWith is ask with midway called once the head is read.
	askWith := func(t *testing.T, model, extra string, midway func(net.Conn)) (*http.Response, string, error) {
		t.Helper()
		body := strings.Replace(chatBody, `"m"`, `"`+model+`"`, 1)
		if model == "m-json" {
			body = strings.Replace(body, `"stream":true`, `"stream":false`, 1)
		}
		conn := rawPost10(t, g.addr, body, extra)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST", ProtoMajor: 1, ProtoMinor: 0})
		if err != nil {
			t.Fatalf("reading the head: %v", err)
		}
		if midway != nil {
			midway(conn)
		}
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	ask := func(t *testing.T, model, extra string) (*http.Response, string, error) {
		t.Helper()
		return askWith(t, model, extra, nil)
	}
	noChunks := func(t *testing.T, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 || resp.ContentLength != -1 || !resp.Close {
			t.Fatalf("head: %d, transfer-encoding %v, length %d, close %v; want 200, none, none, close", resp.StatusCode, resp.TransferEncoding, resp.ContentLength, resp.Close)
		}
	}
	want := strings.Join(vllmEvents, "") + done
	t.Run("an event stream", func(t *testing.T) {
		for _, extra := range []string{"", "Connection: keep-alive\r\n"} { // keep-alive cannot hold without a length
			resp, body, err := ask(t, "m", extra)
			if err != nil || body != want {
				t.Fatalf("body %q, err %v; want the engine's events and a clean end", body, err)
			}
			noChunks(t, resp)
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.OSL != 2 || rec.ErrorMessage != "" {
				t.Fatalf("record %+v", rec)
			}
			// The engine is asked in HTTP/1.1, on a connection kept for
			// the next request: the client's HTTP/1.0 went upstream as
			// such, with "Connection: close".
			if h := up.lastHeaders(); !strings.HasPrefix(h, "POST /v1/chat/completions HTTP/1.1\r\n") || strings.Contains(strings.ToLower(h), "connection:") {
				t.Fatalf("the engine was asked %q", h)
			}
		}
	})
	t.Run("a client that sends more", func(t *testing.T) {
		// Bytes the client sends after its request (a pipelined request,
		// the CRLF old clients add after a body) are unread when the body
		// ends; a plain close would reset the connection, and the client
		// would take the complete body for a broken one.
		resp, body, err := askWith(t, "m-wait", "Connection: keep-alive\r\n", func(c net.Conn) {
			io.WriteString(c, "\r\nGET /v1/models HTTP/1.0\r\n\r\n")
			close(release)
		})
		if err != nil || body != want {
			t.Fatalf("body %q, err %v; want the engine's events and a clean end", body, err)
		}
		noChunks(t, resp)
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != 4 {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("a gzip body the gateway decodes", func(t *testing.T) {
		resp, body, err := ask(t, "m-gzip", "")
		if err != nil || body != want || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("body %q, encoding %q, err %v", body, resp.Header.Get("Content-Encoding"), err)
		}
		noChunks(t, resp)
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != 4 {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("an engine that dies mid-stream", func(t *testing.T) {
		if n := up.accepts.Load(); n != 1 {
			t.Fatalf("%d upstream connections for 4 requests, want 1", n)
		}
		resp, body, err := ask(t, "m-die", "")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("body %q, err %v; want the connection reset", body, err)
		}
		noChunks(t, resp)
		if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError {
			t.Fatalf("record %+v, want upstream_error", rec)
		}
	})
	t.Run("a body of known length keeps it", func(t *testing.T) {
		resp, body, err := ask(t, "m-json", "")
		if err != nil || resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) || !strings.Contains(body, `"Hello"`) {
			t.Fatalf("%d, length %d, body %q, err %v", resp.StatusCode, resp.ContentLength, body, err)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 1 {
			t.Fatalf("record %+v", rec)
		}
	})
	g.noMoreRecords(t)
}

// A failed close-delimited body ends with a reset, which drops what the
// socket still queues: the reset waits until the client has acknowledged
// every byte written, so it gets them all, then the error. Reset at once,
// the client lost up to the send queue's worth of the bytes.
func TestResetWhenSentKeepsWhatWasWritten(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the send queue is read with SIOCOUTQ, on Linux")
	}
	client, server := tcpPair(t)
	defer client.Close()
	const total = 4 << 20 // more than the send queue holds at once
	go func() {
		server.Write(make([]byte, total))
		resetWhenSent(server, time.Now().Add(time.Minute), nil)
		server.Close()
	}()
	client.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, client)
	if n != total || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client got %d of %d bytes, then %v; want all, then a reset", n, total, err)
	}
}

// fasthttp does not start a hijack on a connection closed before the
// handler returned (the drain's last resort closes every connection): the
// HTTP/1.0 stream handed to it still ends with its record, and holds
// nothing.
func TestHTTP10StreamOfAConnectionClosedFirst(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL()})
	testHookStreamStart = func() { g.ln.CloseAll() }
	defer func() { testHookStreamStart = nil }()
	rawPost10(t, g.addr, chatBody, "")
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("record %+v, want client_abort", rec)
	}
	g.p.Wait()
	if n := g.p.InFlight(); n != 0 {
		t.Fatalf("%d requests in flight", n)
	}
	g.p.up.mu.Lock()
	held := len(g.p.up.busy)
	g.p.up.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d upstream connections still held", held)
	}
}

// A panic in the goroutine that writes to the client (a lagging client's,
// and every HTTP/1.0 stream's) ends that stream, with its record, never
// the process. It was not recovered.
func TestWriterPanicIsContained(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g, logged := startLoggedGateway(t, Config{Upstream: up.URL()})
	testHookClientWrite = func() { panic("test: a bug in the writer") }
	defer func() { testHookClientWrite = nil }()
	conn := rawPost10(t, g.addr, chatBody, "")
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err == nil && strings.Contains(string(got), "[DONE]") {
		t.Fatalf("the client got a whole answer: %q", got)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "internal error while writing to the client") {
		t.Fatalf("record %+v", rec)
	}
	g.p.Wait()
	if log := logged(); !strings.Contains(log, "a bug in the writer") {
		t.Fatalf("log %q", log)
	}
}

// The wait before the reset ends when it cannot end well: the client reset
// the connection (the count of unacknowledged bytes then stays where it
// was: the wait held the connection, and its slot, for the idle timeout),
// or the shutdown cut the streams.
func TestResetWhenSentStopsWaiting(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the send queue is read with SIOCOUTQ, on Linux")
	}
	// pair returns a connection whose send queue is full of bytes its
	// peer, which reads nothing, has not acknowledged.
	pair := func(t *testing.T) (server, client *net.TCPConn) {
		client, server = tcpPair(t)
		t.Cleanup(func() { client.Close() })
		// Written until a write waits for room and the queue still holds
		// bytes: on a loaded machine the queue may have drained into the
		// peer's buffer by the time a timed-out write returns.
		for i := 0; ; i++ {
			server.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := server.Write(make([]byte, 16<<20)); !isTimeout(err) {
				t.Fatalf("the write ended with %v, want its deadline: the peer took it all", err)
			}
			if n, ok := unsentBytes(server); ok && n > 0 {
				break
			}
			if i == 50 {
				t.Fatal("the send queue never held unacknowledged bytes")
			}
		}
		return server, client
	}
	returns := func(t *testing.T, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("still waiting after 30 s, with a minute's deadline")
		}
	}
	t.Run("the client reset the connection", func(t *testing.T) {
		server, client := pair(t)
		client.SetLinger(0)
		client.Close()
		returns(t, func() { resetWhenSent(server, time.Now().Add(time.Minute), nil) })
	})
	t.Run("the shutdown's cut", func(t *testing.T) {
		server, _ := pair(t)
		cut := make(chan struct{})
		close(cut)
		returns(t, func() { resetWhenSent(server, time.Now().Add(time.Minute), cut) })
	})
}

// An HTTP/1.0 client that leaves mid-stream is recorded at once, and its
// connection goes at once too: nothing waits for acknowledgements from a
// client that is gone (Proxy.Wait covers the close; the idle timeout here
// is a minute).
func TestHTTP10ClientThatLeavesIsLetGo(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		<-release
		// Well-formed, so that the client's leaving is the fault (one that
		// leaves after a malformed event leaves the engine's).
		big := `data: {"pad":"` + strings.Repeat("x", 60000) + "\"}\n\n"
		for i := 0; i < 200; i++ {
			if writeChunk(c, big) != nil {
				return
			}
		}
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: time.Minute})
	// The client reads nothing more once the head is in: the gateway's
	// queue fills, and so does the socket's send queue.
	full := make(chan struct{})
	var once sync.Once
	testHookLagFull = func(*stream) { once.Do(func() { close(full) }) }
	defer func() { testHookLagFull = nil }()
	conn := rawPost10(t, g.addr, chatBody, "")
	conn.(*net.TCPConn).SetReadBuffer(4096)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST", ProtoMajor: 1, ProtoMinor: 0}); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-full
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close() // gone, with bytes unread and more unacknowledged
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("record %+v, want client_abort", rec)
	}
	waited := make(chan struct{})
	go func() { g.p.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection of a client that left is still held after 30 s")
	}
}

// A broken HTTP/1.0 body whose client is not reading: recorded at once,
// then its connection counts as closing, and Wait waits for it (an exit
// before the reset would end the body with an orderly close), until the
// shutdown's cut resets it.
func TestHTTP10BrokenBodyWaitsForTheCut(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		big := "data: " + strings.Repeat("x", 60000) + "\n\n"
		for writeChunk(c, big) == nil {
		}
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: time.Minute, TotalTimeout: 300 * time.Millisecond})
	closeStep := make(chan struct{})
	testHookCloseStep = func() { close(closeStep) }
	defer func() { testHookCloseStep = nil }()
	conn := rawPost10(t, g.addr, chatBody, "")
	// The client reads nothing until the cut.
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeTimeout {
		t.Fatalf("record %+v, want timeout", rec)
	}
	<-closeStep
	if n := g.p.Closing(); n != 1 {
		t.Fatalf("closing %d, want 1", n)
	}
	// Wait must not return before the close step ends, which only the cut
	// below ends: what Closing says when it returns tells. The cut waits
	// until the goroutine runs, so a Wait that does not block returns
	// before the cut.
	var closingAtReturn int64
	waiting, waited := make(chan struct{}), make(chan struct{})
	go func() {
		close(waiting)
		g.p.Wait()
		closingAtReturn = g.p.Closing()
		close(waited)
	}()
	<-waiting
	select {
	case <-waited:
		t.Fatal("Wait returned while the connection still waits to be reset")
	default:
	}
	g.p.Cut()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still waiting 10 s after the cut")
	}
	if closingAtReturn != 0 {
		t.Fatalf("Wait returned with %d connections still closing", closingAtReturn)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read to %v, want a reset", err)
	}
}

// An HTTP/1.0 client's head goes out with the first bytes (http10.go): one
// that leaves before them was sent no status, and its record says 499.
func TestHTTP10ClientGoneBeforeItsHead(t *testing.T) {
	headed, hungUp := make(chan struct{}), make(chan time.Time, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		close(headed)
		hungUp <- hungUpWithin(c, 10*time.Second)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost10(t, g.addr, chatBody, "")
	<-headed
	conn.Close()
	if (<-hungUp).IsZero() {
		t.Fatal("the engine's connection was not closed after the client left")
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed {
		t.Fatalf("record %+v", rec)
	}
}
