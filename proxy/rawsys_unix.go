//go:build unix && !linux

package proxy

import "syscall"

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// (on Linux they bypass the scheduler's syscall bookkeeping, see
// rawsys_linux.go).

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, err := syscall.Read(int(fd), p)
		if err == syscall.EINTR {
			continue
		}
		if e, ok := err.(syscall.Errno); ok {
			return 0, e
		}
		return max(n, 0), 0
	}
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, err := syscall.Write(int(fd), p)
		if err == syscall.EINTR {
			continue
		}
		if e, ok := err.(syscall.Errno); ok {
			return 0, e
		}
		return max(n, 0), 0
	}
}

// readable is a RawConn.Read callback that reads nothing: it returns true
// once a read of the socket would not block (see rawsys_linux.go).
func readable(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return err != syscall.EAGAIN
		}
	}
}
