package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A Redis that takes no writes (CLIENT PAUSE WRITE, as during a manual
// FAILOVER) but answers PING is one outage until it takes writes again:
// admissions fail, the probe's writes fail with them, backend_up stays 0, and
// the outage is logged once when it starts and once when it ends. (The probe
// asked for PING, which Redis answers during the pause, and ended the outage
// every few hundred milliseconds while no admission could succeed: six false
// recoveries in 8 s, backend_up 1.)
func TestRedisWritePauseIsOneOutage(t *testing.T) {
	srv := redistest.Start(t) // paused: a private server
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000, MaxConcurrency: 100})}
	pr := newProbedRedis(t, "redis://"+srv.Addr(), ts, 100*time.Millisecond)
	r, probes, lines := pr.Redis, pr.probes, pr.lines
	reg := backendUpRegistry(t, r)
	ctx := context.Background()
	acme := Request{Tenant: "acme"}
	if _, d := admit(t, r, t0, acme); !d.Allowed {
		t.Fatal(d)
	}

	// The test's own client waits longer than the srv.Client default: a
	// loaded machine must not fail the CLIENT commands.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
	defer c.Close()
	if err := c.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	defer func() {
		if !unpaused {
			c.Do(ctx, "CLIENT", "UNPAUSE")
		}
	}()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING during the pause: %v", err)
	}
	// Admissions wait out the timeout until the breaker opens, then fail at once.
	for i := 0; !r.open.Load(); i++ {
		var d Decision
		if _, err := r.Admit(ctx, t0, &acme, &d); err == nil || !d.Allowed || d.Limit != limitBackend {
			t.Fatalf("admission %d during the pause: err=%v d=%+v, want fail_open", i, err, d)
		}
		if i == 10 {
			t.Fatal("the breaker did not open")
		}
	}
	for i := range 3 {
		if err := <-probes; err == nil {
			t.Fatalf("probe %d succeeded while Redis takes no writes", i)
		}
		var d Decision
		if _, err := r.Admit(ctx, t0, &acme, &d); !errors.Is(err, errBreakerOpen) || !d.Allowed || d.Limit != limitBackend {
			t.Fatalf("after probe %d: err=%v d=%+v, want the breaker open and fail_open", i, err, d)
		}
		if r.Healthy() || backendUp(t, reg) != 0 {
			t.Fatalf("after probe %d: backend up while Redis takes no writes", i)
		}
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "failing") {
		t.Fatalf("outage log during the pause: %q, want one line that it is failing", got)
	}

	if err := c.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused = true
	for err := range probes {
		if err == nil {
			break // the breaker closes
		}
	}
	if _, d := admit(t, r, t0, acme); !d.Allowed || d.Limit != limitNone {
		t.Fatalf("first admission after the pause: %+v", d)
	}
	if !r.Healthy() || backendUp(t, reg) != 1 {
		t.Fatal("backend down after an admission succeeded")
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "answers again") {
		t.Fatalf("outage log: %q, want one line when it started and one when it ended", got)
	}
}
