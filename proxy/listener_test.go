package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// logLines collects what a Listener logs, and signals each line.
type logLines struct {
	mu    sync.Mutex
	lines []string
	said  chan string
}

func newLogLines() *logLines { return &logLines{said: make(chan string, 64)} }

func (l *logLines) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	l.said <- s
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// failingListener fails its first n Accepts with err, then accepts from ln.
type failingListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (f *failingListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, f.err
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func emfile() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// Running out of file descriptors does not end the server (issue 8.2):
// Accept waits it out with a backoff and logs it once when it starts and
// once when it ends.
func TestListenerWaitsOutEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogLines()
	l := NewListener(&failingListener{Listener: ln, n: 6, err: emfile()}, 0, logs.logf)
	defer l.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept returned %v; want the error waited out", err)
	}
	c.Close()
	if l.AcceptRetries() != 6 {
		t.Fatalf("AcceptRetries() = %d, want 6", l.AcceptRetries())
	}
	got := logs.get()
	if len(got) != 2 || !strings.Contains(got[0], "too many open files") || !strings.Contains(got[1], "accepting connections again") {
		t.Fatalf("log %q: want one line when it starts, one when it ends", got)
	}
	// An error that does not pass is returned.
	l2 := NewListener(&failingListener{Listener: ln, n: 1, err: errors.New("boom")}, 0, nil)
	if _, err := l2.Accept(); err == nil || err.Error() != "boom" {
		t.Fatalf("Accept() = %v, want boom", err)
	}
}

// At max connections Accept waits until one closes; Close ends the wait.
func TestListenerCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogLines()
	l := NewListener(ln, 2, logs.logf)
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String()) // the kernel's backlog takes it
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var server []net.Conn
	for i := 0; i < 2; i++ {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		server = append(server, c)
	}
	if l.Open() != 2 {
		t.Fatalf("Open() = %d", l.Open())
	}
	third := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		third <- c
	}()
	if s := <-logs.said; !strings.Contains(s, "max_connections (2) reached") {
		t.Fatalf("logged %q", s)
	}
	select {
	case <-third:
		t.Fatal("accepted a third connection at max_connections 2")
	default:
	}
	server[0].Close()
	server[0].Close() // a second Close gives back nothing more
	c := <-third
	if c == nil {
		t.Fatal("the third connection was not accepted once one closed")
	}
	if l.Open() != 2 {
		t.Fatalf("Open() = %d", l.Open())
	}
	// The conns keep their descriptor for the client-gone peek.
	if _, ok := c.(syscall.Conn); !ok {
		t.Fatal("an accepted connection does not expose its descriptor")
	}
	// CutReads ends a read in progress; CloseAll closes them all.
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	l.CutReads()
	if err := <-readErr; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after CutReads: %v", err)
	}
	l.CloseAll()
	if l.Open() != 0 {
		t.Fatalf("Open() = %d after CloseAll", l.Open())
	}
	// At the cap, Close ends a waiting Accept.
	l2 := NewListener(ln, 1, nil)
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	clients = append(clients, c2)
	if _, err := l2.Accept(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := l2.Accept()
		waiting <- err
	}()
	l2.Close()
	if err := <-waiting; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
