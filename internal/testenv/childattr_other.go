//go:build !linux

package testenv

import "syscall"

// ChildAttr: no parent-death signal here; the tests' cleanups kill their
// servers.
func ChildAttr() *syscall.SysProcAttr { return nil }
