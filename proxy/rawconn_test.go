//go:build unix

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/valyala/fasthttp"
)

// rawConnIO reads and writes as net.Conn does: what is there, all of a
// write (waiting while the socket is full), io.EOF at the end, the
// connection's deadlines, and errors that read as net.Conn's.
func TestRawConnIO(t *testing.T) {
	a, b := tcpPair(t)
	var x rawConnIO
	if !x.init(a) {
		t.Fatal("no raw I/O on a TCP connection")
	}

	// A write larger than the socket buffers: it completes as the peer
	// reads.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(big))
		_, err := io.ReadFull(b, buf)
		if err != nil {
			buf = nil
		}
		got <- buf
	}()
	if n, err := x.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if !bytes.Equal(<-got, big) {
		t.Fatal("the peer did not read what was written")
	}

	// A read returns what is there.
	b.Write([]byte("hello"))
	p := make([]byte, 64)
	if n, err := x.Read(p); string(p[:n]) != "hello" || err != nil {
		t.Fatalf("Read: %q, %v", p[:n], err)
	}
	if n, err := x.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty Read: %d, %v", n, err)
	}

	// The read deadline: a timeout error, as net.Conn's.
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := x.Read(p)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v", err)
	}
	if oe := (*net.OpError)(nil); !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("Read past the deadline: %#v, want a *net.OpError \"read\"", err)
	}
	a.SetReadDeadline(time.Time{})

	// The write deadline, on a socket that takes nothing more (small
	// buffers, a peer that does not read).
	c, d := tcpPair(t)
	c.SetWriteBuffer(8 << 10)
	d.SetReadBuffer(8 << 10)
	var y rawConnIO
	y.init(c)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = y.Write(big)
	if oe := (*net.OpError)(nil); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("Write past the deadline: %v", err)
	}

	// The end: io.EOF once the peer closed.
	b.Close()
	for {
		_, err = x.Read(p)
		if err != nil {
			break
		}
	}
	if err != io.EOF {
		t.Fatalf("Read after the peer closed: %v", err)
	}
}

// A connection the listener was handed wrapped (a TLS connection, a
// counting wrapper) is read and written through the wrapper, even when
// it exposes its socket.
func TestRawConnIOOnlyForTCP(t *testing.T) {
	a, _ := tcpPair(t)
	var x rawConnIO
	if x.init(&countingConn{Conn: a, log: &writeLog{}}) {
		t.Fatal("raw I/O under a wrapper: its Read and Write would be bypassed")
	}
}

// The connections a Listener accepts take the raw path in a normal build
// (and net.Conn's under the race detector, see useRawConnIO), and read and
// write through it.
func TestListenerConnsUseRawConnIO(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, 0, nil)
	defer l.Close()
	client, c := dialAccepted(t, l)
	if lc, ok := c.(*listenerConn); !ok || lc.raw != useRawConnIO {
		t.Fatalf("accepted %T, raw path %v; want %v", c, ok && lc.raw, useRawConnIO)
	}
	client.Write([]byte("ping"))
	p := make([]byte, 8)
	if n, err := c.Read(p); string(p[:n]) != "ping" || err != nil {
		t.Fatalf("Read: %q, %v", p[:n], err)
	}
	if !clientSent(c) {
		t.Fatal("the read did not mark the client as having sent")
	}
	c.Write([]byte("pong"))
	if n, err := io.ReadFull(client, p[:4]); string(p[:n]) != "pong" || err != nil {
		t.Fatalf("client read: %q, %v", p[:n], err)
	}
}

// fasthttp reads a keep-alive connection's next request with a one-byte
// read, then a read into its buffer. The one-byte read reads all the
// socket has: the byte is returned, and the next read returns the rest
// without reading the socket (bytes the client sent after the first read
// come only with the read after it), and gives its buffer back.
func TestReadAhead(t *testing.T) {
	l, client, lc := rawListenerConn(t)
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	io.WriteString(client, head)
	var one [1]byte
	if n, err := lc.Read(one[:]); n != 1 || err != nil || one[0] != 'P' {
		t.Fatalf("one-byte read: %d %q %v", n, one[:n], err)
	}
	io.WriteString(client, "GET / HTTP/1.1\r\n") // on loopback in the socket before Write returns
	buf := make([]byte, 16<<10-1)
	if n, err := lc.Read(buf); string(buf[:n]) != head[1:] || err != nil {
		t.Fatalf("the read after it: %q %v, want %q", buf[:n], err, head[1:])
	}
	if lc.aheadBuf != nil || lc.ahead != nil {
		t.Fatal("the buffer read ahead is still held")
	}
	if n, err := lc.Read(buf); string(buf[:n]) != "GET / HTTP/1.1\r\n" || err != nil {
		t.Fatalf("the next read: %q %v", buf[:n], err)
	}
	// A one-byte read on the admin listener reads one byte.
	lc.l = NewAdminListener(l.Listener, 0, nil)
	io.WriteString(client, "ab")
	if n, err := lc.Read(one[:]); n != 1 || err != nil || lc.ahead != nil {
		t.Fatalf("admin one-byte read: %d %v, %q read ahead", n, err, lc.ahead)
	}
}

