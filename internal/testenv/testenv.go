// Package testenv holds the switches that select the tests a developer's
// `go test ./...` leaves out because they are slow or need a quiet machine.
// CI runs them in steps of their own (see .ci/run).
package testenv

import (
	"os"
	"testing"
)

// LongEnv, set to 1, runs the long tests: soaks of a minute or more, and
// tests that start a Redis Cluster of their own.
const LongEnv = "GOODPUT_LONG_TESTS"

// TimingEnv, set to 1, checks the tight timing-accuracy bounds (a couple of
// milliseconds), which only hold on a machine that runs nothing else.
const TimingEnv = "GOODPUT_TIMING_TESTS"

// Long skips the test unless GOODPUT_LONG_TESTS=1; what says what makes it
// long ("a minute of load").
func Long(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(LongEnv) != "1" {
		t.Skipf("long test (%s): set %s=1 to run it", what, LongEnv)
	}
}

// StrictTiming reports whether tight timing bounds are checked
// (GOODPUT_TIMING_TESTS=1). Without it a test still measures, logs what it
// measured and checks everything else.
func StrictTiming() bool { return os.Getenv(TimingEnv) == "1" }
