//go:build unix

package main

import "syscall"

// raiseFileLimit raises the soft limit on open files to the hard limit (a
// gateway holds two descriptors per request in flight, and the usual soft
// default, 1024, is reached at about 500 streams). It returns the limit in
// force, and whether it raised it. The Go runtime raises it too at start on
// some platforms; this makes it explicit everywhere and lets it be logged.
func raiseFileLimit() (limit uint64, raised bool, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false, err
	}
	if rl.Cur >= rl.Max {
		return uint64(rl.Cur), false, nil
	}
	want := rl
	want.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return uint64(rl.Cur), false, err
	}
	return uint64(want.Cur), true, nil
}