// The wait for a one-byte read's byte holds no buffer: a read of a socket
// with nothing in it gives its buffer back and waits.
func TestReadAheadWaitHoldsNoBuffer(t *testing.T) {
	if !useRawConnIO {
		t.Skip("connections are read through net.Conn here (the race detector's build)")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if err := syscall.SetNonblock(fds[1], true); err != nil {
		t.Fatal(err)
	}
	var x rawConnIO
	if x.readAheadFD(uintptr(fds[1])) || x.ab != nil {
		t.Fatalf("an empty socket's read: buffer %v kept", x.ab != nil)
	}
	syscall.Write(fds[0], []byte("xyz"))
	if !x.readAheadFD(uintptr(fds[1])) || x.ab == nil || x.rn != 3 || string((*x.ab)[:3]) != "xyz" {
		t.Fatalf("read %d", x.rn)
	}
}

// Only the read of a request's first byte reads ahead: a one-byte read
// inside a request (bufio's, for the last byte of its buffer) reads one
// byte, and leaves what follows (a pipelined request) in the socket. What
// is read ahead fits in the read that follows it: the buffer is no larger
// than Proxy.Server's read buffer.
func TestReadAheadOnlyForARequestsFirstByte(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if bp := aheadBufs.Get().(*[]byte); len(*bp) > p.Server().ReadBufferSize {
		t.Fatalf("read-ahead buffer %d bytes, the server's read buffer %d", len(*bp), p.Server().ReadBufferSize)
	}
	_, client, lc := rawListenerConn(t)
	var one [1]byte
	for _, c := range []struct {
		state fasthttp.ConnState
		ahead bool
	}{{fasthttp.StateActive, false}, {fasthttp.StateIdle, true}} {
		connState(lc, c.state)
		io.WriteString(client, "xyz")
		if n, err := lc.Read(one[:]); n != 1 || err != nil || (lc.ahead != nil) != c.ahead {
			t.Fatalf("after %v: %d %v, read ahead %q", c.state, n, err, lc.ahead)
		}
		buf := make([]byte, 16)
		if n, err := lc.Read(buf); string(buf[:n]) != "yz" || err != nil {
			t.Fatalf("after %v: %q %v", c.state, buf[:n], err)
		}
	}
}

// A connection whose next request was read ahead is no longer idle: the
// cap's reclaim, which peeks at the socket for a next request, leaves it
// (it would have closed it, and counted it, with the request read).
func TestReadAheadIsNotIdle(t *testing.T) {
	l, client, lc := rawListenerConn(t)
	l.minIdle = 0
	connState(lc, fasthttp.StateIdle)
	io.WriteString(client, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	var one [1]byte
	if n, err := lc.Read(one[:]); n != 1 || err != nil || lc.ahead == nil {
		t.Fatalf("%d %v, read ahead %q", n, err, lc.ahead)
	}
	if l.reclaimIdle() || l.Reclaimed() != 0 {
		t.Fatal("reclaimed a connection whose next request was read")
	}
}

// rawListenerConn returns a Listener, a client connected to it and the
// connection it accepted, which reads its socket directly (rawConnIO); all
// are closed when the test ends. It skips the test where connections are
// read through net.Conn.
func rawListenerConn(t *testing.T) (*Listener, net.Conn, *listenerConn) {
	t.Helper()
	if !useRawConnIO {
		t.Skip("connections are read through net.Conn here (the race detector's build)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, 0, nil)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	lc := sc.(*listenerConn)
	if !lc.raw {
		t.Skip("not a raw connection")
	}
	return l, client, lc
}

// A stream's first write (the response head and first event) is bounded by
// its write deadline only once it finds the client's socket full: a write
// the socket takes sets no deadline, one that would wait sets it before it
// waits, and fails at it; unbinding clears it.
func TestBoundWriteSetsTheDeadlineOnlyWhenItWaits(t *testing.T) {
	client, lc, s := boundWriteConn(t)
	set := 0
	testHookBoundBlocked = func() { set++ }
	t.Cleanup(func() { testHookBoundBlocked = nil })

	if !s.boundWrites() {
		t.Fatal("a Listener's raw connection does not bind")
	}
	small := []byte("HTTP/1.1 200 OK\r\n\r\n")
	if n, err := lc.Write(small); n != len(small) || err != nil {
		t.Fatalf("small write: %d, %v", n, err)
	}
	if set != 0 {
		t.Fatal("a write the socket took set the deadline")
	}
	got := make([]byte, len(small))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("client read %q, %v", got, err)
	}

	// The client reads nothing more: the socket fills, the write waits
	// under the deadline set as it began to, and fails at it.
	big := make([]byte, 64<<20)
	n, err := lc.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n == len(big) {
		t.Fatalf("write to a full socket: %d of %d, %v; want part of it and the deadline", n, len(big), err)
	}
	if set != 1 {
		t.Fatalf("the deadline was set %d times, want once", set)
	}
	s.unboundWrites(true)
	assertUnbound(t, lc, "unbinding")

	// Cleared: with the client reading again, the rest goes out (a
	// deadline left set would fail it at once).
	go io.Copy(io.Discard, client)
	if m, err := lc.Write(big[n:]); m != len(big)-n || err != nil {
		t.Fatalf("write after unbinding: %d of %d, %v", m, len(big)-n, err)
	}
	if set != 1 {
		t.Fatal("an unbound write set the deadline")
	}
}

// writeFirst (the response head in fasthttp's writer, and the first event)
// and flushBound (the head alone) unbind their connection however the
// write ends: at the deadline, which reads as a timeout for writeFailed,
// and in a panic.
func TestWriteFirstUnbindsItsConnection(t *testing.T) {
	_, lc, s := boundWriteConn(t)

	s.w = bufio.NewWriterSize(lc, 4096) // as fasthttp's, over the connection
	if _, err := s.writeFirst(make([]byte, 64<<20)); !isTimeout(err) {
		t.Fatalf("a first write to a client that reads nothing: %v, want a timeout", err)
	}
	assertUnbound(t, lc, "the first write")

	// So too flushBound, for a head that goes out alone.
	_, lc2, s2 := boundWriteConn(t)
	bw := bufio.NewWriterSize(lc2, 64<<20)
	bw.Write(make([]byte, 64<<20-1))
	if err := s2.flushBound(bw); !isTimeout(err) {
		t.Fatalf("a head's flush to a client that reads nothing: %v, want a timeout", err)
	}
	assertUnbound(t, lc2, "the flush")

	s.w = panicWriter{}
	func() {
		defer func() { _ = recover() }()
		s.writeFirst([]byte("x"))
	}()
	assertUnbound(t, lc, "a write that panicked")
}

// boundWriteConn returns a Listener's raw connection, its client, and a
// stream writing to it with an idle timeout of 200 ms. A write left
// waiting without a deadline fails its test when the connection is closed
// after 10 s, instead of hanging it.
func boundWriteConn(t *testing.T) (net.Conn, *listenerConn, *stream) {
	t.Helper()
	_, client, lc := rawListenerConn(t)
	safety := time.AfterFunc(10*time.Second, func() { lc.Conn.Close() })
	t.Cleanup(func() { safety.Stop() })
	return client, lc, &stream{streamReq: streamReq{p: &Proxy{cfg: Config{IdleTimeout: 200 * time.Millisecond}}, client: lc}}
}

// assertUnbound fails t when lc still binds its writes (or holds their
// deadline as set) after what ended.
func assertUnbound(t *testing.T, lc *listenerConn, after string) {
	t.Helper()
	if lc.bound != nil || lc.boundSet {
		t.Fatalf("after %s, the connection still binds its writes", after)
	}
}

type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("write") }

// A Listener's connection gives the RawConn it reads through, the same at
// every call and without allocating: a stream asks for it at each response
// (its direct writes), and net's SyscallConn makes a new one each time.
func TestListenerConnRawConnIsKept(t *testing.T) {
	_, _, lc := rawListenerConn(t)
	rc, err := lc.SyscallConn()
	if err != nil || rc == nil || rc != lc.io.rawConn() {
		t.Fatalf("SyscallConn: %v, %v", rc, err)
	}
	if n := testenv.AllocsPerRun(100, func() { _ = rawConnOf(lc) }); n != 0 {
		t.Fatalf("%v allocations per RawConn", n)
	}
	// It is the connection's socket.
	var fd uintptr
	if err := rc.Control(func(f uintptr) { fd = f }); err != nil || fd == 0 {
		t.Fatalf("Control: fd %d, %v", fd, err)
	}
}
