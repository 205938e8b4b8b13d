package testenv

import (
	"runtime"
	"runtime/debug"
)

// AllocsPerRun returns the number of allocations per run of f, counted
// exactly, where testing.AllocsPerRun divides in integers, so that an
// allocation in fewer runs than all read as none (one every third call
// measured 0 over 1,000 calls, a review found). It measures runs calls of
// f up to 50 times, and returns the first count of none, or the last: an
// allocation every runs calls or more often shows in each measurement,
// while the Go runtime's own build of a type switch's or assertion's
// cache, which it makes about once in 1,024 calls of a site until the
// cache holds the types the site meets (runtime.typeAssert), allocates in
// a few of them only.
//
// It measures the steady state of the sync.Pools f uses: with the garbage
// collector off, on one P, after two runs of f there to warm up. A warm-up
// elsewhere does not always warm them for the measurement:
//   - a collection empties a pool (its items last one more collection as
//     victims): one that fell between the warm-up and the measured runs
//     made the pool refill inside the measurement;
//   - a pool keeps one item per P out of reach of the other Ps: a warm-up
//     that ran on several Ps leaves items that the measured runs, on one
//     P, cannot take;
//   - a pool that holds more items than before grows its ring once.
//
// Together they made meter's long-stream test count a few allocations in
// about 1 run in 600, 1 in 50 under GOGC=5, in allocations that each
// happen once per collection, not per event, which is what the tests
// claim. debug.SetGCPercent(-1) waits for a collection in progress to end,
// so none runs while f warms up and is measured.
//
// The count is the process's: a goroutine that an earlier test left
// running (a server's timer) allocates while f is preempted, which under
// -race on a loaded machine happened in all of 10 measurements once (0.1
// allocations a run, of a function that makes none); hence 50.
func AllocsPerRun(runs int, f func()) float64 {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	f()
	var before, after runtime.MemStats
	var n uint64
	for range 50 {
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		if n = after.Mallocs - before.Mallocs; n == 0 {
			break
		}
	}
	return float64(n) / float64(runs)
}
