package ratelimit

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A release that Redis does not answer holds its caller until the caller's
// context ends, not for the whole timeout: a shutdown stops waiting for it.
// The caller's end is not counted as a failure of Redis (no backend error,
// Redis still healthy), and the lease is left to the heartbeat, which
// releases it once Redis answers again.
func TestRedisReconcileStopsWaitingWhenItsContextEnds(t *testing.T) {
	target, prefix := redisTarget(t)
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rl := testenv.StartRedisRelay(t, u.Host)
	u.Host = rl.Addr()
	const timeout = 5 * time.Second
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	r := newTestRedis(t, u.String(), prefix, ts, func(c *BackendConfig, _ *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(timeout)
	})
	other := newTestRedis(t, target, prefix, ts, nil) // straight to Redis
	m, err := newMetrics(prometheus.NewRegistry(), r.Name())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(r, m, 0)
	g.clk = clock{now: func() time.Time { return t0 }, sleep: sleepCtx}
	g.SetTenants(t0, ts)

	var d Decision
	tk, _, err := g.Admit(context.Background(), &Request{Tenant: "acme"}, &d)
	if err != nil || !d.Allowed {
		t.Fatalf("admit: %v %+v", err, d)
	}
	rl.Freeze() // Redis stops answering
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = g.Reconcile(ctx, tk, 0)
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("the release held its caller %v after its context ended (timeout %v)", took, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	if n := testutil.ToFloat64(m.backendErrors); n != 0 {
		t.Errorf("%v backend errors counted for a release its caller stopped waiting for", n)
	}
	if !r.Healthy() {
		t.Error("Redis unhealthy after a release its caller stopped waiting for")
	}
	if _, d := admit(t, other, t0, Request{Tenant: "acme"}); d.Allowed {
		t.Fatal("slot free although its release never reached Redis")
	}
	// Redis answers again: the heartbeat releases the lease (on a new
	// connection: the abandoned call's still waits for its reply).
	rl.Thaw()
	if err := r.heartbeat(t0, nil); err != nil {
		t.Fatal(err)
	}
	if _, d := admit(t, other, t0, Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("slot still held after the heartbeat: %+v", d)
	}
}
