//go:build !unix

package export

const openNoWait = 0
