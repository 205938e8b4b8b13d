//go:build race

package bench

// raceEnabled: the race detector slows every goroutine several times, so
// timing bounds are only checked in a build without it.
const raceEnabled = true
