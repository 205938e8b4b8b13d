package testenv

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// AllocsPerRun is testing.AllocsPerRun (the average number of allocations
// of runs of f) measured in the steady state of the sync.Pools f uses: with
// the garbage collector off, on one P, after two runs of f there to warm up
// (one here, one in testing.AllocsPerRun).
//
// The gateway reuses buffers from sync.Pools, and a warm-up elsewhere does
// not always warm them for the measurement:
//   - a collection empties a pool (its items last one more collection as
//     victims): one that fell between the warm-up and the measured runs
//     made the pool refill inside the measurement;
//   - a pool keeps one item per P out of reach of the other Ps: a warm-up
//     that ran on several Ps leaves items that the measured runs, which
//     testing.AllocsPerRun runs with GOMAXPROCS 1, cannot take;
//   - a pool that holds more items than before grows its ring once.
//
// Together they made meter's long-stream test count a few allocations in
// about 1 run in 600, 1 in 50 under GOGC=5, in allocations that each
// happen once per collection, not per event, which is what the tests
// claim. debug.SetGCPercent(-1) waits for a collection in progress to end,
// so none runs while f warms up and is measured.
func AllocsPerRun(runs int, f func()) float64 {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	return testing.AllocsPerRun(runs, f)
}
