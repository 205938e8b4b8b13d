package proxy

import (
	"net"
	"syscall"
	"unsafe"
)

// unsentBytes returns how many bytes written to c its peer has not yet
// acknowledged (SIOCOUTQ, the same request number as TIOCOUTQ). It reports
// false when that cannot be known, or will not change: the connection is
// no longer open both ways or half-closed by the peer (a client that reset
// it leaves the count where it was for good).
func unsentBytes(c *net.TCPConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int32
	var state uint8 // tcp_info's first byte, tcpi_state
	ok := false
	if err := rc.Control(func(fd uintptr) {
		l := uint32(1)
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO, uintptr(unsafe.Pointer(&state)), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 || (state != tcpEstablished && state != tcpCloseWait) {
			return
		}
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
		ok = e == 0
	}); err != nil {
		return 0, false
	}
	return int(n), ok
}

// The kernel's TCP states (include/net/tcp_states.h) the wait goes on in.
const (
	tcpEstablished = 1
	tcpCloseWait   = 8
)
