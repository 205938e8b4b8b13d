package otlp

import (
	"time"

	"github.com/goodput/goodput/internal/clip"
	"go.opentelemetry.io/otel"
)

// clipped is an error whose text is cut to one line of at most clip.Max
// bytes (clip.Line): an exporter's error quotes the collector's answer
// whole (1 MB from a collector's error page made a 1 MB warning).
type clipped struct{ err error }

func (e clipped) Error() string { return clip.Line(e.err.Error(), clip.Max) }
func (e clipped) Unwrap() error { return e.err }

// clipError returns err with its text clipped (nil for nil).
func clipError(err error) error {
	if err == nil {
		return nil
	}
	return clipped{err}
}

// ErrorLog returns a handler of the OpenTelemetry SDK's errors (exports
// that failed: a collector down or refusing) that logs them without
// flooding the log, as a warning: the first at once, then at most one per
// every, saying how many more came meanwhile, each on one line of at most
// clip.Max bytes of the error (a collector's error body is quoted whole in
// it). now is the clock (time.Now).
func ErrorLog(logf func(format string, args ...any), every time.Duration, now func() time.Time) otel.ErrorHandler {
	t := &throttle{every: every, now: now}
	return otel.ErrorHandlerFunc(func(err error) {
		ok, more := t.allow()
		if !ok {
			return
		}
		err = clipError(err)
		if more > 0 {
			logf("WARNING: opentelemetry: %v (and %d more errors in the last %v)", err, more, every)
			return
		}
		logf("WARNING: opentelemetry: %v", err)
	})
}
