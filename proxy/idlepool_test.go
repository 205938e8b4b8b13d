package proxy

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// After a burst, low traffic keeps reusing the top of the idle stack; the
// connections below it, past the idle TTL, are closed as connections come
// back (times are given, not slept).
func TestStaleIdleConnsClosed(t *testing.T) {
	ln := idleEngine(t, 16)
	const ttl = 50 * time.Millisecond
	u := newUpstream(ln.Addr().String(), time.Second, 16, ttl)
	u.noSweep = true // times are given, the sweep would read the wall clock
	defer u.closeIdle()
	t0 := time.Now()
	var burst []*upConn
	for i := 0; i < 8; i++ {
		c, err := u.get(t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		burst = append(burst, c)
	}
	for _, c := range burst {
		u.put(c, t0)
	}
	// One connection at a time, well past the TTL of the others.
	now := t0
	for i := 0; i < 5; i++ {
		now = now.Add(ttl / 2)
		c, err := u.get(now, nil)
		if err != nil {
			t.Fatal(err)
		}
		u.put(c, now)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.idle {
		if now.Sub(c.lastUsed) >= ttl {
			t.Fatalf("%d idle connections, one of them %v old (ttl %v)", len(u.idle), now.Sub(c.lastUsed), ttl)
		}
	}
	if len(u.idle) != 1 {
		t.Fatalf("%d idle connections, want the one in use", len(u.idle))
	}
}

// An idle upstream connection is kept warm for the configured keep-alive
// (90s by default), not the 4s it once was: a connection idle for 10s is
// reused, with no new dial. A shorter configured keep-alive still expires
// it. Times are given to get and put, not slept.
func TestIdleConnKeptPastOldLimit(t *testing.T) {
	ln := idleEngine(t, 8)
	for _, c := range []struct {
		keepalive time.Duration // configured; 0: the default
		reused    bool
	}{{0, true}, {30 * time.Second, true}, {4 * time.Second, false}} {
		cfg := Config{Upstream: "http://" + ln.Addr().String(), IdleConnTTL: c.keepalive}
		d, _, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.keepalive == 0 && d.IdleConnTTL != DefaultIdleConnTTL {
			t.Fatalf("default keep-alive %v, want %v", d.IdleConnTTL, DefaultIdleConnTTL)
		}
		u := newUpstream(ln.Addr().String(), time.Second, 4, d.IdleConnTTL)
		u.noSweep = true // times are given, the sweep would read the wall clock
		t0 := time.Now()
		first, err := u.get(t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		u.put(first, t0)
		later := t0.Add(10 * time.Second) // past the old 4s limit
		second, err := u.get(later, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := second == first; got != c.reused {
			t.Errorf("keep-alive %v: connection idle 10s reused: %v, want %v", d.IdleConnTTL, got, c.reused)
		}
		if c.reused && second.reused != true {
			t.Errorf("keep-alive %v: the reused connection is not marked reused", d.IdleConnTTL)
		}
		u.put(second, later)
		u.closeIdle()
	}
}

// fakeConn is an upstream connection with no socket, for the pool's
// bookkeeping alone.
type fakeConn struct {
	net.Conn
	closed *int
}

func (c fakeConn) SetDeadline(time.Time) error { return nil }
func (c fakeConn) Close() error                { *c.closed++; return nil }

// At 1,024 concurrent streams, all 1,024 connections that come back are
// kept (the pool follows the load; none is closed to be dialled again),
// and the cap still bounds the pool.
func TestIdlePoolKeepsWhatTheLoadUses(t *testing.T) {
	for _, tc := range []struct{ max, returned, kept int }{
		{max: 1024, returned: 1024, kept: 1024},
		{max: 1024, returned: 1100, kept: 1024},
		{max: 256, returned: 1024, kept: 256},
	} {
		closed := 0
		u := newUpstream("engine:1", time.Second, tc.max, time.Minute)
		u.noSweep = true // times are given, the sweep would read the wall clock
		now := time.Unix(1000, 0)
		conns := make([]*upConn, tc.returned)
		for i := range conns {
			conns[i] = &upConn{Conn: fakeConn{closed: &closed}}
			u.markBusy(conns[i])
		}
		for _, c := range conns {
			u.put(c, now)
		}
		if len(u.idle) != tc.kept || closed != tc.returned-tc.kept || len(u.busy) != 0 {
			t.Errorf("cap %d, %d returned: %d kept, %d closed, %d busy; want %d kept, %d closed",
				tc.max, tc.returned, len(u.idle), closed, len(u.busy), tc.kept, tc.returned-tc.kept)
		}
	}
}

// idleEngine is an engine that accepts up to n connections and keeps them
// open, idle, until the test ends (then they and the listener are closed).
func idleEngine(t *testing.T, n int) net.Listener {
	t.Helper()
	ln, _ := idleEngineConns(t, n)
	return ln
}

// idleEngineConns is idleEngine, and the engine's side of each connection
// it accepts (at most n are held; they are closed at cleanup).
func idleEngineConns(t *testing.T, n int) (net.Listener, chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	return ln, accepted
}

// With no request coming, idle connections are still closed: past the
// idle TTL, and at once (the next sweep) when the engine closed its side,
// which left them in CLOSE_WAIT, a file descriptor each, until traffic
// came back (found by a soak test).
func TestIdleConnsClosedWithoutTraffic(t *testing.T) {
	ln, engine := idleEngineConns(t, 4)
	idleFor := func(u *upstream, n int) []*upConn {
		var cs []*upConn
		for range n {
			c, err := u.get(time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		for _, c := range cs {
			u.put(c, time.Now())
		}
		return cs
	}
	// gone waits for the engine's side of c to read EOF: the gateway closed it.
	gone := func(ec net.Conn) {
		t.Helper()
		defer ec.Close()
		ec.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		if _, err := ec.Read(b[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the gateway kept an idle connection open: %v", err)
		}
	}

	// Past the TTL (200 ms; swept every 20 ms).
	u := newUpstream(ln.Addr().String(), time.Second, 4, 200*time.Millisecond)
	defer u.closeIdle()
	idleFor(u, 2)
	gone(<-engine)
	gone(<-engine)

	// Closed by the engine: gone at the next sweep, well before the TTL.
	u2 := newUpstream(ln.Addr().String(), time.Second, 4, 10*time.Second)
	defer u2.closeIdle()
	start := time.Now()
	idleFor(u2, 1)
	ec := <-engine
	ec.Close()
	for {
		u2.mu.Lock()
		n := len(u2.idle)
		u2.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("a connection the engine closed is still in the idle pool")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(start); d > sweepEvery(10*time.Second)+2*time.Second {
		t.Errorf("closed after %v", d)
	}
}

// The peek at a pooled connection (a system call) is made with the pool's
// lock free: every request takes its connection from the pool, and under
// load (a mutex profile of BenchmarkRequestCostCold) they waited behind
// one another's peeks. The connection is counted busy before its peek, so
// a shutdown's cut reaches it; one the peek finds unusable is closed and
// counted busy no more.
func TestPoolFreeDuringPeek(t *testing.T) {
	ln := idleEngine(t, 4)
	u := newUpstream(ln.Addr().String(), time.Second, 4, time.Minute)
	u.noSweep = true
	defer u.closeIdle()
	now := time.Now()
	c, err := u.get(now, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.put(c, now)
	for _, usable := range []bool{true, false} {
		peeks, free, busy := 0, false, false
		c.usable = func() bool {
			peeks++
			if free = u.mu.TryLock(); free {
				_, busy = u.busy[c]
				u.mu.Unlock()
			}
			return usable
		}
		got, err := u.get(now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if peeks != 1 || !free || !busy {
			t.Fatalf("usable %v: %d peeks, pool free during the peek %v, connection busy %v", usable, peeks, free, busy)
		}
		if usable != (got == c) {
			t.Fatalf("usable %v: got the pooled connection %v", usable, got == c)
		}
		u.mu.Lock()
		_, stale := u.busy[c]
		n := len(u.busy)
		u.mu.Unlock()
		if stale != usable || n != 1 {
			t.Fatalf("usable %v: the pooled connection busy %v, %d busy", usable, stale, n)
		}
		u.put(got, now)
	}
}
