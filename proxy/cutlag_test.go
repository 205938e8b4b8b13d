package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// README, Shutdown: when shutdown_grace runs out the gateway cuts what is
// still in flight, "and each still ends as one record (outcome timeout,
// "gateway shutting down")" within the 5 s serve waits for those records.
// A stream whose client reads more slowly than the engine sends is no
// exception, wherever the cut finds it: its reader waiting for room in the
// client's lag queue, or reading the engine while its writer waits for the
// client's full socket. Before, the cut reached neither, and under
// `goodput serve` the process exited after "N requests still without a
// record 5s after the cut" with no record for the request (a probe saw it
// with curl --limit-rate 2k against the simulator).

// cutRecord waits for the record of a stream the cut ended: timeout, the
// gateway shutting down, within the 5 s serve gives it.
func cutRecord(t *testing.T, g *gateway, what string) {
	t.Helper()
	select {
	case rec := <-g.records:
		if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "shutting down") {
			t.Fatalf("record %s %q, want timeout (gateway shutting down)", rec.Outcome, rec.ErrorMessage)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no record 5 s after the cut for %s: serve would exit without it", what)
	}
}

// The reader waits for room in the lag queue of a client that reads
// nothing (idle and total timeouts far off): the cut ends the wait.
func TestCutEndsAStreamWhoseClientLags(t *testing.T) {
	up, _ := floodUpstream(t)
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: time.Hour, IdleTimeout: time.Minute})
	lagging := make(chan struct{})
	var once sync.Once
	testHookLagFull = func(*stream) { once.Do(func() { close(lagging) }) }
	defer func() { testHookLagFull = nil }()
	stallingClient(t, g.addr)
	<-lagging // the stream's reader waits for its client
	g.p.Cut()
	cutRecord(t, g, "a stream whose client lags")
	g.noMoreRecords(t)
}

// The engine sent more than the client's socket takes, all of it read and
// queued (the lag queue is large), and went quiet: the reader waits for
// the engine, the writer for the client's full socket. The cut ends both.
func TestCutEndsAStreamWhoseWriterIsBlocked(t *testing.T) {
	const events = 16 << 10 // of about 1 KB: 16 MB, past what the sockets take (4 MiB send buffer at most)
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for range events {
			if writeChunk(c, ev) != nil {
				return
			}
		}
		hungUpWithin(c, time.Minute) // quiet until the gateway hangs up
	})
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 20, MaxLagMemory: 1 << 30,
		TotalTimeout: time.Hour, IdleTimeout: time.Minute})
	var mu sync.Mutex
	seen, waited := 0, false
	allRead := make(chan struct{})
	testHookEvent = func([]byte) {
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == events {
			close(allRead)
		}
	}
	testHookLagFull = func(*stream) {
		mu.Lock()
		waited = true
		mu.Unlock()
	}
	defer func() { testHookEvent, testHookLagFull = nil, nil }()
	stallingClient(t, g.addr)
	<-allRead // every event read: the reader goes back to the engine
	mu.Lock()
	w := waited
	mu.Unlock()
	if w {
		t.Fatal("the reader waited for room in the lag queue: the case under test is the writer's")
	}
	if g.p.LagMemory() == 0 {
		t.Fatal("nothing queued for the client: its socket took 16 MB unread")
	}
	g.p.Cut()
	cutRecord(t, g, "a stream whose writer waits for its client")
	g.noMoreRecords(t)
}

// Several clients that lag, each stream's reader waiting for room: each
// ends with its record.
func TestCutEndsEveryStreamWhoseClientLags(t *testing.T) {
	const clients = 4
	up, hungUp := floodUpstream(t)
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: time.Hour, IdleTimeout: time.Minute})
	var mu sync.Mutex
	full := map[*stream]bool{}
	lagging := make(chan struct{})
	testHookLagFull = func(s *stream) {
		mu.Lock()
		defer mu.Unlock()
		if !full[s] {
			if full[s] = true; len(full) == clients {
				close(lagging)
			}
		}
	}
	defer func() { testHookLagFull = nil }()
	for range clients {
		stallingClient(t, g.addr)
	}
	<-lagging // every stream's reader waits for its client
	g.p.Cut()
	for i := range clients {
		cutRecord(t, g, "stream "+string(rune('1'+i))+" of several whose clients lag")
	}
	g.noMoreRecords(t)
	for range clients {
		<-hungUp // every engine's connection was closed (and its handler ends)
	}
}

// The cut comes after the writer's last write and before it sets the
// deadline of its next: waitWriter expires the deadline first, and the
// writer's new one would replace it unseen, its write to a client that
// reads nothing waiting out the idle timeout. The writer looks at the cut
// after setting it (writerDeadline), and does not write.
func TestCutBeforeTheWritersNextDeadline(t *testing.T) {
	up, _ := floodUpstream(t)
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: time.Hour, IdleTimeout: time.Minute})
	expired := make(chan struct{})
	testHookWriterCut = func() { close(expired) }
	var once sync.Once
	testHookWriterDeadline = func() {
		once.Do(func() {
			g.p.Cut()
			select {
			case <-expired: // waitWriter expired the deadline: the writer sets its own now
			case <-time.After(5 * time.Second):
				t.Error("waitWriter did not expire the write deadline 5 s after the cut")
			}
		})
	}
	defer func() { testHookWriterCut, testHookWriterDeadline = nil, nil }()
	stallingClient(t, g.addr)
	cutRecord(t, g, "a stream cut before its writer's next deadline")
	g.noMoreRecords(t)
}
