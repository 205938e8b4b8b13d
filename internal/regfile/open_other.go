//go:build !unix

package regfile

// OpenNoWait is 0 where FIFOs are not opened through the file system.
const OpenNoWait = 0

// NoReader is false where FIFOs are not opened through the file system.
func NoReader(error) bool { return false }
