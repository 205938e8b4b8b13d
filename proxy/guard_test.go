//go:build unix

package proxy

import (
	"net"
	"testing"
)

// The guard makes its peek at its first check. A connection that claims a
// socket and then refuses it (NewListener's wrapper over a connection that
// is not one) leaves the guard nothing to watch: its check says so, and
// the timer is not armed again. A TCP connection's peek works, and sees a
// client that closed.
func TestGuardPeeksAtItsFirstCheck(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	g := startGuard(&listenerConn{Conn: a})
	if g == nil {
		t.Fatal("no guard for a connection that claims a socket")
	}
	if _, ok := g.peekGone(); ok {
		t.Fatal("a pipe was peeked at")
	}
	if g.gone != nil {
		t.Fatal("a peek was kept for a pipe")
	}

	client, server := tcpPair(t)
	g = startGuard(server)
	if g == nil || g.gone != nil {
		t.Fatalf("guard %+v: want one, its peek not made yet", g)
	}
	if gone, ok := g.peekGone(); !ok || gone {
		t.Fatalf("a live client: gone %v, ok %v", gone, ok)
	}
	client.Close()
	for {
		gone, ok := g.peekGone()
		if !ok {
			t.Fatal("the peek failed")
		}
		if gone {
			break // the FIN arrived; loopback delivers it at once or soon after
		}
	}
}
