package ratelimit

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/redistest"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// An outage the breaker did not open for (one call timed out: a Redis that
// paused for half a second) ends at the next heartbeat once Redis answers,
// on a replica that decides nothing meanwhile: a probe found backend_up at
// 0, and the paging alert firing, for ten minutes on an idle replica after
// a blip, since only a call could end it.
func TestRedisQuietOutageEndsAtTheHeartbeat(t *testing.T) {
	url, _ := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000})} // no concurrency limit: no lease for the heartbeat to renew
	pr := newProbedRedis(t, url, ts, 0, func(_ *BackendConfig, o *redisOptions) {
		o.LeaseRefresh = 10 * time.Millisecond
	})
	r := pr.Redis
	tk, d := admit(t, r, t0, Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatal(d)
	}
	reconcile(t, r, t0, tk, 0)
	r.noteError(context.DeadlineExceeded) // one call timed out: not enough to open the breaker
	if r.Healthy() || r.open.Load() {
		t.Fatalf("healthy %v, breaker open %v: want an outage with the breaker closed", r.Healthy(), r.open.Load())
	}
	pr.waitProbed(t, "Redis answered again")
	if !r.Healthy() {
		t.Fatal("still down after the heartbeat's check")
	}
	if !slices.ContainsFunc(pr.lines(), func(l string) bool { return strings.Contains(l, "answers again (the heartbeat's check)") }) {
		t.Errorf("log %q: want the outage's end by the heartbeat's check", pr.lines())
	}
}

// A request's token correction that Redis did not take (Redis out of
// reach as the request ended) is made once Redis answers again: a probe
// found a tenant refused for up to a minute after a request charged 525
// tokens at admission used 4, its refund lost in a blip of Redis.
func TestRedisTokenCorrectionMadeAfterAnOutage(t *testing.T) {
	m := miniredis.RunT(t) // closed and restarted with its data: in-process
	ts := []TenantConfig{tenant("acme", Limits{TPM: 1000})}
	pr := newProbedRedis(t, "redis://"+m.Addr(), ts, 250*time.Millisecond)
	r := pr.Redis
	tk, d := admit(t, r, t0, Request{Tenant: "acme", EstTokens: 900})
	if !d.Allowed {
		t.Fatal(d)
	}
	m.Close()
	if err := r.Reconcile(context.Background(), t0, tk, 4); err == nil {
		t.Fatal("a correction answered by a closed Redis")
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	pr.waitProbed(t, "Redis came back")
	r.retryFixes() // the heartbeat's, run here (renewal is off in tests)
	r.leaseMu.Lock()
	left := len(r.fixes)
	r.leaseMu.Unlock()
	if left != 0 {
		t.Fatalf("%d corrections still waiting after Redis answered", left)
	}
	// 4 of the 1000 used: 900 fit again, unless the 896 were never refunded.
	tk2, d := admit(t, r, t0, Request{Tenant: "acme", EstTokens: 900})
	if !d.Allowed {
		t.Fatalf("%+v: the refund of the request that ended in the outage was lost", d.Tokens)
	}
	reconcile(t, r, t0, tk2, 900)
	// Made once: a second heartbeat has nothing to send.
	r.retryFixes()
	if _, d := admit(t, r, t0, Request{Tenant: "acme", EstTokens: 200}); d.Allowed {
		t.Fatalf("%+v: 904 of 1000 used, yet 200 more fit", d.Tokens)
	}
}

// A correction whose reply was lost may have run: it is not sent again (a
// review found the +400 of a request charged twice when it was).
func TestRedisTokenCorrectionNotMadeTwice(t *testing.T) {
	r, p, tk := admittedBehindRelay(t, reconcileScript)
	p.DropReplies(true)
	if err := r.Reconcile(context.Background(), time.Now(), tk, 500); err == nil { // +400, its reply lost
		t.Fatal("a correction whose reply was lost was taken as made")
	}
	p.DropReplies(false)
	r.retryFixes()
	r.retryFixes()
	r.leaseMu.Lock()
	left := len(r.fixes)
	r.leaseMu.Unlock()
	if left != 0 {
		t.Fatalf("%d corrections still waiting", left)
	}
	// 500 used of 1000 (a few refilled since): about 499 left after this 1.
	_, d := admit(t, r, time.Now(), Request{Tenant: "acme", EstTokens: 1})
	if !d.Allowed || d.Tokens.Remaining < 450 || d.Tokens.Remaining > 560 {
		t.Fatalf("%+v: want about 499 tokens left, the +400 made once", d.Tokens)
	}
}

// admittedBehindRelay starts a Redis behind a relay that can drop its
// replies (the call runs, its answer never comes), a gate on it (a 200 ms
// timeout, a tenant of 1,000 tokens a minute), and admits a request of 100
// tokens. Redis knows script (as after a first call of it): an EVALSHA
// whose reply is lost runs it.
func admittedBehindRelay(t *testing.T, script *redis.Script) (*Redis, *testenv.RedisRelay, Ticket) {
	t.Helper()
	srv := redistest.Start(t)
	p := testenv.StartRedisRelay(t, srv.Addr())
	ts := []TenantConfig{tenant("acme", Limits{TPM: 1000})}
	r := newTestRedis(t, "redis://"+p.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(200 * time.Millisecond)
		o.ClientTime = false
	})
	tk, d := admit(t, r, time.Now(), Request{Tenant: "acme", EstTokens: 100})
	if !d.Allowed {
		t.Fatal(d)
	}
	c := srv.Client()
	defer c.Close()
	if err := script.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	return r, p, tk
}

// A stream's extra charge whose reply was lost may have run: it counts as
// charged, and the request's end does not charge it again (a review found
// the 300 tokens of such a chunk charged twice).
func TestRedisExtraChargeNotMadeTwice(t *testing.T) {
	r, p, tk := admittedBehindRelay(t, extendScript)
	p.DropReplies(true)
	r.extend(time.Now(), &tk, 300)
	for tk.rt.growing.Load() { // the chunk's goroutine, until its call timed out
		time.Sleep(5 * time.Millisecond)
	}
	p.DropReplies(false)
	reconcile(t, r, time.Now(), tk, 400) // it used the 100 and the 300
	_, d := admit(t, r, time.Now(), Request{Tenant: "acme", EstTokens: 1})
	if !d.Allowed || d.Tokens.Remaining < 550 || d.Tokens.Remaining > 660 {
		t.Fatalf("%+v: want about 599 tokens left, the 300 charged once", d.Tokens)
	}
}
