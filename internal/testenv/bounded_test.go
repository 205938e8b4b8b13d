package testenv

import (
	"errors"
	"strings"
	"testing"
)

// recorder is a testing.TB whose failures are noted instead of ending the
// test that uses it.
type recorder struct {
	testing.TB
	failed bool
	fatal  string
}

func (r *recorder) Helper()               {}
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Failed() bool          { return r.failed }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(args ...any) {
	r.failed = true
	r.fatal = args[0].(error).Error()
}

// over returns a measurement that is over its bound in the first n runs,
// and counts its runs.
func over(n int, runs *int) func() error {
	return func() error {
		*runs++
		if *runs <= n {
			return errors.New("p99 2.3 ms")
		}
		return nil
	}
}

func TestBoundedMeasuresAgainOnlyWhileOver(t *testing.T) {
	t.Setenv(TimingEnv, "1")
	for _, c := range []struct {
		over, runs int
		failed     bool
	}{
		{0, 1, false},
		{1, 2, false},
		{BoundAttempts - 1, BoundAttempts, false},
		{BoundAttempts, BoundAttempts, true},
		{BoundAttempts + 5, BoundAttempts, true},
	} {
		r, runs := &recorder{}, 0
		Bounded(r, over(c.over, &runs))
		if runs != c.runs || r.failed != c.failed {
			t.Errorf("over in %d runs: measured %d times, failed %v; want %d, %v", c.over, runs, r.failed, c.runs, c.failed)
		}
		if c.failed && strings.Count(r.fatal, "p99 2.3 ms") != BoundAttempts {
			t.Errorf("failure %q: want each run's error", r.fatal)
		}
	}
}

func TestBoundedOnceWithoutStrictTiming(t *testing.T) {
	t.Setenv(TimingEnv, "")
	r, runs := &recorder{}, 0
	Bounded(r, over(BoundAttempts, &runs))
	if runs != 1 || r.failed {
		t.Errorf("measured %d times, failed %v; want once, passed", runs, r.failed)
	}
}

// A run that failed otherwise (a wrong count, a lost record) is not run
// again: only the timing bound is noise.
func TestBoundedStopsAtAnotherFailure(t *testing.T) {
	t.Setenv(TimingEnv, "1")
	r, runs := &recorder{}, 0
	Bounded(r, func() error {
		runs++
		r.Errorf("a record lost")
		return errors.New("p99 2.3 ms")
	})
	if runs != 1 {
		t.Errorf("measured %d times after a failure, want once", runs)
	}
}
