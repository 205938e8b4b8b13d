package export

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/goodput/goodput/meter"
)

// RequestLog writes one JSON object per record (JSON Lines). Lines are
// buffered and written every FlushEvery, when 64 KiB are pending, and on
// Close.
//
// A write that fails (a full disk, an NFS server gone) does not stop the
// log: the lines not written stay pending and are retried at every flush,
// so they reach the file once it takes writes again. While the log cannot
// be written, at most MaxPending bytes of lines are kept; records beyond
// that are dropped and counted (Dropped). The outage is logged once when it
// starts and once when it ends.
type RequestLog struct {
	mu      sync.Mutex
	path    string // "" when not opened by path (stdout, tests)
	w       io.Writer
	c       io.Closer // nil for stdout
	pending []byte    // whole lines not yet written, except that the first may have been written in part
	midLine bool      // pending starts in the middle of a line (a write stopped part-way)
	max     int       // bound on pending during an outage
	err     error     // the current outage's first error; nil while writes succeed
	since   time.Time // start of the current outage
	lost    int64     // records dropped in the current outage
	dropped int64     // records dropped since the start
	lines   int64
	closed  bool
	logf    func(format string, args ...any)
	stop    chan struct{}
	done    chan struct{}
}

const (
	flushAt = 64 << 10
	// DefaultMaxPending bounds the lines kept in memory while the log
	// cannot be written: about 4,000 records of 1 KiB.
	DefaultMaxPending = 4 << 20
)

// OpenRequestLog opens path for appending ("-" is standard output) and
// flushes it every flushEvery (0 means 200ms). logf, if not nil, hears when
// writing fails and when it works again.
func OpenRequestLog(path string, flushEvery time.Duration, logf func(format string, args ...any)) (*RequestLog, error) {
	if path == "-" {
		return NewRequestLog(os.Stdout, nil, flushEvery, logf), nil
	}
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	l := NewRequestLog(f, f, flushEvery, logf)
	l.path = path
	return l, nil
}

func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("request_log: %w", err)
	}
	return f, nil
}

// NewRequestLog writes records to w; c, if not nil, is closed by Close.
func NewRequestLog(w io.Writer, c io.Closer, flushEvery time.Duration, logf func(format string, args ...any)) *RequestLog {
	if flushEvery <= 0 {
		flushEvery = 200 * time.Millisecond
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := &RequestLog{w: w, c: c, max: DefaultMaxPending, logf: logf,
		pending: make([]byte, 0, flushAt+4096), stop: make(chan struct{}), done: make(chan struct{})}
	go l.flusher(flushEvery)
	return l
}

// SetMaxPending sets how many bytes of lines are kept while the log cannot
// be written (default DefaultMaxPending). Call it before the first record.
func (l *RequestLog) SetMaxPending(n int) {
	l.mu.Lock()
	l.max = n
	l.mu.Unlock()
}

func (l *RequestLog) flusher(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.Flush()
		case <-l.stop:
			return
		}
	}
}

// Begin does nothing: a request is logged once, when it ends.
func (l *RequestLog) Begin(*meter.Record) {}

// Record appends one line.
func (l *RequestLog) Record(rec *meter.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.pending)
	l.pending = rec.AppendJSON(l.pending) // one line, newline included
	if l.err != nil && len(l.pending) > l.max && n > 0 {
		// The log cannot be written and holds all it may: drop this record.
		l.pending = l.pending[:n]
		l.lost++
		l.dropped++
		return
	}
	l.lines++
	if l.err == nil && len(l.pending) >= flushAt {
		l.writeLocked()
	}
}

// Lines returns the number of records accepted (written, or pending).
func (l *RequestLog) Lines() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

// Dropped returns the number of records lost because the log could not be
// written (goodput_request_log_errors_total).
func (l *RequestLog) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Flush writes pending lines out (or tries to, while the log cannot be
// written).
func (l *RequestLog) Flush() {
	l.mu.Lock()
	l.writeLocked()
	l.mu.Unlock()
}

// writeLocked writes what is pending; the part not written stays pending.
func (l *RequestLog) writeLocked() {
	if len(l.pending) == 0 {
		return
	}
	n, err := l.w.Write(l.pending)
	if n < 0 || n > len(l.pending) {
		n = 0
	}
	if n > 0 {
		l.midLine = l.pending[n-1] != '\n'
		rest := copy(l.pending, l.pending[n:])
		l.pending = l.pending[:rest]
	}
	if err == nil && len(l.pending) > 0 {
		err = io.ErrShortWrite
	}
	if err != nil {
		if l.err == nil {
			l.err, l.since = err, time.Now()
			l.logf("request log: writing failed: %v; retrying at every flush, keeping up to %d bytes of records meanwhile (more are dropped and counted in goodput_request_log_errors_total)", err, l.max)
		}
		return
	}
	if l.err != nil {
		l.logf("request log: writing again after %v; %d records dropped meanwhile", time.Since(l.since).Round(time.Millisecond), l.lost)
		l.err, l.lost = nil, 0
	}
	if cap(l.pending) > 4*flushAt {
		// Give back what an outage grew.
		l.pending = make([]byte, 0, flushAt+4096)
	}
}

// dropPartialLocked drops the rest of a line that was written in part, for
// a new file that must not start in the middle of a line.
func (l *RequestLog) dropPartialLocked() {
	if !l.midLine {
		return
	}
	l.midLine = false
	i := bytes.IndexByte(l.pending, '\n')
	l.pending = l.pending[:copy(l.pending, l.pending[i+1:])]
	l.lost++
	l.dropped++
}

// Reopen closes the log file and opens its path again, after a rotation
// moved it away (logrotate's convention, on SIGHUP). Lines pending are
// written to the old file first if it takes them, else to the new one. If
// the path cannot be opened, the log keeps writing to the file it has and
// Reopen returns the error. The standard output is not reopened.
func (l *RequestLog) Reopen() error {
	if l.path == "" {
		return nil
	}
	f, err := openLog(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = f.Close()
		return nil
	}
	l.writeLocked()
	l.dropPartialLocked()
	old := l.c
	l.w, l.c = f, f
	if old != nil {
		_ = old.Close()
	}
	if l.err != nil {
		l.writeLocked() // an outage may have ended with the new file
	}
	return nil
}

// Close flushes and closes the log. It reports a final write that failed,
// and counts the records it could not write as dropped.
func (l *RequestLog) Close() error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.writeLocked()
	err := l.err
	if len(l.pending) > 0 {
		lost := int64(bytes.Count(l.pending, []byte{'\n'}))
		l.dropped += lost
		l.logf("request log: closing with %d records not written: %v", lost, err)
		l.pending = l.pending[:0]
	}
	if l.c != nil {
		if cerr := l.c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	return nil
}
