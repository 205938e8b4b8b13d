package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goodput/goodput/internal/redistest"
	"github.com/prometheus/client_golang/prometheus"
)

// backendUp reads goodput_ratelimit_backend_up from reg.
// backendUpRegistry returns a registry holding r's metrics and its
// goodput_ratelimit_backend_up gauge, for backendUp.
func backendUpRegistry(t *testing.T, r *Redis) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, r.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.registerBackendUp(reg, r.Healthy); err != nil {
		t.Fatal(err)
	}
	return reg
}

// backendUp reads goodput_ratelimit_backend_up from reg.
func backendUp(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "goodput_ratelimit_backend_up" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no goodput_ratelimit_backend_up")
	return 0
}

// Redis out of memory (maxmemory reached, policy noeviction) refuses every
// admission (its first write is a SET, which Redis refuses then) but still
// runs what writes nothing or only deletes: a release (ZREM), a refusal.
// Neither shows that Redis can admit again: the outage is one outage, logged once when it starts, with
// backend_up 0 throughout, until an admission succeeds once memory is freed.
// (Every request that ended during the outage ended it, and the next
// admission started another: two log lines per request, and backend_up
// flickering to 1.)
func TestRedisOutOfMemoryIsOneOutage(t *testing.T) {
	srv := redistest.Start(t) // its memory limit is changed: a private server
	ts := []TenantConfig{
		tenant("acme", Limits{RPM: 6000, MaxConcurrency: 100}),
		tenant("full", Limits{RPM: 6000, MaxConcurrency: 1}),
	}
	var logMu sync.Mutex
	var logged []string
	lines := func() []string {
		logMu.Lock()
		defer logMu.Unlock()
		return append([]string(nil), logged...)
	}
	r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(_ *BackendConfig, o *redisOptions) {
		o.Logf = func(format string, args ...any) {
			logMu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			logMu.Unlock()
		}
	})
	reg := backendUpRegistry(t, r)
	ctx := context.Background()
	acme := Request{Tenant: "acme"}
	var held []Ticket
	for range 5 { // streams admitted before the outage, which end during it
		tk, d := admit(t, r, t0, acme)
		if !d.Allowed {
			t.Fatal(d)
		}
		held = append(held, tk)
	}
	if _, d := admit(t, r, t0, Request{Tenant: "full"}); !d.Allowed { // holds full's one slot to the end
		t.Fatal(d)
	}

	c := srv.Client()
	defer c.Close()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i, tk := range held {
		var d Decision
		if _, err := r.Admit(ctx, t0, &acme, &d); err == nil || !strings.Contains(err.Error(), "OOM") || !d.Allowed || d.Limit != limitBackend {
			t.Fatalf("%d: admission with Redis out of memory: err=%v d=%+v, want an OOM error and fail_open", i, err, d)
		}
		if r.Healthy() || backendUp(t, reg) != 0 {
			t.Fatalf("%d: backend up after a failed admission", i)
		}
		// Redis still runs a release (ZREM) when out of memory...
		if err := r.Reconcile(ctx, t0, tk, 0); err != nil {
			t.Fatalf("%d: release: %v", i, err)
		}
		// ...which does not show that it can admit.
		if r.Healthy() || backendUp(t, reg) != 0 {
			t.Fatalf("%d: a release ended the outage although admissions fail", i)
		}
		// Nor does a refusal, which writes nothing.
		if _, d := admit(t, r, t0, Request{Tenant: "full"}); d.Allowed || d.Limit != limitConcurrency {
			t.Fatalf("%d: %+v, want refused by full's concurrency limit", i, d)
		}
		if r.Healthy() || backendUp(t, reg) != 0 {
			t.Fatalf("%d: a refusal ended the outage although admissions fail", i)
		}
		// The heartbeat's renewals (ZADD) are refused.
		if err := r.heartbeat(t0, nil); err == nil || r.Healthy() {
			t.Fatalf("%d: heartbeat: %v, healthy %v", i, err, r.Healthy())
		}
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "failing") || !strings.Contains(got[0], "OOM") {
		t.Fatalf("outage log while Redis is out of memory: %q, want one line that it is failing", got)
	}

	// Memory freed: the next admission succeeds and ends the outage.
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, d := admit(t, r, t0, acme); !d.Allowed || d.Limit != limitNone {
		t.Fatalf("first admission after the outage: %+v", d)
	}
	if !r.Healthy() || backendUp(t, reg) != 1 {
		t.Fatal("backend still down after an admission succeeded")
	}
	got := lines()
	if len(got) != 2 || !strings.Contains(got[1], "answers again") {
		t.Fatalf("outage log: %q, want one line when it started and one when it ended", got)
	}
	// 5 admissions, 5 refused heartbeats: the releases and the refusals
	// are not failures.
	if !strings.Contains(got[1], "; 10 calls failed meanwhile") {
		t.Errorf("outage end: %q, want 10 calls failed", got[1])
	}
}

// After a failure that did not reach Redis (a timeout), any decision Redis
// makes ends the outage, a refusal too: only where Redis answered with errors
// (out of memory) does a refusal not show that it works.
func TestRedisRefusalEndsUnreachableOutage(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	r := newTestRedis(t, url, prefix, ts, nil)
	held, d := admit(t, r, t0, Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatal(d)
	}
	r.noteError(context.DeadlineExceeded) // one call timed out: not enough to open the breaker
	if r.Healthy() || r.open.Load() {
		t.Fatalf("healthy %v, breaker open %v", r.Healthy(), r.open.Load())
	}
	if _, d := admit(t, r, t0, Request{Tenant: "acme"}); d.Allowed || d.Limit != limitConcurrency || !r.Healthy() {
		t.Fatalf("%+v, healthy %v: want a refusal that ends the outage", d, r.Healthy())
	}
	reconcile(t, r, t0, held, 0)
}

// An outage in which Redis was out of reach ends with its first answer to
// any call, not only an admission: with long streams and no new request,
// a release ends it (it lasted as long as no admission came).
func TestRedisReleaseEndsUnreachableOutage(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 2})}
	r := newTestRedis(t, url, prefix, ts, nil)
	held, d := admit(t, r, t0, Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatal(d)
	}
	r.noteError(context.DeadlineExceeded) // one call timed out
	if r.Healthy() {
		t.Fatal("healthy after a failed call")
	}
	reconcile(t, r, t0, held, 0)
	if !r.Healthy() {
		t.Fatal("a release Redis answered did not end an outage of a Redis out of reach")
	}
}
