package jaegertest

import "syscall"

// procAttr makes the kernel kill the server when the test process dies (a
// test binary killed by its timeout leaves no jaeger behind).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
