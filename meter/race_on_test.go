//go:build race

package meter

// raceEnabled: the race detector makes the exhaustive split tests about ten
// times slower; they check every cut position in runs without -race.
const raceEnabled = true
