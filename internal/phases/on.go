//go:build phases

package phases

import (
	"encoding/json"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Clock marks the phases of one request.
type Clock struct{ last time.Time }

// Begin starts the clock at t.
func (c *Clock) Begin(t time.Time) { c.last = t }

// Mark records phase p as ending now, and starts the next at now. A nil
// Clock (an exchange a test runs alone), or one not begun (a stream whose
// body is not an event stream), records nothing.
func (c *Clock) Mark(p Phase) { c.MarkAt(p, time.Now()) }

// MarkAt records phase p as ending at t, and starts the next at t.
func (c *Clock) MarkAt(p Phase, t time.Time) {
	if c == nil || c.last.IsZero() {
		return // not begun: it stays so until Begin
	}
	if !t.IsZero() {
		record(p, t.Sub(c.last))
	}
	c.last = t
}

// Now is time.Now.
func Now() time.Time { return time.Now() }

// Since records phase p as running from t to now.
func Since(p Phase, t time.Time) {
	if !t.IsZero() {
		record(p, time.Since(t))
	}
}

// maxSamples bounds what one phase keeps between two signals.
const maxSamples = 1 << 20

var (
	mu      sync.Mutex
	samples [count][]time.Duration
	seq     int
)

func record(p Phase, d time.Duration) {
	mu.Lock()
	if len(samples[p]) < maxSamples {
		samples[p] = append(samples[p], d)
	}
	mu.Unlock()
}

// Figure is one phase's durations since the signal before.
type Figure struct {
	Name string  `json:"name"`
	N    int     `json:"n"`
	P10  float64 `json:"p10_us"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
}

// Dump is what the file holds.
type Dump struct {
	Seq    int      `json:"seq"`
	Phases []Figure `json:"phases"`
}

// Take returns the figures recorded so far, and starts again. The
// samples are sorted after the lock is let go: the marks of the requests
// in flight (the window's first, at its start) do not wait for the sort.
func Take() Dump {
	mu.Lock()
	seq++
	d := Dump{Seq: seq, Phases: []Figure{}}
	taken := samples
	samples = [count][]time.Duration{}
	mu.Unlock()
	for p := range count {
		s := taken[p]
		if len(s) == 0 {
			continue
		}
		slices.Sort(s)
		at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / 1e3 }
		d.Phases = append(d.Phases, Figure{Name: p.String(), N: len(s), P10: at(.1), P50: at(.5), P90: at(.9), P99: at(.99)})
	}
	return d
}

// write replaces the file at path with d, whole (a reader never sees half).
func write(path string, d Dump) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func init() {
	if path := os.Getenv("GOODPUT_PHASES"); path != "" {
		_ = serve(path) // no file: the yardstick says the build is not one for phases
	}
}

// serve writes the file at path, and again at each SIGUSR1. The signal is
// caught before the file is first written: a yardstick that finds the file
// may signal at once (SIGUSR1 not caught ends a process).
func serve(path string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for range sig {
			_ = write(path, Take())
		}
	}()
	return write(path, Dump{Phases: []Figure{}})
}
