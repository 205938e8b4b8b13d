package otlp

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel"
)

// ErrorLog returns a handler of the OpenTelemetry SDK's errors (exports
// that failed: a collector down or refusing) that logs them without
// flooding the log, as a warning: the first at once, then at most one per
// every, saying how many more came meanwhile. now is the clock (time.Now).
func ErrorLog(logf func(format string, args ...any), every time.Duration, now func() time.Time) otel.ErrorHandler {
	var (
		mu     sync.Mutex
		last   time.Time
		logged bool
		more   int
	)
	return otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		t := now()
		if logged && t.Sub(last) < every {
			more++
			mu.Unlock()
			return
		}
		n := more
		logged, last, more = true, t, 0
		mu.Unlock()
		if n > 0 {
			logf("WARNING: opentelemetry: %v (and %d more errors in the last %v)", err, n, every)
			return
		}
		logf("WARNING: opentelemetry: %v", err)
	})
}
