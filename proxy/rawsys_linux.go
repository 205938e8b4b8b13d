package proxy

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket,
// made without telling the scheduler (RawSyscall): they never block (a
// socket with nothing to read, or no room, answers EAGAIN at once), so
// there is no P to hand off. syscall.Read and syscall.Write enter and leave
// the scheduler's syscall state around each call, and a call that takes
// longer than sysmon's 20 µs tick (a loopback write does the receiver's TCP
// work) makes sysmon retake the P and wake another thread to run it: per
// streamed event, that bookkeeping and those wake-ups cost more CPU than
// the metering (see docs/OVERHEAD.md).

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}
