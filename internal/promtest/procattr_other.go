//go:build !linux

package promtest

import "syscall"

// procAttr: no parent-death signal here; Cleanup kills the server.
func procAttr() *syscall.SysProcAttr { return nil }
