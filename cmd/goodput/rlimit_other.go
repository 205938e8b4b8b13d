//go:build !unix

package main

// raiseFileLimit has nothing to raise on this platform; 0 means unknown.
func raiseFileLimit() (limit uint64, raised bool, err error) { return 0, false, nil }
