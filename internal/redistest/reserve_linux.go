package redistest

import "syscall"

// reserve binds a socket to 127.0.0.1:port (0: a free port the kernel
// picks) without listening on it, and returns the port and a function
// that closes the socket. While it is open, connecting to the port is
// refused, as to a dead server, and no other socket can take it, not even
// as the local port of an outgoing connection, which would keep the server
// from binding it again. Both have SO_REUSEADDR and this one never
// listens, so Linux lets redis-server bind and listen on the port while it
// is held (holdThroughStart).
func reserve(port int) (int, func(), error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	release := func() { syscall.Close(fd) }
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		release()
		return 0, nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		release()
		return 0, nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		release()
		return 0, nil, err
	}
	return sa.(*syscall.SockaddrInet4).Port, release, nil
}

// holdThroughStart: the reservation is released once the server answers.
const holdThroughStart = true
