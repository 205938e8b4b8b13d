package export

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/internal/regfile"
	"github.com/goodput/goodput/meter"
)

// RequestLog writes one JSON object per record (JSON Lines). Lines are
// buffered and written every FlushEvery, when 64 KiB are pending, and on
// Close.
//
// Recording a line never waits on the file: a request's record is appended
// to memory under a lock that no write holds, and a goroutine of the log's
// own writes. A write that fails (a full disk, an NFS server gone) or does
// not return (a pipe whose reader stopped) does not stop the gateway: the
// lines not written stay pending and are retried at every flush, so they
// reach the file once it takes writes again. At most MaxPending bytes of
// lines wait to be written; records beyond that are dropped and counted
// (Dropped). The outage is logged once when it starts and once when it
// ends; a write that does not return is logged once it has not returned for
// StallWarnAfter, and once more when it returns.
type RequestLog struct {
	// mu guards the lines waiting to be taken by the writer and the
	// counts; it is never held during a write.
	mu       sync.Mutex
	pending  []byte // whole lines not yet taken by the writer
	inWrite  int    // bytes the writer has taken and not yet written
	inLines  int64  // the records in them (the first may be in part on disk)
	max      int    // bound on pending + inWrite
	lost     int64  // records dropped in the current outage
	dropping bool   // records are being dropped
	lines    int64
	closed   bool
	gaveUp   bool         // Close stopped waiting for a write: nothing more is written or counted
	next     *os.File     // a file Reopen opened while a write was in progress, for the writer to switch to
	nextAt   int          // the bytes of pending recorded before that Reopen (for the file it replaces)
	dropped  atomic.Int64 // records dropped since the start
	failing  atomic.Bool  // the last write failed (its outage is logged)
	// waitFrom: when the writer began trying to write the lines it holds
	// (ns since logEpoch, on the monotonic clock; 0 while it holds none),
	// read by WriteWait without a lock, since a write that hangs holds wmu.
	waitFrom atomic.Int64

	// wmu guards the writer: one write at a time, and the file.
	wmu     sync.Mutex
	path    string // "" when not opened by path (stdout, tests)
	w       io.Writer
	c       io.Closer // nil for stdout
	out     []byte    // lines taken from pending, not yet written; the first may have been written in part
	midLine bool      // out starts in the middle of a line (a write stopped part-way)
	head    []byte    // while midLine: that line's part already written, for a new file to get it whole
	err     error     // the current outage's first error; nil while writes succeed
	since   time.Time // start of the current outage
	away    bool      // the file written is no longer at path (said once, until a reopen finds it)

	// stallMu guards the write in progress (writing, its number) and
	// whether its stall was logged (stalled): the write's own goroutine
	// and its stall timer's meet there. The warning is logged with it
	// held, so that the write's return is never logged before it.
	stallMu    sync.Mutex
	writes     int64 // numbers the writes
	writing    int64 // the write in progress (0: none)
	stalled    bool  // the write in progress was logged as not returning
	stallMax   int   // the bound of the records held (max) when the write started, for the warning
	stallAfter time.Duration

	logf      func(format string, args ...any)
	closeWait time.Duration
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

const (
	flushAt = 64 << 10
	// DefaultMaxPending bounds the lines kept in memory while the log
	// cannot be written, or is written more slowly than records come:
	// about 2,400 records of a long stream (some 28 KB: 4,096 gaps in
	// itl_ms), 60,000 of a short one. Records come in bursts (streams cut
	// together at a shutdown, write deadlines that expire together) while
	// the log's writer, one goroutine, waits for a CPU: 4 MiB held about
	// 150 long records, and a memory probe saw 1,170 of 2,000 dropped with
	// the file taking every write.
	DefaultMaxPending = 64 << 20
	// DefaultCloseWait bounds how long Close waits for the last write.
	DefaultCloseWait = 5 * time.Second
	// StallWarnAfter is how long a write may take before the log says it
	// has not returned (a hung mount, a pipe whose reader stopped): such a
	// write raises no error, and without the warning the gateway's own log
	// said nothing until the shutdown gave up on it.
	StallWarnAfter = 10 * time.Second
)

// OpenRequestLog opens path for appending ("-" is standard output) and
// flushes it every flushEvery (0 means 200ms). logf, if not nil, hears when
// writing fails and when it works again.
func OpenRequestLog(path string, flushEvery time.Duration, logf func(format string, args ...any)) (*RequestLog, error) {
	if path == "-" {
		return NewRequestLog(os.Stdout, nil, flushEvery, logf), nil
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	if endsMidLine(f, path) {
		// A run before stopped inside a record (killed mid-write, or
		// shut down on a full disk): the first record goes on a line of
		// its own, not onto that fragment, which a reader leaves out as a
		// cut line. (A reopen of the same file goes on with the record it
		// has in part itself: Reopen.)
		if _, err := f.Write([]byte{'\n'}); err != nil {
			logf("request_log: %s ends inside a record (a run before stopped mid-write), and the line could not be ended: %v", path, err)
		} else {
			logf("request_log: %s ended inside a record (a run before stopped mid-write): that record is cut; the log goes on from a new line", path)
		}
	}
	l := NewRequestLog(f, f, flushEvery, logf)
	l.path = path
	return l, nil
}

func openLog(path string) (*os.File, error) {
	// Opened without waiting: a FIFO with no reader is an error now, not
	// an open that waits for one (on a SIGHUP, the reloader with it).
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|regfile.OpenNoWait, 0o644)
	if regfile.NoReader(err) {
		return nil, fmt.Errorf("request_log: %s is a FIFO that no process reads (start its reader first): %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("request_log: %w", err)
	}
	// O_NONBLOCK stays set: a regular file ignores it, and a FIFO's writes
	// wait for its reader in Go's poller (Linux) on the log's own writer.
	return f, nil
}

// endsMidLine reports whether the regular file f, opened at path, is not
// empty and does not end with a newline.
func endsMidLine(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return false
	}
	r, err := os.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	var b [1]byte
	_, err = r.ReadAt(b[:], fi.Size()-1)
	return err == nil && b[0] != '\n'
}

// NewRequestLog writes records to w; c, if not nil, is closed by Close.
func NewRequestLog(w io.Writer, c io.Closer, flushEvery time.Duration, logf func(format string, args ...any)) *RequestLog {
	if flushEvery <= 0 {
		flushEvery = 200 * time.Millisecond
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := &RequestLog{w: w, c: c, max: DefaultMaxPending, logf: logf, closeWait: DefaultCloseWait, stallAfter: StallWarnAfter,
		pending: make([]byte, 0, flushAt+4096), out: make([]byte, 0, flushAt+4096),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.flusher(flushEvery)
	return l
}

// SetMaxPending sets how many bytes of lines may wait to be written
// (default DefaultMaxPending). Call it before the first record.
func (l *RequestLog) SetMaxPending(n int) {
	l.mu.Lock()
	l.max = n
	l.mu.Unlock()
}

// SetCloseWait sets how long Close waits for a write that does not return
// (default DefaultCloseWait). Call it before Close.
func (l *RequestLog) SetCloseWait(d time.Duration) {
	l.mu.Lock()
	l.closeWait = d
	l.mu.Unlock()
}

func (l *RequestLog) flusher(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	lastLook := time.Now()
	for {
		select {
		case <-t.C:
		case <-l.kick:
		case <-l.stop:
			return
		}
		l.Flush()
		if time.Since(lastLook) >= awayLook {
			lastLook = time.Now()
			l.lookAway()
		}
	}
}

// awayLook is how often the log looks whether its file is still at its
// path.
const awayLook = 10 * time.Second

// lookAway says, once, that the file the log writes is no longer at its
// path: moved by a rotation that sent no SIGHUP, or removed with its
// folder. The records still go to it (they are not lost), where whoever
// reads the path does not find them; a SIGHUP reopens the path. A write in
// progress (a hung disk) is not waited for.
func (l *RequestLog) lookAway() {
	if l.path == "" || !l.wmu.TryLock() {
		return
	}
	defer l.wmu.Unlock()
	f, ok := l.c.(*os.File)
	if !ok {
		return
	}
	at, err := os.Stat(l.path)
	away := err != nil
	if !away {
		cur, err := f.Stat()
		away = err == nil && !os.SameFile(cur, at)
	}
	if away && !l.away {
		l.logf("WARNING: request_log: %s is no longer the file being written (moved or removed, and no SIGHUP reopened it): records go on to the file it was, which that path does not show; send SIGHUP to reopen the path", l.path)
	}
	l.away = away
}

// Begin does nothing: a request is logged once, when it ends.
func (l *RequestLog) Begin(*meter.Record) {}

// Record appends one line. It never waits on a write.
func (l *RequestLog) Record(rec *meter.Record) {
	l.mu.Lock()
	if l.closed {
		// Too late for the file (a request that ended after the shutdown
		// stopped waiting for it): counted, never silently lost.
		l.mu.Unlock()
		l.dropped.Add(1)
		return
	}
	n := len(l.pending)
	l.pending = rec.AppendJSON(l.pending) // one line, newline included
	if n+l.inWrite > 0 && len(l.pending)+l.inWrite > l.max {
		// The log cannot be written fast enough (or at all) and holds all
		// it may: drop this record.
		l.pending = l.pending[:n]
		l.lost++
		l.dropped.Add(1)
		first := !l.dropping
		l.dropping = true
		held := n + l.inWrite
		l.mu.Unlock()
		if first && !l.failing.Load() {
			// Not on the request's path: the gateway's own log may be
			// as stuck as this one.
			go l.logf("request log: %d bytes of records wait to be written; records are dropped until it takes writes again (counted in goodput_request_log_errors_total)", held)
		}
		return
	}
	l.lines++
	full := len(l.pending) >= flushAt
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// Lines returns the number of records accepted (written, or pending).
func (l *RequestLog) Lines() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

// Dropped returns the number of records lost because the log could not be
// written (goodput_request_log_errors_total). It never waits.
func (l *RequestLog) Dropped() int64 { return l.dropped.Load() }

// WriteWait returns how long the log's writer has been trying to write
// the records it holds: 0 while it holds none, a write's own time while
// writes succeed; it grows while they fail (a full disk) or one does not
// return (a stalled pipe), the records kept in memory meanwhile up to the
// bound, then dropped. It never waits.
func (l *RequestLog) WriteWait(now time.Time) time.Duration {
	from := l.waitFrom.Load()
	if from == 0 {
		return 0
	}
	return max(now.Sub(logEpoch)-time.Duration(from), 0)
}

// logEpoch is the time waitFrom counts from.
var logEpoch = time.Now()

// Flush writes pending lines out (or tries to, while the log cannot be
// written).
func (l *RequestLog) Flush() {
	l.wmu.Lock()
	l.writeLocked()
	l.wmu.Unlock()
}

// writeLocked (wmu held) takes the pending lines and writes what it has;
// the part not written stays for the next write.
func (l *RequestLog) writeLocked() {
	l.mu.Lock()
	if l.gaveUp {
		l.mu.Unlock()
		return
	}
	if next := l.next; next != nil {
		// Reopen came while a write was in progress: the lines recorded
		// before it go to the file it replaced, the rest to next.
		upTo := min(l.nextAt, len(l.pending))
		l.next, l.nextAt = nil, 0
		l.out = append(l.out, l.pending[:upTo]...)
		l.pending = l.pending[:copy(l.pending, l.pending[upTo:])]
		l.mu.Unlock()
		l.writeOut()
		l.switchLocked(next)
		l.writeLocked() // the rest, to next
		return
	}
	if len(l.out) == 0 {
		l.out, l.pending = l.pending, l.out[:0]
	} else {
		l.out = append(l.out, l.pending...)
		l.pending = l.pending[:0]
	}
	l.mu.Unlock()
	l.writeOut()
}

// writeOut (wmu held) writes the lines taken; the part not written stays.
func (l *RequestLog) writeOut() {
	l.mu.Lock()
	l.inWrite = len(l.out)
	l.inLines = int64(bytes.Count(l.out, []byte{'\n'}))
	held := l.max
	l.mu.Unlock()
	if len(l.out) == 0 {
		l.waitFrom.Store(0)
		return
	}
	if l.waitFrom.Load() == 0 {
		l.waitFrom.Store(int64(time.Since(logEpoch)) | 1)
	}
	n, err := l.watchedWrite(l.out, held)
	if n < 0 || n > len(l.out) {
		n = 0
	}
	if n > 0 {
		l.midLine = l.out[n-1] != '\n'
		if i := bytes.LastIndexByte(l.out[:n], '\n'); i >= 0 {
			l.head = append(l.head[:0], l.out[i+1:n]...)
		} else {
			l.head = append(l.head, l.out[:n]...)
		}
		rest := copy(l.out, l.out[n:])
		l.out = l.out[:rest]
	}
	if err == nil && len(l.out) > 0 {
		err = io.ErrShortWrite
	}
	if len(l.out) == 0 {
		l.waitFrom.Store(0)
	}
	l.failing.Store(err != nil)
	l.mu.Lock()
	max := l.max
	l.inWrite = len(l.out)
	l.inLines = int64(bytes.Count(l.out, []byte{'\n'}))
	var lost int64
	wasDropping := l.dropping
	if err == nil {
		lost, l.lost, l.dropping = l.lost, 0, false
	}
	l.mu.Unlock()
	if err != nil {
		if l.err == nil {
			l.err, l.since = err, time.Now()
			l.logf("request log: writing failed: %v; retrying at every flush, keeping up to %d bytes of records meanwhile (more are dropped and counted in goodput_request_log_errors_total)", err, max)
		}
		return
	}
	if l.err != nil {
		l.logf("request log: writing again after %v; %d records dropped meanwhile", time.Since(l.since).Round(time.Millisecond), lost)
		l.err = nil
	} else if wasDropping {
		l.logf("request log: writing again; %d records dropped meanwhile", lost)
	}
	if cap(l.out) > 4*flushAt {
		// Give back what an outage grew.
		l.out = make([]byte, 0, flushAt+4096)
	}
}

// watchedWrite (wmu held) writes p, and says so in the log when the write
// has not returned after stallAfter, and again when it returns; max is
// the bound of the records held, which the first says.
func (l *RequestLog) watchedWrite(p []byte, max int) (int, error) {
	l.stallMu.Lock()
	l.writes++
	id := l.writes
	l.writing, l.stalled, l.stallMax = id, false, max
	l.stallMu.Unlock()
	start := time.Now()
	t := time.AfterFunc(l.stallAfter, func() { l.sayStalled(id) })
	n, err := l.w.Write(p)
	t.Stop()
	l.stallMu.Lock()
	stalled := l.stalled
	l.writing, l.stalled = 0, false
	l.stallMu.Unlock()
	if stalled {
		l.logf("request log: the write that had not returned returned after %v", time.Since(start).Round(time.Millisecond))
	}
	return n, err
}

// sayStalled logs that the write numbered id has not returned, if it is
// still in progress. It logs with stallMu held: a write that returns
// meanwhile waits for the warning before it says it returned (the warning
// logged after that would tell of a write in progress that had ended).
func (l *RequestLog) sayStalled(id int64) {
	l.stallMu.Lock()
	defer l.stallMu.Unlock()
	if l.writing == id {
		l.stalled = true
		l.logf("WARNING: request log: a write has not returned for %v (a hung disk or mount, or a pipe whose reader stopped); records wait in memory meanwhile, up to %d bytes, then are dropped and counted in goodput_request_log_errors_total (goodput_request_log_write_wait_seconds says how long they have waited)", l.stallAfter, l.stallMax)
	}
}

// restartLineLocked (wmu held) puts back the part already written of a
// line written in part, for a new file that must not start in the middle
// of a line: the new file gets the record whole (the file it replaces keeps
// the cut part, a line no reader takes for a record). A line written but
// for its newline is whole in the file it replaces, its last line (a
// reader takes it: compare's does): the new file does not get it again.
func (l *RequestLog) restartLineLocked() {
	if !l.midLine {
		return
	}
	l.midLine = false
	if len(l.out) > 0 && l.out[0] == '\n' {
		l.out = l.out[:copy(l.out, l.out[1:])]
		l.head = l.head[:0]
		l.mu.Lock()
		l.inWrite = len(l.out)
		l.inLines--
		l.mu.Unlock()
		return
	}
	l.out = append(l.head, l.out...)
	l.head = nil
	l.mu.Lock()
	l.inWrite = len(l.out)
	l.mu.Unlock()
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
	if !l.wmu.TryLock() {
		// A write is in progress, perhaps one that does not return (a
		// hung mount): the writer switches once it is done, and the
		// reloader (SIGHUP) does not wait for it.
		l.mu.Lock()
		old := l.next
		l.next, l.nextAt = f, len(l.pending)
		if l.closed {
			l.next = nil
			old = f
		}
		l.mu.Unlock()
		if old != nil {
			_ = old.Close()
		}
		select {
		case l.kick <- struct{}{}:
		default:
		}
		return nil
	}
	defer l.wmu.Unlock()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		_ = f.Close()
		return nil
	}
	l.writeLocked() // what is pending, to the file being replaced
	l.switchLocked(f)
	return nil
}

// switchLocked (wmu held) goes on with f, once what the current file was
// to get has been written to it (or could not be); a line it got in part is
// not continued in f, unless f is the same file: f gets it whole.
func (l *RequestLog) switchLocked(f *os.File) {
	old := l.c
	if of, ok := old.(*os.File); !ok || !sameFile(of, f) {
		l.restartLineLocked()
	}
	// Reopened at the same file (a SIGHUP with no rotation before it: it
	// also reloads the tenants), a line written in part goes on where it
	// stopped: f appends after the part written, and dropping the rest
	// would join the part to the next line.
	l.w, l.c = f, f
	if old != nil {
		_ = old.Close()
	}
	if l.err != nil {
		l.writeOut() // an outage may have ended with the new file
	}
}

// sameFile reports whether a and b are open on the same file.
func sameFile(a, b *os.File) bool {
	if a == nil || b == nil {
		return false
	}
	sa, err := a.Stat()
	if err != nil {
		return false
	}
	sb, err := b.Stat()
	return err == nil && os.SameFile(sa, sb)
}

// Close flushes and closes the log. It reports a final write that failed,
// and counts the records it could not write as dropped. It waits at most
// the close wait (SetCloseWait) for a write that does not return (a pipe
// whose reader stopped); the records it holds are then counted as dropped.
func (l *RequestLog) Close() error {
	l.mu.Lock()
	wait := l.closeWait
	l.mu.Unlock()
	closed := make(chan error, 1)
	go func() {
		close(l.stop)
		<-l.done
		l.wmu.Lock()
		defer l.wmu.Unlock()
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.writeLocked()
		l.mu.Lock()
		gaveUp := l.gaveUp
		l.mu.Unlock()
		err := l.err
		if gaveUp {
			// Close stopped waiting and counted what it could.
			if l.c != nil {
				_ = l.c.Close()
			}
			closed <- err
			return
		}
		if len(l.out) > 0 {
			lost := int64(bytes.Count(l.out, []byte{'\n'}))
			l.dropped.Add(lost)
			l.logf("request log: closing with %d records not written: %v", lost, err)
			l.out = l.out[:0]
		}
		if l.c != nil {
			if cerr := l.c.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("request log: %w", err)
		}
		return nil
	case <-time.After(wait):
	}
	// A write has not returned: what it holds and what waits behind it
	// is lost with the process.
	l.mu.Lock()
	l.closed, l.gaveUp = true, true
	lost := int64(bytes.Count(l.pending, []byte{'\n'}))
	l.pending = l.pending[:0]
	inWrite := l.inLines
	next := l.next // a Reopen's file, never used
	l.next, l.nextAt = nil, 0
	l.mu.Unlock()
	if next != nil {
		_ = next.Close()
	}
	l.dropped.Add(lost)
	l.logf("request log: closing: a write has not returned for %v; %d records not written, and %d in that write are lost unless it completes before the process exits", wait, lost, inWrite)
	return fmt.Errorf("request log: a write did not return within %v", wait)
}
