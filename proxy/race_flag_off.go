//go:build !race

package proxy

// raceEnabled: built with the race detector (see race_flag_on.go).
const raceEnabled = false
