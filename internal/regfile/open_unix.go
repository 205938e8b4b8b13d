//go:build unix

package regfile

import (
	"errors"
	"syscall"
)

// OpenNoWait, added to os.OpenFile's flags, opens a FIFO without waiting
// for the other end (a reader gets at once what is there; a writer without
// a reader gets ENXIO); a regular file opens as usual (O_NONBLOCK does not
// apply to it).
const OpenNoWait = syscall.O_NONBLOCK

// NoReader reports whether err is an open with OpenNoWait of a FIFO for
// writing while no process has it open for reading (ENXIO, which reads
// "no such device or address": nothing that names a FIFO or its reader).
func NoReader(err error) bool { return errors.Is(err, syscall.ENXIO) }
