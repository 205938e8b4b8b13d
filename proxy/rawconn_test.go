//go:build unix

package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
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
