//go:build !linux

package redistest

import "syscall"

// procAttr: no parent-death signal here; Cleanup kills the server.
func procAttr() *syscall.SysProcAttr { return nil }
