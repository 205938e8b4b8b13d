//go:build race

package proxy

// raceEnabled: the race detector slows every goroutine several times, so
// timing checks loosen under it; CI runs them strictly in a build without it.
const raceEnabled = true
