//go:build unix

package proxy

import (
	"os"
	"syscall"
)

// socketShortage tries to open a socket, and returns why it could not when
// that is the gateway's own shortage (of descriptors, buffers or memory).
// A lookup of the engine's name needs a socket to the resolver, and one
// that could not open it failed as "no such host" (Go's resolver keeps no
// errno of it), the engine blamed.
func socketShortage() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		if err := os.NewSyscallError("socket", err); OutOfDescriptors(err) {
			return err
		}
		return nil
	}
	_ = syscall.Close(fd)
	return nil
}
