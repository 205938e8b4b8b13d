//go:build unix

package regfile

import "syscall"

// OpenNoWait, added to os.OpenFile's flags, opens a FIFO without waiting
// for the other end (a reader gets at once what is there; a writer without
// a reader gets ENXIO); a regular file opens as usual (O_NONBLOCK does not
// apply to it).
const OpenNoWait = syscall.O_NONBLOCK
