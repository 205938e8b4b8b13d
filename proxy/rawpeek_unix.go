//go:build unix

package proxy

import "syscall"

// sysPeekEnd looks, without taking a byte, at what a non-blocking socket
// has to read: eof when the peer's FIN is next (no byte before it), or the
// error a read would return (EAGAIN when there is nothing yet).
func sysPeekEnd(fd uintptr) (eof bool, errno syscall.Errno) {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		if err == syscall.EINTR {
			continue
		}
		if e, ok := err.(syscall.Errno); ok {
			return false, e
		}
		return err == nil && n == 0, 0
	}
}
