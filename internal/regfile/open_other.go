//go:build !unix

package regfile

const openNoWait = 0
