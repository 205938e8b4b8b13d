//go:build unix

package regfile

import "syscall"

// openNoWait opens a FIFO without waiting for a writer; a regular file is
// read as usual (O_NONBLOCK does not apply to it).
const openNoWait = syscall.O_NONBLOCK
