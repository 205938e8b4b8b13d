package proxy

import (
	"errors"
	"net"
	"syscall"
)

// clientGone reports whether the client has closed (or reset) its
// connection, by peeking at the socket without blocking: end-of-file or a
// reset means gone. fasthttp has read the whole request by then, so a
// client that is still there has sent nothing more, or the start of its
// next pipelined request; neither is consumed. nginx tests a waiting client
// the same way (recv with MSG_PEEK). A connection that is not a socket is
// never reported gone.
func clientGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default: // ECONNRESET and the like
			gone = true
		}
		return true // never wait for readability
	})
	return gone
}
