package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logWriter passes the gateway's own log lines to w without letting a
// write that does not return hold up whoever logs: a container runtime in
// blocking mode whose log driver cannot keep up, a pipe whose reader
// stopped. Each line is copied to a buffer, and a goroutine of its own
// writes the buffer out; when more than max bytes wait, lines are dropped,
// and a line says how many once writing goes on. (The Listener logs from
// its accept loop, the limits from admissions: a stuck log must not stop
// either.)
type logWriter struct {
	w    io.Writer
	json bool // the log's format, for the line that counts dropped lines
	max  int
	mu   sync.Mutex
	buf  []byte // lines not yet taken by the writer
	lost int    // lines dropped since the last write
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

const logWriterMax = 1 << 20

func newLogWriter(w io.Writer, format string, max int) *logWriter {
	l := &logWriter{w: w, json: format == "json", max: max, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Write queues p (one log line) and never waits on the underlying writer.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	if len(l.buf) > 0 && len(l.buf)+len(p) > l.max {
		l.lost++
	} else {
		l.buf = append(l.buf, p...)
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *logWriter) run() {
	defer close(l.done)
	var out []byte
	for {
		select {
		case <-l.wake:
		case <-l.stop:
			l.flush(&out)
			return
		}
		l.flush(&out)
	}
}

// flush writes what waits, then says how many lines were dropped after it.
func (l *logWriter) flush(out *[]byte) {
	l.mu.Lock()
	*out, l.buf = l.buf, (*out)[:0]
	lost := l.lost
	l.lost = 0
	l.mu.Unlock()
	if len(*out) > 0 {
		_, _ = l.w.Write(*out)
	}
	if lost > 0 {
		// After the lines kept: the dropped ones came after them.
		var h slog.Handler = slog.NewTextHandler(l.w, nil)
		if l.json {
			h = slog.NewJSONHandler(l.w, nil)
		}
		slog.New(h).Warn(fmt.Sprintf("%d log lines were dropped: the log output did not take them in time", lost))
	}
	if cap(*out) > 64<<10 {
		*out = nil
	}
}

// Close writes what waits, for at most wait (a write that does not
// return is left behind: the process is about to exit).
func (l *logWriter) Close(wait time.Duration) {
	close(l.stop)
	select {
	case <-l.done:
	case <-time.After(wait):
	}
}
