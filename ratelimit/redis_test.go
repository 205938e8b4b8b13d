package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

func rawClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// Three replicas sharing one Redis hold a tenant to its global rpm: one
// minute of injected time, 30 requests a second offered (10 per replica, at
// random moments of each 100ms step, the three replicas deciding at once),
// against 600 rpm with a burst of 10.
func TestRedisReplicasShareRPM(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{RPM: 600, Burst: 10})}
	var reps [3]*Redis
	for i := range reps {
		reps[i] = newTestRedis(t, url, prefix, ts, nil)
	}
	var allowed [3]atomic.Int64
	errs := make(chan error, 3)
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 600 {
		var wg sync.WaitGroup
		for i, r := range reps {
			wg.Add(1)
			now := t0.Add(time.Duration(step)*100*time.Millisecond + time.Duration(rng.IntN(100_000))*time.Microsecond)
			go func() {
				defer wg.Done()
				var d Decision
				tk, err := r.Admit(context.Background(), now, &Request{Tenant: "acme"}, &d)
				if err == nil && d.Allowed {
					allowed[i].Add(1)
					err = r.Reconcile(context.Background(), now, tk, 0)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	total := allowed[0].Load() + allowed[1].Load() + allowed[2].Load()
	t.Logf("allowed per replica %d, %d, %d; total %d of 1800 offered (limit 600/min, burst 10)",
		allowed[0].Load(), allowed[1].Load(), allowed[2].Load(), total)
	if total < 570 || total > 630 {
		t.Fatalf("%d requests admitted in one minute, want 600 ± 5%%", total)
	}
	// Which replica wins a step depends on the order Redis runs the three
	// scripts in (goroutine scheduling), so shares are uneven; each must take part.
	for i := range allowed {
		if allowed[i].Load() < 10 {
			t.Errorf("replica %d admitted only %d", i, allowed[i].Load())
		}
	}
}

// Every request is estimated at 50 tokens but streams 500: the reconcile
// charges make the tenant stop at its tpm, although the estimates alone would
// let ten times as many through. Three replicas, three minutes of injected
// time, a request every 100ms lasting 2s.
func TestRedisTPMStopsStreamingTenant(t *testing.T) {
	url, prefix := redisTarget(t)
	const tpm = 6000
	ts := []TenantConfig{tenant("acme", Limits{TPM: tpm})}
	var reps [3]*Redis
	for i := range reps {
		reps[i] = newTestRedis(t, url, prefix, ts, nil)
	}
	type open struct {
		r   *Redis
		tk  Ticket
		end time.Time
	}
	var inflight []open
	var admitted, rejected int64
	var firstReject time.Duration = -1
	const steps = 1800
	for step := range steps {
		now := t0.Add(time.Duration(step) * 100 * time.Millisecond)
		for len(inflight) > 0 && !inflight[0].end.After(now) {
			reconcile(t, inflight[0].r, inflight[0].end, inflight[0].tk, 500)
			inflight = inflight[1:]
		}
		r := reps[step%3]
		tk, d := admit(t, r, now, Request{Tenant: "acme", EstTokens: 50})
		if !d.Allowed {
			if d.Limit != limitTokens {
				t.Fatalf("rejected by %v", d.Limit)
			}
			rejected++
			if firstReject < 0 {
				firstReject = now.Sub(t0)
			}
			continue
		}
		admitted++
		inflight = append(inflight, open{r, tk, now.Add(2 * time.Second)})
	}
	used := admitted * 500
	// Budget over 3 minutes: a full bucket plus 3 minutes of refill; requests
	// in flight when the bucket empties (at most 20, each charged 450 late)
	// overshoot it once.
	budget := int64(tpm + 3*tpm)
	t.Logf("admitted %d (%d tokens), rejected %d, first rejection at %v; budget %d tokens", admitted, used, rejected, firstReject, budget)
	if used > budget+20*450 {
		t.Fatalf("%d tokens used, budget %d (+%d in flight)", used, budget, 20*450)
	}
	if used < budget*8/10 {
		t.Fatalf("%d tokens used, budget %d: the limiter starves the tenant", used, budget)
	}
	if firstReject < 0 || firstReject > 30*time.Second {
		t.Fatalf("first rejection at %v", firstReject)
	}
}

// One key per limit, all under the tenant's hash tag (one Cluster slot).
func TestRedisKeyLayout(t *testing.T) {
	url, prefix := redisTarget(t)
	ten := tenant("acme", Limits{RPM: 10, TPM: 1000, MaxConcurrency: 3})
	ten.Keys = []KeyConfig{{ID: "k1", SHA256: hashA, Limits: Limits{RPM: 5}}}
	ten.Models = map[string]Limits{"meta/llama:70b": {TPM: 500, MaxConcurrency: 1}}
	r := newTestRedis(t, url, prefix, []TenantConfig{ten}, nil)
	admit(t, r, t0, Request{Tenant: "acme", KeyID: "k1", Model: "meta/llama:70b", EstTokens: 10})
	keys, err := rawClient(t, url).Keys(context.Background(), "{"+prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	tag := "{" + prefix + ":acme}:"
	want := []string{tag + "c", tag + "k:k1:r", tag + "m:meta/llama:70b:c", tag + "m:meta/llama:70b:t", tag + "r", tag + "t"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys\n%q\nwant\n%q", keys, want)
	}
	for _, k := range keys {
		if hashTag(k) != "{"+prefix+":acme}" {
			t.Errorf("%s: hash tag %s", k, hashTag(k))
		}
	}
}

type keyState map[string]string

func snapshot(t *testing.T, c *redis.Client, prefix string) keyState {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "{"+prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	s := keyState{}
	for _, k := range keys {
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			s[k] = c.Get(ctx, k).Val()
		case "zset":
			s[k] = fmt.Sprint(c.ZRangeWithScores(ctx, k, 0, -1).Val())
		default:
			s[k] = typ
		}
	}
	return s
}

// A rejected request leaves every key exactly as it was.
func TestRedisRejectionWritesNothing(t *testing.T) {
	url, prefix := redisTarget(t)
	ten := tenant("acme", Limits{RPM: 100, TPM: 10000, MaxConcurrency: 5})
	ten.Models = map[string]Limits{"m": {MaxConcurrency: 1}, "small": {TPM: 100}}
	r := newTestRedis(t, url, prefix, []TenantConfig{ten}, nil)
	c := rawClient(t, url)
	if _, d := admit(t, r, t0, Request{Tenant: "acme", Model: "m", EstTokens: 10}); !d.Allowed {
		t.Fatal(d)
	}
	before := snapshot(t, c, prefix)
	for i, req := range []Request{
		{Tenant: "acme", Model: "m", EstTokens: 10},      // model concurrency
		{Tenant: "acme", Model: "small", EstTokens: 101}, // too large for the model
		{Tenant: "acme", EstTokens: 10001},               // too large for the tenant
	} {
		if _, d := admit(t, r, t0.Add(time.Second), req); d.Allowed {
			t.Fatalf("%d: admitted", i)
		}
		if after := snapshot(t, c, prefix); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%d: a rejection changed Redis:\nbefore %v\nafter  %v", i, before, after)
		}
	}
}

// On the server's clock (the production mode) decisions follow wall time.
func TestRedisServerClock(t *testing.T) {
	url, prefix := redisTarget(t)
	r := newTestRedis(t, url, prefix, []TenantConfig{tenant("acme", Limits{RPM: 60, Burst: 2})},
		func(_ *BackendConfig, o *redisOptions) { o.ClientTime = false })
	ignored := time.Unix(0, 0) // the caller's now is not used
	for i := range 2 {
		if _, d := admit(t, r, ignored, Request{Tenant: "acme"}); !d.Allowed {
			t.Fatalf("%d: %+v", i, d)
		}
	}
	_, d := admit(t, r, ignored, Request{Tenant: "acme"})
	if d.Allowed || d.RetryAfter <= 500*time.Millisecond || d.RetryAfter > time.Second {
		t.Fatalf("%+v, want a rejection with a retry just under 1s", d)
	}
}

// Scripts flushed from Redis (a restart, SCRIPT FLUSH) are sent again.
func TestRedisScriptReload(t *testing.T) {
	url, prefix := redisTarget(t)
	if realRedis() {
		t.Skip("SCRIPT FLUSH would disturb other users of the shared Redis")
	}
	r := newTestRedis(t, url, prefix, []TenantConfig{tenant("acme", Limits{RPM: 60, MaxConcurrency: 2})}, nil)
	tk, _ := admit(t, r, t0, Request{Tenant: "acme"})
	if err := rawClient(t, url).ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, t0, tk, 0)
	if _, d := admit(t, r, t0, Request{Tenant: "acme"}); !d.Allowed || d.Requests.Remaining != 58 || d.Concurrency.Remaining != 1 {
		t.Fatalf("%+v", d)
	}
}

// A replica that dies holding a slot frees it when the lease expires; a live
// replica renews its leases.
func TestRedisLeases(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	ttl := func(c *BackendConfig, _ *redisOptions) { c.Redis.LeaseTTL = cfgtypes.Duration(2 * time.Second) }
	crashed := newTestRedis(t, url, prefix, ts, ttl)
	other := newTestRedis(t, url, prefix, ts, ttl)
	if _, d := admit(t, crashed, t0, Request{Tenant: "acme"}); !d.Allowed {
		t.Fatal(d)
	}
	if _, d := admit(t, other, t0.Add(1999*time.Millisecond), Request{Tenant: "acme"}); d.Allowed || d.Limit != limitConcurrency {
		t.Fatalf("slot not held: %+v", d)
	}
	tk, d := admit(t, other, t0.Add(2001*time.Millisecond), Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatalf("expired lease still counted: %+v", d)
	}
	// other renews at +3.5s: its lease now ends at +5.5s instead of +4s.
	if err := other.heartbeat(t0.Add(3500*time.Millisecond), nil); err != nil {
		t.Fatal(err)
	}
	if _, d := admit(t, crashed, t0.Add(5*time.Second), Request{Tenant: "acme"}); d.Allowed {
		t.Fatal("renewed lease not counted")
	}
	// Released leases are not recreated by a renewal.
	reconcile(t, other, t0.Add(5*time.Second), tk, 0)
	if err := other.heartbeat(t0.Add(5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if _, d := admit(t, crashed, t0.Add(5*time.Second), Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("released lease still counted: %+v", d)
	}
}

// The renewal loop keeps a slot held past its lease lifetime (wall clock).
func TestRedisLeaseRefreshLoop(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	edit := func(c *BackendConfig, o *redisOptions) {
		c.Redis.LeaseTTL = cfgtypes.Duration(time.Second)
		o.ClientTime, o.LeaseRefresh = false, 100*time.Millisecond
	}
	holder := newTestRedis(t, url, prefix, ts, edit)
	other := newTestRedis(t, url, prefix, ts, edit)
	tk, d := admit(t, holder, time.Now(), Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatal(d)
	}
	time.Sleep(1300 * time.Millisecond)
	if _, d := admit(t, other, time.Now(), Request{Tenant: "acme"}); d.Allowed {
		t.Fatal("lease expired although its holder renews it")
	}
	reconcile(t, holder, time.Now(), tk, 0)
	if _, d := admit(t, other, time.Now(), Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("%+v", d)
	}
}

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// blackhole accepts connections and never answers.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// Margin allowed beyond the configured timeout for a decision against a dead
// Redis: scheduling on a busy shared machine under -race. (Measured alone: the
// timeout plus about 1ms.)
const deadMargin = 250 * time.Millisecond

func TestRedisFailurePolicy(t *testing.T) {
	const timeout = 50 * time.Millisecond
	for _, dead := range []struct {
		name string
		addr func(*testing.T) string
	}{{"refused", closedPort}, {"silent", blackhole}} {
		for _, policy := range []string{FailOpen, FailClosed} {
			t.Run(dead.name+"/"+policy, func(t *testing.T) {
				ts := []TenantConfig{tenant("acme", Limits{RPM: 60, TPM: 1000, MaxConcurrency: 2})}
				r := newTestRedis(t, "redis://"+dead.addr(t), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
					c.OnBackendError, c.Redis.Timeout = policy, cfgtypes.Duration(timeout)
					o.ClientTime = false
				})
				reg := prometheus.NewRegistry()
				m, err := newMetrics(reg, r.Name())
				if err != nil {
					t.Fatal(err)
				}
				g := newGate(r, m, time.Second)
				g.SetTenants(time.Now(), ts)
				const n = 8
				var slowest time.Duration
				slow := 0
				for range n {
					var d Decision
					start := time.Now()
					tk, queued, err := g.Admit(context.Background(), &Request{Tenant: "acme", EstTokens: 10}, &d)
					took := time.Since(start)
					slowest = max(slowest, took)
					if took >= timeout/2 {
						slow++
					}
					if err == nil || errors.Is(err, ErrUnknownTenant) || queued != 0 || d.Limit != limitBackend {
						t.Fatalf("err=%v queued=%v d=%+v", err, queued, d)
					}
					if policy == FailOpen {
						if !d.Allowed || d.statusCode() != 200 {
							t.Fatalf("fail_open rejected: %+v", d)
						}
					} else if d.Allowed || d.statusCode() != 503 || d.RetryAfter != backendRetryHint {
						t.Fatalf("fail_closed: %+v", d)
					}
					if err := g.Reconcile(context.Background(), tk, 20); (err != nil) != (policy == FailOpen) {
						t.Fatalf("reconcile: %v", err) // fail_open tickets try to charge the usage
					}
				}
				t.Logf("slowest decision %v (timeout %v); %d of %d waited", slowest, timeout, slow, n)
				if slowest > timeout+deadMargin {
					t.Errorf("a decision took %v with a %v timeout", slowest, timeout)
				}
				// The breaker opens after breakerAfter failed calls (a refused
				// dial at once): later decisions do not wait.
				if slow > breakerAfter {
					t.Errorf("%d of %d decisions waited for a dead Redis; the breaker should open after %d", slow, n, breakerAfter)
				}
				decision := "denied"
				wantErrs := float64(n)
				if policy == FailOpen {
					decision, wantErrs = "allowed", 2*n // reconciles fail too
				}
				if got := testutil.ToFloat64(m.decisions.WithLabelValues("acme", "backend", decision)); got != n {
					t.Errorf("decisions{backend,%s} = %v, want %d", decision, got, n)
				}
				if got := testutil.ToFloat64(m.backendErrors); got != wantErrs {
					t.Errorf("backend errors = %v, want %v", got, wantErrs)
				}
			})
		}
	}
}

// Redis stops mid-run and comes back: decisions follow the policy while it is
// down, each within the timeout, and normal service resumes well within a
// second of its return; usage admitted while it was down is charged then.
func TestRedisOutageAndRecovery(t *testing.T) {
	m := miniredis.RunT(t) // this test must stop the server: always in-process
	// Longer than the default: a live miniredis compiling scripts under -race
	// can take tens of milliseconds.
	const timeout = 250 * time.Millisecond
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000, TPM: 60000, MaxConcurrency: 100})}
	var logMu sync.Mutex
	var logged []string
	r := newTestRedis(t, "redis://"+m.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(timeout)
		o.ClientTime = false
		o.Logf = func(format string, args ...any) {
			logMu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			logMu.Unlock()
		}
	})
	ctx := context.Background()
	req := Request{Tenant: "acme", EstTokens: 100}
	var d Decision
	for range 5 { // warm the pool: several connections
		if _, err := r.Admit(ctx, time.Now(), &req, &d); err != nil || !d.Allowed {
			t.Fatal(err, d)
		}
	}
	held, err := r.Admit(ctx, time.Now(), &req, &d)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}

	m.Close()
	if !r.Healthy() {
		t.Fatal("unhealthy before the outage")
	}
	var openTicket Ticket
	var slowest time.Duration
	for i := range 60 { // more failed dials than the pool size: go-redis's dial breaker opens
		start := time.Now()
		tk, err := r.Admit(ctx, time.Now(), &req, &d)
		slowest = max(slowest, time.Since(start))
		if err == nil || !d.Allowed || d.Limit != limitBackend {
			t.Fatalf("%d: err=%v d=%+v, want fail_open", i, err, d)
		}
		if i == 0 {
			openTicket = tk
		}
	}
	if err := r.Reconcile(ctx, time.Now(), held, 100); err == nil {
		t.Fatal("reconcile succeeded with Redis down")
	}
	if slowest > timeout+deadMargin {
		t.Errorf("a decision took %v while Redis was down (timeout %v)", slowest, timeout)
	}
	if r.Healthy() {
		t.Error("healthy while Redis is down")
	}

	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	var recovered time.Duration
	for {
		_, err := r.Admit(ctx, time.Now(), &req, &d)
		if err == nil {
			recovered = time.Since(back)
			break
		}
		if time.Since(back) > 5*time.Second {
			t.Fatalf("not recovered 5s after Redis returned: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("recovered %v after Redis returned", recovered)
	if !r.Healthy() {
		t.Error("unhealthy after Redis returned")
	}
	if recovered > time.Second {
		t.Errorf("recovery took %v, want under a second", recovered)
	}
	if !d.Allowed || d.Limit != limitNone {
		t.Fatalf("%+v", d)
	}
	before := d.Tokens.Remaining
	// The fail-open admission is charged its real usage now (it was charged nothing).
	if err := r.Reconcile(ctx, time.Now(), openTicket, 3000); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admit(ctx, time.Now(), &Request{Tenant: "acme"}, &d); err != nil {
		t.Fatal(err)
	}
	if got := before - d.Tokens.Remaining; got < 2900 || got > 3000 {
		t.Fatalf("fail-open usage charged %d tokens, want 3000 (less a little refill)", got)
	}
	// One line when the outage starts and one when it ends, not one per
	// failed call.
	logMu.Lock()
	defer logMu.Unlock()
	if len(logged) != 2 || !strings.Contains(logged[0], "failing") || !strings.Contains(logged[0], "fail_open") ||
		!strings.Contains(logged[1], "answers again") || !strings.Contains(logged[1], "calls failed meanwhile") {
		t.Fatalf("outage log: %q", logged)
	}
}

// A caller that gives up (the client went away) is not a backend failure.
func TestRedisCallerCanceled(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 60})}
	r := newTestRedis(t, "redis://"+blackhole(t), "gptest", ts, nil)
	m, err := newMetrics(prometheus.NewRegistry(), r.Name())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(r, m, 0)
	g.SetTenants(t0, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var d Decision
	_, _, err = g.Admit(ctx, &Request{Tenant: "acme"}, &d)
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.Limit != limitNone {
		t.Fatalf("err %v, %+v", err, d)
	}
	if n := testutil.ToFloat64(m.backendErrors); n != 0 {
		t.Errorf("%v backend errors counted", n)
	}
}

