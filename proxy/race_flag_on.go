//go:build race

package proxy

// raceEnabled: built with the race detector. Connections are then read
// and written through net.Conn (see rawConnIO), and timing checks in tests
// loosen (the detector slows every goroutine several times; CI runs them
// strictly in a build without it).
const raceEnabled = true
