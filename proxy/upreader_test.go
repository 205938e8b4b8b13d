//go:build unix

package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := dialAccepted(t, ln)
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// dialAccepted dials ln and returns both ends: the dialled one and the one
// ln accepted (closed when the test ends).
func dialAccepted(t *testing.T, ln net.Listener) (client, server net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		c.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// upstreamPair returns an upstream connection read through newUpReader and
// the engine's end of it.
func upstreamPair(t *testing.T) (up *upConn, r io.Reader, engine net.Conn) {
	t.Helper()
	nc, ec := tcpPair(t)
	up = &upConn{Conn: nc}
	r = newUpReader(up)
	if _, ok := r.(*upReader); !ok || !up.lateDeadlines {
		t.Skip("no raw socket on this platform")
	}
	return up, r, ec
}

// The upstream reader reads as net.Conn does: it waits for bytes, returns
// what is there, honours the read deadline with a timeout error that reads
// as net.Conn's, and ends with io.EOF.
func TestUpReaderReadsAsNetConn(t *testing.T) {
	up, r, engine := upstreamPair(t)
	buf := make([]byte, 64)

	// Nothing there yet: the read waits for the engine (EAGAIN, then the
	// poller), and returns what one write sent.
	go engine.Write([]byte("data: 1\n\n"))
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	// A deadline in the past: a timeout, as net.Conn reports it.
	_ = up.SetReadDeadline(aLongTimeAgo)
	n, err = r.Read(buf)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !isTimeout(err) {
		t.Fatalf("read with an expired deadline: %d, %v; want a timeout", n, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" || !strings.HasPrefix(err.Error(), "read tcp ") {
		t.Fatalf("timeout error %q does not read as net.Conn's", err)
	}
	_ = up.SetReadDeadline(time.Time{})

	// The engine closes: io.EOF, unwrapped.
	engine.Write([]byte("tail"))
	engine.Close()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "tail" {
		t.Fatalf("read to the end %q, %v", got, err)
	}
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the end: %d, %v; want io.EOF", n, err)
	}

	// A closed connection: net.ErrClosed, which the pool takes for stale.
	up.Close()
	if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) || !isStaleConn(err) {
		t.Fatalf("read on a closed connection: %v", err)
	}
}

// A reset connection reads as net.Conn's read error.
func TestUpReaderReset(t *testing.T) {
	_, r, engine := upstreamPair(t)
	_ = engine.(*net.TCPConn).SetLinger(0)
	engine.Close() // RST
	buf := make([]byte, 16)
	var err error
	for err == nil {
		_, err = r.Read(buf)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" || !isStaleConn(err) || err == io.EOF {
		t.Fatalf("read after a reset: %v", err)
	}
}

