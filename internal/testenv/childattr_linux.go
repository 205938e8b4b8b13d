package testenv

import "syscall"

// ChildAttr makes the kernel kill a test's server when the test process
// dies (a test binary killed by its timeout leaves no prometheus, jaeger
// or redis-server behind).
func ChildAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
