//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// upstreamPair returns an upstream connection read through newUpReader and
// the engine's end of it.
func upstreamPair(t *testing.T) (up net.Conn, r io.Reader, engine net.Conn) {
	t.Helper()
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	up, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	engine = <-accepted
	if engine == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { up.Close(); engine.Close() })
	r = newUpReader(up)
	if _, ok := r.(*upReader); !ok {
		t.Skip("no raw socket on this platform")
	}
	return up, r, engine
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
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocations per upstream read", n)
	}
}
