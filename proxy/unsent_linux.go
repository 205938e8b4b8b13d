package proxy

import (
	"net"
	"syscall"
	"unsafe"
)

// unsentBytes returns how many bytes written to c its peer has not yet
// acknowledged (SIOCOUTQ, the same request number as TIOCOUTQ).
func unsentBytes(c *net.TCPConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int32
	var e syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || e != 0 {
		return 0, false
	}
	return int(n), true
}
