package peek

import (
	"net"
	"syscall"
)

// RawConn returns c's socket for raw system calls (peeks, non-blocking
// reads and writes); nil when c has none (a pipe, a TLS wrapper).
func RawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