func TestNewRedisErrors(t *testing.T) {
	if _, err := newRedis(BackendConfig{Backend: backendRedis, Redis: RedisConfig{URL: "nope://"}}, nil, redisOptions{}); err == nil ||
		!strings.Contains(err.Error(), "ratelimit.redis.url") {
		t.Fatalf("err = %v", err)
	}
	r, err := newRedis(BackendConfig{Backend: backendRedis, Redis: RedisConfig{URL: "redis://127.0.0.1:1", Cluster: true}}, nil, redisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Close() != nil || r.Close() != nil {
		t.Fatal("Close")
	}
}

func TestNewGateFromConfig(t *testing.T) {
	url, prefix := redisTarget(t)
	for _, cfg := range []BackendConfig{
		{},
		{Backend: backendRedis, Redis: RedisConfig{URL: url, KeyPrefix: prefix}, MaxQueueWait: cfgtypes.Duration(time.Second)},
	} {
		reg := prometheus.NewRegistry()
		g, err := New(cfg, []TenantConfig{tenant("acme", Limits{RPM: 1})}, reg)
		if err != nil {
			t.Fatal(err)
		}
		if g.limiter().Name() != cfg.withDefaults().Backend || g.MaxWait() != cfg.MaxQueueWait.D() {
			t.Errorf("%s: %v", g.limiter().Name(), g.MaxWait())
		}
		var d Decision
		if _, _, err := g.Admit(context.Background(), &Request{Tenant: "acme"}, &d); err != nil || !d.Allowed {
			t.Fatal(err, d)
		}
		if got := testutil.ToFloat64(g.met.decisions.WithLabelValues("acme", "none", "allowed")); got != 1 {
			t.Errorf("allowed count %v", got)
		}
		// backend_up exists for Redis only, and says 1 while it answers.
		up := `
# HELP goodput_ratelimit_backend_up 1 while rate-limit decisions reach the backend, 0 while it fails and on_backend_error decides.
# TYPE goodput_ratelimit_backend_up gauge
goodput_ratelimit_backend_up{backend="redis"} 1
`
		if cfg.Backend != backendRedis {
			up = ""
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(up), "goodput_ratelimit_backend_up"); err != nil {
			t.Errorf("%s: %v", cfg.withDefaults().Backend, err)
		}
		g.Close()
	}
	if _, err := New(BackendConfig{Backend: "x"}, nil, nil); err == nil {
		t.Error("invalid backend accepted")
	}
}

// On a real three-node Redis Cluster, every key of a tenant lives in one
// slot (one script call per decision is legal there), tenants spread over
// the nodes, and concurrency leases are renewed per slot.
func TestRedisClusterLayout(t *testing.T) {
	testenv.Long(t, "a Redis Cluster")
	nodes, url := cluster.Get(t)
	ctx := context.Background()
	// Find two tenant names whose hash tags land on different nodes.
	nodeOf := func(name string) int {
		c := nodes[0].Client()
		defer c.Close()
		slot, err := c.ClusterKeySlot(ctx, "{gptest:"+name+"}:r").Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(slot) * len(nodes) / 16384
	}
	a, b := "acme", ""
	for _, n := range []string{"beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"} {
		if nodeOf(n) != nodeOf(a) {
			b = n
			break
		}
	}
	if b == "" {
		t.Fatal("no second tenant on another node")
	}
	var ts []TenantConfig
	for _, name := range []string{a, b} {
		ten := tenant(name, Limits{RPM: 100, TPM: 10000, MaxConcurrency: 5})
		ten.Keys = []KeyConfig{{ID: "k1", SHA256: hashA, Limits: Limits{RPM: 50}}}
		ten.Models = map[string]Limits{"m": {TPM: 500, MaxConcurrency: 2}}
		ts = append(ts, ten)
	}
	r := newTestRedis(t, url, "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Cluster = true
		c.Redis.LeaseTTL = cfgtypes.Duration(time.Second)
		o.LeaseRefresh = 100 * time.Millisecond
	})
	var held []Ticket
	for _, name := range []string{a, b} {
		tk, d := admit(t, r, t0, Request{Tenant: name, KeyID: "k1", Model: "m", EstTokens: 10})
		if !d.Allowed {
			t.Fatalf("%s: %+v", name, d)
		}
		held = append(held, tk)
	}
	for i, s := range nodes {
		c := s.Client()
		keys, err := c.Keys(ctx, "*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			tag := hashTag(k)
			if want := "{gptest:" + a + "}"; tag != want && tag != "{gptest:"+b+"}" {
				t.Errorf("node %d: key %s outside the tenants' tags", i, k)
			}
			name := strings.TrimSuffix(strings.TrimPrefix(tag, "{gptest:"), "}")
			if nodeOf(name) != i {
				t.Errorf("key %s on node %d, its slot belongs to node %d", k, i, nodeOf(name))
			}
		}
		t.Logf("node %d: %d keys", i, len(keys))
	}
	// The leases outlive their 1s TTL because the loop renews them.
	time.Sleep(1500 * time.Millisecond)
	for _, name := range []string{a, b} {
		c := nodes[nodeOf(name)].Client()
		n, err := c.ZCard(ctx, "{gptest:"+name+"}:c").Result()
		c.Close()
		if err != nil || n != 1 {
			t.Fatalf("%s: %d leases after 1.5s (err %v), want 1 renewed", name, n, err)
		}
	}
	for _, tk := range held {
		reconcile(t, r, t0, tk, 10)
	}
}
