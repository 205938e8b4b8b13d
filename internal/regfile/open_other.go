//go:build !unix

package regfile

// OpenNoWait is 0 where FIFOs are not opened through the file system.
const OpenNoWait = 0
