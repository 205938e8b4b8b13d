//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package peek

import (
	"net"
	"testing"
	"time"
)

func pair(t testing.TB) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// A read deadline in the past (set for reading a request, issue 8.3) does
// not make a live peer look gone; a peer that closes does, deadline or not.
func TestPollerIgnoresReadDeadline(t *testing.T) {
	server, client := pair(t)
	gone := Poller(server)
	if gone == nil {
		t.Fatal("no poller for a TCP connection")
	}
	if gone() {
		t.Fatal("a live peer looks gone")
	}
	server.SetReadDeadline(time.Unix(1, 0))
	if gone() {
		t.Fatal("a live peer looks gone once the read deadline has passed")
	}
	// Pipelined bytes are not consumed.
	client.Write([]byte("x"))
	for i := 0; i < 3; i++ {
		if gone() {
			t.Fatal("a peer that sent a byte looks gone")
		}
	}
	server.SetReadDeadline(time.Time{})
	b := make([]byte, 1)
	if n, err := server.Read(b); n != 1 || b[0] != 'x' {
		t.Fatalf("the peeked byte was consumed: %d %v", n, err)
	}
	server.SetReadDeadline(time.Unix(1, 0))
	client.Close()
	// The FIN may take a moment on loopback: poll on the peek itself.
	deadline := time.Now().Add(5 * time.Second)
	for !gone() {
		if time.Now().After(deadline) {
			t.Fatal("a peer that closed does not look gone")
		}
		time.Sleep(time.Millisecond)
	}
	server.Close()
	if !gone() {
		t.Fatal("a closed connection does not look gone")
	}
}

// Gone tells what Poller's function tells, on a RawConn: a live peer, one
// whose byte waits unread, is not gone; one that closed, or reset, is.
func TestGone(t *testing.T) {
	server, client := pair(t)
	if Gone(RawConn(server)) {
		t.Fatal("a live peer looks gone")
	}
	client.Write([]byte("x"))
	if Gone(RawConn(server)) {
		t.Fatal("a peer that sent a byte looks gone")
	}
	for _, reset := range []bool{false, true} {
		server, client := pair(t)
		if reset {
			client.(*net.TCPConn).SetLinger(0)
		}
		client.Close()
		rc := RawConn(server)
		for deadline := time.Now().Add(5 * time.Second); !Gone(rc); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("reset %v: a peer that left does not look gone", reset)
			}
		}
	}
}
