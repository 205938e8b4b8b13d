package ratelimit

import (
	"fmt"
	"net"
	"os"
	"strings"
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
	r.noteError(reset(40003))
	if len(logged) != maxCauses+2 || !strings.Contains(logged[maxCauses+1], "failing (read") {
		t.Fatalf("a new outage: %q", logged[maxCauses:])
	}
}
