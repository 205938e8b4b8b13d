//go:build !phases

package phases

import "time"

// Clock marks the phases of one request (on builds with -tags phases). It
// is empty here, and its methods do nothing.
type Clock struct{}

// Begin starts the clock at t.
func (*Clock) Begin(time.Time) {}

// Mark records phase p as ending now, and starts the next at now (a Clock
// not begun records nothing).
func (*Clock) Mark(Phase) {}

// MarkAt records phase p as ending at t, and starts the next at t.
func (*Clock) MarkAt(Phase, time.Time) {}

// Now is time.Now in a phases build; here the zero time, never read.
func Now() time.Time { return time.Time{} }

// Since records phase p as running from t to now.
func Since(Phase, time.Time) {}
