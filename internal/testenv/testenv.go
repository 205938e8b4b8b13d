// Package testenv holds the switches that select the tests a developer's
// `go test ./...` leaves out because they are slow or need a quiet machine.
// CI runs them in steps of their own (see .ci/run).
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// IOLoopEnv, set to 1, runs the tests that serve streams with the proxy's
// I/O loops on (io_loop, experimental): the proxy's own, and those of the
// packages that start a gateway (cmd/goodput, bench, export/otlp).
const IOLoopEnv = "GOODPUT_TEST_IO_LOOP"

// IOLoop reports whether the gateways a test starts turn the I/O loops on
// (GOODPUT_TEST_IO_LOOP=1).
func IOLoop() bool { return os.Getenv(IOLoopEnv) == "1" }

// Binary returns the path of the first of names found on PATH. Without one
// it skips the test, except in CI (CI set), where it fails: CI must run the
// tests that need a real server or browser. pkg names the Debian package
// that provides it.
func Binary(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI needs %s (Debian package %s)", names[0], pkg)
	}
	t.Skipf("no %s binary (Debian package %s)", names[0], pkg)
	return ""
}

// SyncBuffer collects a child process's output for a test's failure
// message; it is safe for concurrent writes and reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// PromtoolTest runs test, a promtool unit test file, with `promtool test
// rules` in the real PromQL engine (the Debian package prometheus), in a
// folder of its own beside an empty rules.yaml for a test that loads no
// rule; one that loads the project's rules names their file by its
// absolute path.
func PromtoolTest(t testing.TB, test string) {
	t.Helper()
	promtool := Binary(t, "prometheus", "promtool")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
