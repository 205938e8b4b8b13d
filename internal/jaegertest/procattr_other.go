//go:build !linux

package jaegertest

import "syscall"

// procAttr: no parent-death signal here; Cleanup kills the server.
func procAttr() *syscall.SysProcAttr { return nil }
