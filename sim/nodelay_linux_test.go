package sim

import (
	"net"
	"syscall"
	"testing"
)

// offListener turns TCP_NODELAY off on accepted connections, so that the
// test sees the simulator turn it back on.
type offListener struct {
	net.Listener
	conns chan *net.TCPConn
}

func (l offListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc := c.(*net.TCPConn)
	if err := tc.SetNoDelay(false); err != nil {
		return nil, err
	}
	l.conns <- tc
	return tc, nil
}

func TestTCPNoDelay(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := offListener{Listener: inner, conns: make(chan *net.TCPConn, 4)}
	h := startOn(t, Config{}, ln)
	if status, body, _ := h.post("/v1/chat/completions", `{`+chatMsgs+`,"max_tokens":2,"stream":true}`); status != 200 {
		t.Fatal(status, body)
	}
	tc := <-ln.conns
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if v == 0 {
		t.Error("TCP_NODELAY is off on the server's connection")
	}
}
