//go:build !linux

package redistest

import "net"

// reserve returns port (0: a free one, found by listening on it and closing
// the listener); the port is not held.
func reserve(port int) (int, func(), error) {
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, nil, err
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	return port, func() {}, nil
}

// holdThroughStart: the reservation is released before the server starts.
const holdThroughStart = false
