//go:build unix

package export

import "syscall"

// openNoWait opens a FIFO without waiting for a reader (ENXIO when there
// is none); a regular file opens as usual.
const openNoWait = syscall.O_NONBLOCK
