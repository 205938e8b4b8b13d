package ratelimit

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// An outage whose cause changes says so once: a Redis that went away, then
// came back asking for a password it did not ask for before, is logged as
// failing to connect, then once as refusing calls without the password,
// however many probes fail so. (The outage named only its first error,
// while every call failed on authentication.)
func TestRedisOutageLogsANewCause(t *testing.T) {
	m := miniredis.RunT(t) // stopped and restarted: always in-process
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000})}
	pr := newProbedRedis(t, "redis://"+m.Addr(), ts, 250*time.Millisecond)
	r, probes, lines := pr.Redis, pr.probes, pr.lines
	acme := Request{Tenant: "acme"}
	if _, d := admit(t, r, t0, acme); !d.Allowed {
		t.Fatal(d)
	}
	m.Close()
	var d Decision
	if _, err := r.Admit(t.Context(), t0, &acme, &d); err == nil || !r.open.Load() {
		t.Fatalf("err %v, breaker open %v: want a refused connection to open the breaker", err, r.open.Load())
	}
	m.RequireAuth("secret")
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := <-probes; err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("probe %d: %v, want NOAUTH", i, err)
		}
	}
	got := lines()
	if len(got) != 2 || !strings.Contains(got[0], "failing (dial") || !strings.Contains(got[1], "still failing, now (NOAUTH") {
		t.Fatalf("outage log: %q, want a line when it failed to connect and one when it asked for a password", got)
	}
	m.Close() // miniredis reads its passwords unlocked while it serves
	m.RequireAuth("")
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	for err := range probes {
		if err == nil {
			break
		}
	}
	// The restart above may fail a probe in a new way before the server
	// serves again (a reset connection or dial, a command refused while
	// miniredis starts: about 1 run in 25 under the race detector on a
	// loaded machine): a new cause, named once.
	got = lines()
	last := len(got) - 1
	if last < 2 || !strings.Contains(got[last], "answers again") {
		t.Fatalf("outage log: %q, want a last line when it answered", got)
	}
	for _, l := range got[2:last] {
		if last > 4 || !strings.Contains(l, "still failing, now (") {
			t.Fatalf("outage log: %q, want at most a cause or two of the restart between the password's line and the answer's", got)
		}
	}
}

// Errors of changing kinds name each kind once, addresses and ports aside,
// and at most maxCauses per outage; a kind that comes back is not named
// again, nor is the breaker's own refusal.
func TestRedisOutageCausesAreBounded(t *testing.T) {
	var logged []string
	r := newTestRedis(t, "redis://"+closedPort(t), "gptest", nil, func(_ *BackendConfig, o *redisOptions) {
		o.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	})
	r.open.Store(true) // no probe: this test calls noteError alone
	r.recovering.Store(true)
	reset := func(port int) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{Port: port},
			Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	r.noteError(reset(40000))
	r.noteError(reset(40001))
	r.noteError(errBreakerOpen)
	r.noteError(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)})
	r.noteError(reset(40002))
	for i := range 10 {
		r.noteError(fmt.Errorf("cause %d", i))
	}
	if len(logged) != maxCauses || !strings.Contains(logged[0], "failing (read") ||
		!strings.Contains(logged[1], "now (read") || !strings.Contains(logged[2], "now (cause 0)") {
		t.Fatalf("outage log: %q", logged)
	}
	r.open.Store(false)
	r.endOutage()
	ended := r.since()
	r.since = func() time.Duration { return ended + flapWindow } // not one of outages that follow one another
	r.noteError(reset(40003))
	if len(logged) != maxCauses+2 || !strings.Contains(logged[maxCauses+1], "failing (read") {
		t.Fatalf("a new outage: %q", logged[maxCauses:])
	}
}

// Outages that follow one another within flapWindow (a Redis at maxclients
// refuses every new connection while the gateway's open ones still answer:
// each call on a new one failed, the next on an old one answered) are not
// logged one by one but counted in a line at most every flapWindow; one of
// them that lasts a second is said then. A probe logged about 700 lines a
// second, a start and an end for every failed call, for as long as it
// lasted.
func TestRedisFlappingOutagesAreCounted(t *testing.T) {
	var logged []string
	r := newTestRedis(t, "redis://"+closedPort(t), "gptest", nil, func(_ *BackendConfig, o *redisOptions) {
		o.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	})
	r.recovering.Store(true) // no probe: this test calls noteError alone
	var now atomic.Int64
	now.Store(int64(time.Hour))
	r.since = func() time.Duration { return time.Duration(now.Load()) }
	step := func(d time.Duration) { now.Add(int64(d)) }
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	flap := func(n int) {
		for range n {
			r.noteError(reset)
			step(time.Millisecond)
			r.noteError(reset)
			step(time.Millisecond)
			r.endOutage()
			step(50 * time.Millisecond)
		}
	}
	flap(1)
	if len(logged) != 2 || !strings.Contains(logged[0], "failing (write") || !strings.Contains(logged[1], "answers again") {
		t.Fatalf("the first outage: %q, want its start and its end", logged)
	}
	flap(100) // 5.3 s
	if len(logged) != 2 {
		t.Fatalf("100 outages within %v of the last one's end: %d lines, want none yet: %q", flapWindow, len(logged)-2, logged[2:])
	}
	flap(100) // past flapWindow since the first outage's end: said once
	if len(logged) != 3 || !strings.Contains(logged[2], "failed and answered again") {
		t.Fatalf("200 outages: %q, want one line counting them", logged[2:])
	}
	step(flapWindow)
	r.sayFlaps() // the heartbeat: the outages counted since are said, flapping or not
	if len(logged) != 4 || !strings.Contains(logged[3], "failed and answered again") {
		t.Fatalf("after the flapping: %q, want one line counting the rest", logged[2:])
	}
	counted := 0
	for _, l := range logged[2:] {
		var n, calls int
		if _, err := fmt.Sscanf(l[strings.Index(l, "again ")+len("again "):], "%d", &n); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if _, err := fmt.Sscanf(l[strings.Index(l, "(")+1:], "%d calls failed", &calls); err != nil || calls != 2*n {
			t.Fatalf("%q: %d calls failed, want %d (%v)", l, calls, 2*n, err)
		}
		counted += n
	}
	if counted != 200 {
		t.Fatalf("%q: %d outages counted, want 200", logged[2:], counted)
	}
	r.sayFlaps()
	if len(logged) != 4 {
		t.Fatalf("nothing more to say: %q", logged[4:])
	}

	// An outage that starts within flapWindow of the last one's end, and
	// lasts, is said once it has lasted flapLast, and its end too.
	flap(1) // flapWindow after the last: said
	if len(logged) != 6 {
		t.Fatalf("an outage %v after the last: %q, want its start and its end", flapWindow, logged[4:])
	}
	r.noteError(reset)
	step(flapLast - time.Millisecond)
	r.noteError(reset)
	if len(logged) != 6 {
		t.Fatalf("an outage younger than %v: %q", flapLast, logged[6:])
	}
	step(time.Millisecond)
	r.noteError(reset)
	step(time.Second)
	r.endOutage()
	if len(logged) != 8 || !strings.Contains(logged[6], "failing for 1s (write") || !strings.Contains(logged[7], "answers again after 2s; 3 calls") {
		t.Fatalf("an outage that lasted: %q, want its start, late, and its end", logged[6:])
	}
}
