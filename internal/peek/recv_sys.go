//go:build (linux && !amd64 && !arm64) || darwin || freebsd || netbsd || openbsd || dragonfly

package peek

import "syscall"

// recvPeek is recv(2) with MSG_PEEK|MSG_DONTWAIT.
func recvPeek(fd uintptr, buf []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
