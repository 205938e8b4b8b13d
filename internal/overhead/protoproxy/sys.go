//go:build linux

package main

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// without the scheduler's syscall bookkeeping (RawSyscall): on a
// non-blocking socket they never block, as in the gateway's stream path.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// readSize is the read buffer of both models (lent per read, not held by
// a connection): a read takes every event the socket holds.
const readSize = 16 << 10
