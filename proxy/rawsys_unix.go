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
