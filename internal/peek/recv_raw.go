//go:build linux && (amd64 || arm64)

package peek

import (
	"syscall"
	"unsafe"
)

// recvPeek is recv(2) with MSG_PEEK|MSG_DONTWAIT, made without entering
// the scheduler's syscall state (RawSyscall6): it never waits, so there is
// no P to hand off, and a call that did enter it would wake sysmon out of
// its long sleep when every P was idle.
func recvPeek(fd uintptr, buf []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
