package otlp

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/goodput/goodput/internal/clip"
)

// throttle lets a line through at once, then at most one per every,
// counting those it held back meanwhile.
type throttle struct {
	mu     sync.Mutex
	every  time.Duration
	now    func() time.Time
	last   time.Time
	logged bool
	more   int
}

// allow reports whether a line may go now, and how many were held back
// since the last one that went (said by held).
func (t *throttle) allow() (ok bool, more int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.now()
	if t.logged && at.Sub(t.last) < t.every {
		t.more++
		return false, 0
	}
	more = t.more
	t.logged, t.last, t.more = true, at, 0
	return true, more
}

// SDKLog returns a logger for the OpenTelemetry SDK's own messages
// (otel.SetLogger), which go to logf as warnings without flooding the log
// (at most one per every, as ErrorLog's): its errors and warnings, and the
// spans the batch span processor dropped. The processor drops a span when
// its queue (2,048 spans, OTEL_BSP_MAX_QUEUE_SIZE) is full, the collector
// slow or out of reach, and says so only in a debug message at each export
// ("total_dropped"), which Go's default logger for the SDK never shows: a
// gateway then lost spans silently. now is the clock (time.Now).
func SDKLog(logf func(format string, args ...any), every time.Duration, now func() time.Time) logr.Logger {
	return logr.New(&sdkSink{logf: logf, warn: throttle{every: every, now: now}, drops: throttle{every: every, now: now}})
}

type sdkSink struct {
	logf        func(format string, args ...any)
	warn, drops throttle

	mu    sync.Mutex
	raw   uint32 // the processor's total_dropped at the last message (it wraps)
	total uint64 // spans dropped since the start
	said  uint64 // total at the last line about it
}

// verbosityWarn is the level at which the SDK logs a warning (otel's global
// Warn is V(1)); Info is V(4), Debug V(8).
const verbosityWarn = 1

func (s *sdkSink) Init(logr.RuntimeInfo) {}

// Enabled takes every level: the drops come in debug messages.
func (s *sdkSink) Enabled(int) bool { return true }

func (s *sdkSink) Info(level int, msg string, kv ...any) {
	if msg == "exporting spans" {
		s.noteDropped(kv)
		return
	}
	if level > verbosityWarn {
		return
	}
	if ok, more := s.warn.allow(); ok {
		s.logf("WARNING: opentelemetry: %s%s%s", msg, pairs(kv), s.warn.held(more))
	}
}

func (s *sdkSink) Error(err error, msg string, kv ...any) {
	if ok, more := s.warn.allow(); ok {
		s.logf("WARNING: opentelemetry: %s: %v%s%s", msg, clipError(err), pairs(kv), s.warn.held(more))
	}
}

// noteDropped reads the processor's running count of dropped spans from
// an export's debug message (a uint32, which wraps: its increase is taken
// modulo 2^32), and says when it has grown.
func (s *sdkSink) noteDropped(kv []any) {
	var raw uint32
	found := false
	for i := 0; i+1 < len(kv); i += 2 {
		if v, ok := kv[i+1].(uint32); ok && kv[i] == "total_dropped" {
			raw, found = v, true
		}
	}
	if !found {
		return
	}
	s.mu.Lock()
	s.total += uint64(raw - s.raw)
	s.raw = raw
	if s.total == s.said {
		s.mu.Unlock()
		return
	}
	ok, _ := s.drops.allow()
	if !ok {
		s.mu.Unlock()
		return
	}
	n, total := s.total-s.said, s.total
	s.said = total
	s.mu.Unlock()
	s.logf("WARNING: opentelemetry: %d spans dropped (%d since the start): the span queue was full, the collector slow or out of reach; raise OTEL_BSP_MAX_QUEUE_SIZE or fix the collector", n, total)
}

func (s *sdkSink) WithValues(...any) logr.LogSink { return s }
func (s *sdkSink) WithName(string) logr.LogSink   { return s }

// pairs renders a message's key/value pairs, clipped to one line.
func pairs(kv []any) string {
	if len(kv) == 0 {
		return ""
	}
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%v=%v", kv[i], kv[i+1])
	}
	return " " + clip.Line(string(b), clip.Max)
}

// held says how many lines t held back before this one, if any.
func (t *throttle) held(more int) string {
	if more == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d more in the last %v)", more, t.every)
}
