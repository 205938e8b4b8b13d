package testenv

import (
	"errors"
	"fmt"
	"testing"
)

// BoundAttempts is how many measurements Bounded makes before it fails.
const BoundAttempts = 3

// Bounded checks a tight bound on wall-clock timing, the kind that a defect
// breaks in every run and a stall of a shared machine in one: measure makes
// the test's measurement (checking everything else as it goes, with t) and
// returns an error saying how far over its bound the run was, or nil.
//
// Without StrictTiming measure runs once and its error is only logged: the
// bound is CI's timing step's. With it measure runs again while its bound
// fails, BoundAttempts times in all, and the test fails with every
// run's error. The proxy's ITL p99 against the simulator, 2 ms at most,
// held in CI's runs for many stops and then measured 2.3 ms once; on a
// loaded machine here the first run of a process measured 2.2 ms and the
// next 0.7. A stall breaks one run and a defect every run: a second run
// tells them apart.
func Bounded(t testing.TB, measure func() error) {
	t.Helper()
	var errs []error
	for i := 1; i <= BoundAttempts; i++ {
		err := measure()
		if t.Failed() {
			return // a failure other than the bound: a new run would not mend it
		}
		if err == nil {
			return
		}
		if !StrictTiming() {
			t.Logf("over the timing bound, not checked without %s=1: %v", TimingEnv, err)
			return
		}
		errs = append(errs, fmt.Errorf("run %d of %d: %w", i, BoundAttempts, err))
		if i < BoundAttempts {
			t.Logf("run %d of %d over the timing bound, measuring again: %v", i, BoundAttempts, err)
		}
	}
	t.Fatal(errors.Join(errs...))
}
