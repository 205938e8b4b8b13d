package export

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/goodput/goodput/meter"
)

// RequestLog writes one JSON object per record (JSON Lines). Writes are
// buffered and flushed every FlushEvery and on Close; a record is never
// dropped: Record blocks on the file if it must.
type RequestLog struct {
	mu     sync.Mutex
	w      *bufio.Writer
	c      io.Closer // nil for stdout
	buf    []byte
	err    error
	lines  int64
	stop   chan struct{}
	done   chan struct{}
	onFail func(error)
}

// OpenRequestLog opens path for appending ("-" is standard output) and
// flushes it every flushEvery (0 means 200ms). onFail, if not nil, hears
// about the first write error.
func OpenRequestLog(path string, flushEvery time.Duration, onFail func(error)) (*RequestLog, error) {
	var w io.Writer
	var c io.Closer
	if path == "-" {
		w = os.Stdout
	} else {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("request_log: %w", err)
		}
		w, c = f, f
	}
	return NewRequestLog(w, c, flushEvery, onFail), nil
}

// NewRequestLog writes records to w; c, if not nil, is closed by Close.
func NewRequestLog(w io.Writer, c io.Closer, flushEvery time.Duration, onFail func(error)) *RequestLog {
	if flushEvery <= 0 {
		flushEvery = 200 * time.Millisecond
	}
	l := &RequestLog{w: bufio.NewWriterSize(w, 64<<10), c: c, stop: make(chan struct{}), done: make(chan struct{}), onFail: onFail}
	go l.flusher(flushEvery)
	return l
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
	l.buf = rec.AppendJSON(l.buf[:0]) // one line, newline included
	if _, err := l.w.Write(l.buf); err != nil {
		l.fail(err)
	}
	l.lines++
	l.mu.Unlock()
}

// Lines returns the number of records written.
func (l *RequestLog) Lines() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

func (l *RequestLog) fail(err error) {
	if l.err == nil {
		l.err = err
		if l.onFail != nil {
			l.onFail(err)
		}
	}
}

// Flush writes buffered lines out.
func (l *RequestLog) Flush() {
	l.mu.Lock()
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
	l.mu.Unlock()
}

// Close flushes and closes the log.
func (l *RequestLog) Close() error {
	close(l.stop)
	<-l.done
	l.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		if err := l.c.Close(); err != nil && l.err == nil {
			l.err = err
		}
	}
	return l.err
}