// A read of the upstream allocates nothing.
func TestUpReaderAllocatesNothing(t *testing.T) {
	_, r, engine := upstreamPair(t)
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
	buf := make([]byte, 2048)
	step := func() {
		if _, err := engine.Write(event); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(event); {
			n, err := r.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	step()
	if n := testenv.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocations per upstream read", n)
	}
}

// A read whose deadline was set early goes on when onDeadline moves it
// (and reports true), and fails with the timeout when it reports false.
func TestUpReaderLateDeadline(t *testing.T) {
	up, r, engine := upstreamPair(t)
	buf := make([]byte, 64)
	asked := 0
	up.onDeadline = func() bool {
		asked++
		if asked == 1 {
			// The first expiry was early: the engine's bytes come before
			// the real deadline, which is set here.
			_ = up.SetReadDeadline(time.Now().Add(time.Minute))
			go engine.Write([]byte("data: late\n\n"))
			return true
		}
		return false
	}
	_ = up.SetReadDeadline(aLongTimeAgo) // an earlier read's deadline
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "data: late\n\n" || asked != 1 {
		t.Fatalf("read %q, %v after %d asks; want the engine's event after 1", buf[:n], err, asked)
	}
	_ = up.SetReadDeadline(aLongTimeAgo)
	n, err = r.Read(buf)
	if n != 0 || !isTimeout(err) || asked != 2 {
		t.Fatalf("read %d, %v after %d asks; want a timeout after 2", n, err, asked)
	}
}

// The stream moves an early read deadline to the read's real one (idle
// from when the read began, never past the total deadline), and not when
// the real one has passed, the gateway is cut, or the client left.
func TestStreamLateDeadline(t *testing.T) {
	up, _, _ := upstreamPair(t)
	p, err := New(Config{Upstream: "http://127.0.0.1:1", IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := acquireStream()
	defer releaseStream(s)
	s.p, s.conn = p, up
	now := time.Now()

	s.readyAt = now
	if !s.lateDeadline() || !s.armed.Equal(now.Add(time.Minute)) {
		t.Fatalf("read begun now: deadline %v, want idle from now", s.armed)
	}
	s.deadline = now.Add(time.Second)
	if !s.lateDeadline() || !s.armed.Equal(s.deadline) {
		t.Fatalf("deadline %v, want the total deadline %v", s.armed, s.deadline)
	}
	s.deadline = time.Time{}
	s.armed = time.Time{}
	s.readyAt = now.Add(-time.Minute - time.Millisecond)
	if s.lateDeadline() || !s.armed.IsZero() {
		t.Fatal("a read idle past its timeout went on")
	}
	s.readyAt = now
	s.awaitToken, s.firstToken = true, now.Add(-time.Millisecond)
	if s.lateDeadline() {
		t.Fatal("a read past the first-token deadline went on")
	}
	s.awaitToken = false
	s.guard = &clientGuard{}
	s.guard.left.Store(true)
	if s.lateDeadline() {
		t.Fatal("the read went on after the client left")
	}
	s.guard = nil
	p.up.cut.Store(true)
	if s.lateDeadline() {
		t.Fatal("the read went on after the cut")
	}
}

// readAll leaves an earlier read's idle deadline in place and, when it
// expires during a later read, moves it on: the read goes on and the
// stream reads to its end, with no timeout.
func TestReadAllMovesEarlyDeadline(t *testing.T) {
	up, r, engine := upstreamPair(t)
	s := rawStream(t, up, r)
	// An earlier read's deadline, already expired: not before the next
	// read's own, so readAll does not set it again.
	s.armed = time.Now().Add(-time.Millisecond)
	_ = up.SetReadDeadline(s.armed)
	go func() {
		engine.Write([]byte("data: 1\n\n"))
		engine.Close()
	}()
	if err := s.readAll(); err != io.EOF {
		t.Fatalf("readAll: %v, want io.EOF", err)
	}
	if string(s.pending) != "data: 1\n\n" || up.onDeadline != nil {
		t.Fatalf("read %q; onDeadline left set: %v", s.pending, up.onDeadline != nil)
	}
	if !s.armed.After(time.Now()) {
		t.Fatalf("deadline %v not moved on", s.armed)
	}
}

// fasthttp's other way to take a body stream is Read, which starts the
// reader on a goroutine of its own; a WriteTo after it writes what that
// reader queues. The writer then must leave the client guard alone when it
// writes the first token: the reader still reads it at every read. Under
// the race detector this failed when the writer dropped the stopped guard.
func TestReadThenWriteTo(t *testing.T) {
	up, r, engine := upstreamPair(t)
	client, _, _ := upstreamPair(t) // the client's connection, for the guard
	s := rawStream(t, up, r)
	s.markNext = true // the first body bytes are the first token
	if s.guard = startGuard(client.Conn); s.guard == nil {
		t.Skip("no peekable client connection on this platform")
	}
	s.guard.arm()
	engine.Write([]byte("data: 1\n\n"))
	// The second event comes after the first was written: the reader
	// reads (and checks the guard) again after the writer wrote the token.
	got := readThenWriteTo(t, s, func() {
		engine.Write([]byte("data: 2\n\n"))
		engine.Close()
	})
	if got != "data: 1\n\ndata: 2\n\n" {
		t.Fatalf("wrote %q", got)
	}
}

// readThenWriteTo reads s with Read, which starts its reader and returns
// (with nothing copied into an empty buffer) once the engine's first bytes
// are queued, then writes it with WriteTo; once the first bytes are
// written, then runs (the engine's next bytes and its close). It returns
// what WriteTo wrote, once the reader has ended.
func readThenWriteTo(t *testing.T, s *stream, then func()) string {
	t.Helper()
	if n, err := s.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	out := &firstWriteSignal{first: make(chan struct{})}
	wrote := make(chan error, 1)
	go func() {
		_, err := s.WriteTo(out)
		wrote <- err
	}()
	<-out.first
	then()
	if err := <-wrote; err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	s.readerDone.Wait()
	return out.String()
}

// TestReadThenWriteToEventStream is TestReadThenWriteTo with a metered
// event stream: the writer sets headSent as it writes, while the reader
// (not lagging: no writer goroutine of its own) reads on, so the reader
// must not look at headSent. Under the race detector this failed when
// each read of an event stream asked whether the head had gone out.
func TestReadThenWriteToEventStream(t *testing.T) {
	up, r, engine := upstreamPair(t)
	s := rawStream(t, up, r)
	rec := new(meter.Record)
	rec.Reset()
	rec.Start, rec.Route, rec.Model = time.Now(), "chat", "m"
	s.rec, s.api, s.mode, s.metering = rec, meter.APIChat, modeSSE, true
	s.meter.Start(rec.Start)
	engine.Write([]byte(vllmEvents[0]))
	got := readThenWriteTo(t, s, func() {
		// Not a barrier (the test passes without it): it lets the writer
		// set headSent before the reader's next read, the order in which
		// the race detector saw the race every time (2 runs in 3 without).
		time.Sleep(10 * time.Millisecond)
		engine.Write([]byte(vllmEvents[1]))
		engine.Close()
	})
	if got != vllmEvents[0]+vllmEvents[1] {
		t.Fatalf("wrote %q", got)
	}
}

// firstWriteSignal keeps what is written to it and closes first at the
// first write.
type firstWriteSignal struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *firstWriteSignal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		defer close(w.first)
	}
	return w.buf.Write(p)
}

func (w *firstWriteSignal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// rawStream is a started stream (no goroutine yet) of a proxy with a
// minute's idle timeout, passing the body read through r from up as it
// comes (not parsed); it goes back to the pool when the test ends.
func rawStream(t *testing.T, up *upConn, r io.Reader) *stream {
	t.Helper()
	p, err := New(Config{Upstream: "http://127.0.0.1:1", IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := acquireStream()
	t.Cleanup(func() { releaseStream(s) })
	s.start()
	s.p, s.conn, s.mode, s.body = p, up, modeRaw, r
	return s
}
