package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// firstAnswer admits req with r until Redis answers (decisions meanwhile
// follow fail_open and hold no lease), and returns that decision, its ticket
// and how long it took.
func firstAnswer(t *testing.T, r *Redis, now func() time.Time, req Request) (Ticket, Decision, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		var d Decision
		tk, err := r.Admit(context.Background(), now(), &req, &d)
		if err == nil {
			return tk, d, time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no answer from Redis 10s after it came back: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Requests that end while Redis is out of reach cannot release their
// concurrency slots; the first heartbeat that reaches Redis does, before the
// first decision once it is back. (They held the slots for the whole 30s
// lease: a tenant with max_concurrency 20 was held to 10.)
func TestRedisReleasesFailedLeasesOnRecovery(t *testing.T) {
	m := miniredis.RunT(t) // stopped and restarted: always in-process
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 3})}
	r := newTestRedis(t, "redis://"+m.Addr(), "gptest", ts, nil) // injected time, no heartbeat loop
	req := Request{Tenant: "acme"}
	var held []Ticket
	for range 3 {
		tk, d := admit(t, r, t0, req)
		if !d.Allowed {
			t.Fatal(d)
		}
		held = append(held, tk)
	}
	m.Close()
	for _, tk := range held[:2] { // two of them end during the outage
		if err := r.Reconcile(context.Background(), t0.Add(time.Second), tk, 0); err == nil {
			t.Fatal("released with Redis down")
		}
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	// Well within the lease lifetime: only the heartbeat frees the slots.
	now := func() time.Time { return t0.Add(2 * time.Second) }
	tk, d, _ := firstAnswer(t, r, now, req)
	if !d.Allowed || d.Concurrency.Remaining != 1 {
		t.Fatalf("first decision after the outage: %+v, want allowed with 1 slot left (1 held, 1 new)", d)
	}
	reconcile(t, r, now(), tk, 0)
	reconcile(t, r, now(), held[2], 0)
	if _, d := admit(t, r, now(), req); d.Concurrency.Remaining != 2 {
		t.Fatalf("after all released: %+v", d)
	}
}

// A release that races with a heartbeat in flight is released again by the
// next one (the heartbeat may have renewed it just after).
func TestRedisReleaseDuringHeartbeat(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 1})}
	r := newTestRedis(t, url, prefix, ts, nil)
	tk, d := admit(t, r, t0, Request{Tenant: "acme"})
	if !d.Allowed {
		t.Fatal(d)
	}
	// As if two heartbeats had taken their snapshots (a Redis Cluster
	// master's probe runs one beside the tick's), and one had finished.
	r.leaseMu.Lock()
	r.beating += 2
	r.beating--
	r.leaseMu.Unlock()
	reconcile(t, r, t0, tk, 0)
	// The heartbeat in flight renews the lease after the release...
	c := rawClient(t, url)
	if err := c.ZAdd(context.Background(), "{"+prefix+":acme}:c", redis.Z{Score: float64(t0.Add(5 * time.Second).UnixMicro()), Member: tk.rt.lease}).Err(); err != nil {
		t.Fatal(err)
	}
	r.leaseMu.Lock()
	r.beating--
	r.leaseMu.Unlock()
	if _, d := admit(t, r, t0, Request{Tenant: "acme"}); d.Allowed {
		t.Fatal("the renewed lease should hold the slot until the next heartbeat")
	}
	// ...and the next heartbeat releases it.
	if err := r.heartbeat(t0, nil); err != nil {
		t.Fatal(err)
	}
	if _, d := admit(t, r, t0, Request{Tenant: "acme"}); !d.Allowed {
		t.Fatalf("lease released during a heartbeat still held: %+v", d)
	}
}

// A live request keeps its slot through an outage longer than the lease
// lifetime: the recovery's heartbeat makes its expired lease again before
// the first decision. A crashed replica's slots free themselves after the
// default lease lifetime, a few seconds.
func TestRedisLiveLeaseSurvivesOutage(t *testing.T) {
	m := miniredis.RunT(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 2})}
	r := newTestRedis(t, "redis://"+m.Addr(), "gptest", ts, nil)
	crashed := newTestRedis(t, "redis://"+m.Addr(), "gptest", ts, nil)
	live, d := admit(t, r, t0, Request{Tenant: "acme"})
	if !d.Allowed || r.leaseTTL != defaultLeaseTTL {
		t.Fatal(d, r.leaseTTL)
	}
	if _, d := admit(t, crashed, t0, Request{Tenant: "acme"}); !d.Allowed {
		t.Fatal(d)
	}
	m.Close()
	after := t0.Add(defaultLeaseTTL + time.Second) // both leases have expired
	var d2 Decision
	if _, err := r.Admit(context.Background(), after, &Request{Tenant: "acme"}, &d2); err == nil {
		t.Fatal("admitted by a Redis that is down")
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	tk, d2, _ := firstAnswer(t, r, func() time.Time { return after }, Request{Tenant: "acme"})
	if !d2.Allowed || d2.Concurrency.Remaining != 0 {
		t.Fatalf("%+v: want the live lease counted and the crashed replica's expired", d2)
	}
	reconcile(t, r, after, tk, 0)
	reconcile(t, r, after, live, 0)
}

// The outage, on a real redis-server hung by SIGSTOP, with the
// default timeout and lease lifetime: requests end while it hangs, others
// stream on. When it resumes, service is back at Redis's first answer with
// every slot right: the ended requests' slots free (they were held for the
// whole lease), the live ones held.
func TestRedisPauseReleasesAndKeepsSlots(t *testing.T) {
	srv := redistest.Start(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 4})}
	r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(defaultRedisTimeout)
		o.ClientTime, o.LeaseRefresh = false, 0 // wall clock, the heartbeat loop on
	})
	if r.leaseTTL != defaultLeaseTTL {
		t.Fatal(r.leaseTTL)
	}
	req := Request{Tenant: "acme"}
	var held []Ticket
	for range 4 {
		tk, d := admit(t, r, time.Now(), req)
		if !d.Allowed {
			t.Fatal(d)
		}
		held = append(held, tk)
	}
	srv.Stop()
	for _, tk := range held[:2] { // end while Redis hangs
		if err := r.Reconcile(context.Background(), time.Now(), tk, 0); err == nil {
			t.Fatal("released on a hung Redis")
		}
	}
	for range 3 { // traffic meanwhile: the breaker opens
		var d Decision
		if _, err := r.Admit(context.Background(), time.Now(), &req, &d); err == nil || !d.Allowed {
			t.Fatalf("%v %+v: want fail_open", err, d)
		}
	}
	srv.Continue()
	tk, d, took := firstAnswer(t, r, time.Now, req)
	t.Logf("first answer %v after Redis resumed", took)
	if !d.Allowed || d.Concurrency.Remaining != 1 {
		t.Fatalf("first decision after the pause: %+v, want allowed with 1 slot left (2 live, 1 new)", d)
	}
	if took > time.Second {
		t.Errorf("first answer %v after Redis resumed, want well under a second", took)
	}
	for _, tk := range append(held[2:], tk) {
		reconcile(t, r, time.Now(), tk, 0)
	}
}

// A stall of the gateway's own CPUs makes the calls in flight miss their
// deadline together although Redis answered them: failures within half a
// timeout of the first do not open the breaker; failures that go on do,
// timed on the monotonic clock: a wall clock stepped back an hour (NTP)
// kept the breaker closed, every call of an outage waiting out the timeout
// for that hour.
func TestBreakerNeedsFailuresOverTime(t *testing.T) {
	ts := []TenantConfig{tenant("acme", Limits{RPM: 60})}
	r := newTestRedis(t, "redis://"+blackhole(t), "gptest", ts, nil)
	var elapsed time.Duration // the monotonic clock
	wall := t0
	r.since = func() time.Duration { return elapsed }
	r.now = func() time.Time { return wall }
	for range 10 {
		r.noteError(context.DeadlineExceeded)
	}
	if r.open.Load() {
		t.Fatal("breaker opened by failures all at one instant")
	}
	elapsed += r.timeout/2 - time.Millisecond
	wall = wall.Add(r.timeout/2 - time.Millisecond)
	r.noteError(context.DeadlineExceeded)
	if r.open.Load() {
		t.Fatal("breaker opened by failures within half a timeout")
	}
	r.noteAnswer() // one answer ends the streak
	elapsed += time.Second
	wall = wall.Add(time.Second)
	for range 3 {
		r.noteError(context.DeadlineExceeded)
	}
	if r.open.Load() {
		t.Fatal("the streak did not restart at the answer")
	}
	elapsed += r.timeout / 2
	wall = wall.Add(-time.Hour) // NTP steps the wall clock back
	r.noteError(context.DeadlineExceeded)
	if !r.open.Load() {
		t.Fatal("breaker still closed after failures over half a timeout (the wall clock stepped back)")
	}
}

// Redis hangs with an admission queued, the gateway gives up on it, and
// Redis then runs it: it must take nothing, since no replica would ever
// release a slot or a charge it does not know of. (It held a concurrency
// slot until its lease ran out, and charged its tokens, for a request
// refused with 503 or admitted unlimited; 6 of 8 stalls of a real server
// in a probe, with 3 replicas.)
func TestRedisRunsNoAdmissionLate(t *testing.T) {
	srv := redistest.Start(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 2, TPM: 1000})}
	r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(100 * time.Millisecond)
		o.ClientTime = false // the script's clock is Redis's
	})
	req := Request{Tenant: "acme", EstTokens: 400}
	tk, d := admit(t, r, time.Now(), req) // one answer: the skew is known
	if !d.Allowed {
		t.Fatal(d)
	}
	reconcile(t, r, time.Now(), tk, 0) // the tokens back too
	srv.Stop()
	var late Decision
	if _, err := r.Admit(context.Background(), time.Now(), &req, &late); err == nil {
		t.Fatal("an answer from a stopped Redis")
	}
	srv.Continue()
	// Redis runs what queued while it was stopped before it serves a
	// connection made after it resumed.
	if err := srv.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	tk1, d1 := admit(t, r, time.Now(), req)
	tk2, d2 := admit(t, r, time.Now(), req)
	if !d1.Allowed || !d2.Allowed {
		t.Fatalf("after the stall: %+v, %+v; want both slots and 800 of the 1000 tokens free", d1, d2)
	}
	reconcile(t, r, time.Now(), tk1, 0)
	reconcile(t, r, time.Now(), tk2, 0)
}

// One skew estimate serves every node of a Redis Cluster, whose clocks may
// differ: a node behind the others would have the script refuse, as late,
// a call it answers at once. Such a refusal is asked again without the
// limit, so it refuses nothing.
func TestRedisEarlyTooLateIsAskedAgain(t *testing.T) {
	url, prefix := redisTarget(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 2})}
	r := newTestRedis(t, url, prefix, ts, func(c *BackendConfig, o *redisOptions) {
		o.ClientTime = false
	})
	req := Request{Tenant: "acme"}
	tk, _ := admit(t, r, time.Now(), req) // the skew is known
	reconcile(t, r, time.Now(), tk, 0)
	// As if the replies so far had come from a node an hour behind the one
	// asked now: the limit passed is an hour in that node's past.
	r.skew.Store(r.skew.Load() - int64(time.Hour/time.Microsecond))
	tk, d := admit(t, r, time.Now(), req)
	if !d.Allowed {
		t.Fatalf("refused after a skew an hour off: %+v", d)
	}
	reconcile(t, r, time.Now(), tk, 0)
}

// The same for a stream's charge as it runs past its estimate (extend): a
// charge Redis runs after the gateway gave up on it would be charged again
// at the end, since the gateway counted it as not made.
func TestRedisRunsNoChargeLate(t *testing.T) {
	srv := redistest.Start(t)
	ts := []TenantConfig{tenant("acme", Limits{TPM: 1000})}
	r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(100 * time.Millisecond)
		o.ClientTime = false
	})
	tk, d := admit(t, r, time.Now(), Request{Tenant: "acme", EstTokens: 100})
	if !d.Allowed {
		t.Fatal(d)
	}
	// Redis knows the script (as after a first charge): the EVALSHA it runs
	// late finds it.
	if err := extendScript.Load(context.Background(), srv.Client()).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := r.charge(tk.rt, 300, false); err == nil {
		t.Fatal("a charge answered by a stopped Redis")
	}
	srv.Continue()
	if err := srv.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, time.Now(), tk, 100) // it used what it was charged
	// 100 of the 1000 used: 800 more fit, unless the 300 were charged late.
	tk2, d := admit(t, r, time.Now(), Request{Tenant: "acme", EstTokens: 800})
	if !d.Allowed {
		t.Fatalf("%+v: the charge that failed was made after all", d.Tokens)
	}
	reconcile(t, r, time.Now(), tk2, 0)
}

// The skew estimate rises at once and falls 1 ms a reply (a reply's trip
// back makes each sample an underestimate), but a sample more than the
// timeout below it means a clock stepped (this process's forward, or
// Redis's back): the estimate follows at once. Before, after a step of an
// hour, the time passed to Redis stayed past the caller's deadline for
// about 3.6 million replies.
func TestSkewFollowsAClockStep(t *testing.T) {
	r := newTestRedis(t, "redis://"+blackhole(t), "gptest", nil, func(_ *BackendConfig, o *redisOptions) { o.ClientTime = false })
	recv := time.Now()
	server := recv.UnixMicro() + 5000 // Redis's clock 5 ms ahead
	r.noteSkew(server, recv)
	if got := r.skew.Load(); got != 5000 {
		t.Fatalf("first sample: skew %d µs, want 5000", got)
	}
	r.noteSkew(server-20000, recv) // a reply 20 ms late: within the timeout
	if got := r.skew.Load(); got != 4000 {
		t.Fatalf("after a slow reply: skew %d µs, want 4000 (1 ms down)", got)
	}
	r.noteSkew(server+2000, recv)
	if got := r.skew.Load(); got != 7000 {
		t.Fatalf("after a higher sample: skew %d µs, want 7000", got)
	}
	hour := int64(time.Hour / time.Microsecond)
	r.noteSkew(server-hour, recv) // this process's clock stepped an hour forward
	if got := r.skew.Load(); got != 5000-hour {
		t.Fatalf("after a clock step of an hour: skew %d µs, want %d", got, 5000-hour)
	}
	dl := recv.Add(r.timeout)
	if got, want := r.staleAfter(dl), strconv.FormatInt(dl.UnixMicro()+5000-hour, 10); got != want {
		t.Fatalf("staleAfter %s, want %s", got, want)
	}
}

// scriptCalls records the number of keys of each script call a client
// makes (EVALSHA, or EVAL after NOSCRIPT, counted once), alone or in a
// pipeline, and the round trips that carried them.
type scriptCalls struct {
	mu    sync.Mutex
	keys  []int
	trips int
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		trip := false
		for _, cmd := range cmds {
			trip = s.note(cmd) || trip
		}
		if trip {
			s.mu.Lock()
			s.trips++
			s.mu.Unlock()
		}
		return err
	}
}
func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if s.note(cmd) {
			s.mu.Lock()
			s.trips++
			s.mu.Unlock()
		}
		return err
	}
}

// note records cmd if it is a script call; it reports whether it is one.
func (s *scriptCalls) note(cmd redis.Cmder) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return false
	}
	if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		n, _ := strconv.Atoi(fmt.Sprint(cmd.Args()[2]))
		s.mu.Lock()
		s.keys = append(s.keys, n)
		s.mu.Unlock()
	}
	return true
}

func (s *scriptCalls) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys
	s.keys = nil
	return k
}

// takeTrips returns the round trips that carried script calls since the
// last takeTrips.
func (s *scriptCalls) takeTrips() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.trips
	s.trips = 0
	return n
}

// The heartbeat renews a replica's leases in calls of about heartbeatBatch
// keys, not in one call that carries them all (on a single Redis, 5,000
// leases held it 25–65 ms from every other client), and still renews every
// one of them and releases every stale one.
func TestRedisHeartbeatRenewsEveryLeaseInBatches(t *testing.T) {
	defer func(n, p int) { heartbeatBatch, heartbeatPipeline = n, p }(heartbeatBatch, heartbeatPipeline)
	heartbeatBatch, heartbeatPipeline = 4, 8 // pipelines of two calls, several at once
	url, prefix := redisTarget(t)
	var ts []TenantConfig
	for i := range 4 {
		ts = append(ts, tenant(fmt.Sprint("t", i), Limits{MaxConcurrency: 10}))
	}
	ts[3].Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{MaxConcurrency: 10}}}
	ts[3].Models = map[string]Limits{"big": {MaxConcurrency: 10}}
	r := newTestRedis(t, url, prefix, ts, nil)
	var live []Ticket
	keys := 0
	for i := range 9 { // t0..t2: a key each; t3: three (tenant, key, model)
		req := Request{Tenant: fmt.Sprint("t", i%4)}
		if i%4 == 3 {
			req.KeyID, req.Model = "k", "big"
		}
		tk, d := admit(t, r, t0, req)
		if !d.Allowed {
			t.Fatal(d)
		}
		live = append(live, tk)
		keys += len(tk.rt.keys)
	}
	// Two released during a heartbeat, which may have renewed them after:
	// the next one releases them again.
	r.leaseMu.Lock()
	r.beating++
	r.leaseMu.Unlock()
	released := live[7:]
	live = live[:7]
	releasedKeys := 0
	for _, tk := range released {
		reconcile(t, r, t0, tk, 0)
		keys -= len(tk.rt.keys)
		releasedKeys += len(tk.rt.keys)
	}
	r.leaseMu.Lock()
	r.beating--
	r.leaseMu.Unlock()
	c := rawClient(t, url)
	ctx := context.Background()
	for _, tk := range released { // as the heartbeat in flight would have
		for _, k := range tk.rt.keys {
			if err := c.ZAdd(ctx, k, redis.Z{Score: float64(t0.Add(5 * time.Second).UnixMicro()), Member: tk.rt.lease}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	calls := &scriptCalls{}
	r.client.Load().c.AddHook(calls)
	now := t0.Add(4 * time.Second)
	if err := r.heartbeat(now, nil); err != nil {
		t.Fatal(err)
	}
	got := calls.take()
	sent := 0
	for _, n := range got {
		if n > heartbeatBatch+2 { // a request's keys (up to 3) go in one call
			t.Errorf("a call of %d keys, want at most %d", n, heartbeatBatch+2)
		}
		sent += n
	}
	if sent != keys+releasedKeys {
		t.Errorf("calls of %v keys: want %d keys in all (%d renewed, %d released)", got, keys+releasedKeys, keys, releasedKeys)
	}
	want := float64(now.Add(r.leaseTTL).UnixMicro())
	for _, tk := range live {
		for _, k := range tk.rt.keys {
			if score, err := c.ZScore(ctx, k, tk.rt.lease).Result(); err != nil || score != want {
				t.Errorf("lease %s in %s: expires at %v (%v), want renewed to %v", tk.rt.lease, k, score, err, want)
			}
		}
	}
	for _, tk := range released {
		for _, k := range tk.rt.keys {
			if err := c.ZScore(ctx, k, tk.rt.lease).Err(); err != redis.Nil {
				t.Errorf("released lease %s still in %s (%v)", tk.rt.lease, k, err)
			}
		}
	}
	for _, tk := range live {
		reconcile(t, r, now, tk, 0)
	}
}

// A heartbeat whose pipeline fails sends no more pipelines, and its
// breaker notes one failure, as when one call carried every lease: a hung
// Redis costs a heartbeat one timeout, and counts once toward opening the
// breaker. The stale leases it did not release are released by the next
// one.
func TestRedisHeartbeatStopsAtItsFirstFailure(t *testing.T) {
	defer func(n, p, c int) { heartbeatBatch, heartbeatPipeline, heartbeatCalls = n, p, c }(heartbeatBatch, heartbeatPipeline, heartbeatCalls)
	heartbeatBatch, heartbeatPipeline, heartbeatCalls = 1, 2, 1 // pipelines of two calls of a key, one at a time
	srv := redistest.Start(t)
	ts := []TenantConfig{tenant("acme", Limits{MaxConcurrency: 10})}
	r := newTestRedis(t, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, _ *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(100 * time.Millisecond)
	})
	var live []Ticket
	for range 6 {
		tk, d := admit(t, r, t0, Request{Tenant: "acme"})
		if !d.Allowed {
			t.Fatal(d)
		}
		live = append(live, tk)
	}
	r.leaseMu.Lock()
	r.beating++ // as if a heartbeat were in flight: the releases are stale
	r.leaseMu.Unlock()
	for _, tk := range live[4:] {
		reconcile(t, r, t0, tk, 0)
	}
	r.leaseMu.Lock()
	r.beating--
	r.leaseMu.Unlock()
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	for _, tk := range live[4:] { // renewed by the heartbeat in flight
		if err := c.ZAdd(ctx, "{gptest:acme}:c", redis.Z{Score: float64(t0.Add(5 * time.Second).UnixMicro()), Member: tk.rt.lease}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	calls := &scriptCalls{}
	r.client.Load().c.AddHook(calls)
	srv.Stop()
	if err := r.heartbeat(t0.Add(time.Second), nil); err == nil {
		t.Fatal("a heartbeat answered by a hung Redis")
	}
	if got, trips := calls.take(), calls.takeTrips(); len(got) != 2 || trips != 1 || r.streak.Load() != 1 || r.downCalls.Load() != 1 {
		t.Fatalf("calls %v in %d round trips, breaker streak %d, failed calls %d: want one pipeline of two calls, noted once", got, trips, r.streak.Load(), r.downCalls.Load())
	}
	r.leaseMu.Lock()
	stale := len(r.stale)
	r.leaseMu.Unlock()
	if stale != 2 {
		t.Fatalf("%d stale leases kept, want 2", stale)
	}
	srv.Continue()
	if err := r.heartbeat(t0.Add(2*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if got, trips := calls.take(), calls.takeTrips(); len(got) != 6 || trips != 4 || r.streak.Load() != 0 {
		// The first pipeline is sent again as EVAL: no heartbeat had
		// loaded the script.
		t.Fatalf("calls %v in %d round trips, breaker streak %d: want six calls of a key (4 renewed, 2 released) in three pipelines and the first again, the streak ended", got, trips, r.streak.Load())
	}
	for _, tk := range live[4:] {
		if err := c.ZScore(ctx, "{gptest:acme}:c", tk.rt.lease).Err(); err != redis.Nil {
			t.Errorf("released lease %s still held (%v)", tk.rt.lease, err)
		}
	}
	for _, tk := range live[:4] {
		reconcile(t, r, t0.Add(2*time.Second), tk, 0)
	}
}

// An admission whose reply did not come back (a connection reset after
// Redis ran it, or a reply later than the timeout) may have taken its
// lease: the heartbeat releases it. No ticket held it, so nothing did: a
// probe that reset the gateway's Redis connections under traffic found a
// slot held with none of its tenant's requests running, until its lease
// expired (lease_ttl, 5 s).
func TestRedisLeaseOfALostReplyIsReleased(t *testing.T) {
	srv := redistest.Start(t) // behind a proxy that holds replies: a private server
	p, url := startLatencyProxy(t, "redis://"+srv.Addr())
	ts := []TenantConfig{tenant("acme", Limits{RPM: 6000, MaxConcurrency: 1})}
	r := newTestRedis(t, url, "gptest", ts, func(c *BackendConfig, _ *redisOptions) {
		c.Redis.Timeout = cfgtypes.Duration(100 * time.Millisecond)
	})
	acme := Request{Tenant: "acme"}
	tk, d := admit(t, r, t0, acme) // loads the script: the held call below is one turn
	if !d.Allowed {
		t.Fatal(d)
	}
	reconcile(t, r, t0, tk, 0)
	p.holdFor(2) // the next admission's reply waits for a second script turn: it times out
	var lost Decision
	if _, err := r.Admit(context.Background(), t0, &acme, &lost); err == nil || !lost.Allowed || lost.Limit != limitBackend {
		t.Fatalf("an admission whose reply is held: %+v, %v: want the timeout, admitted by fail_open", lost, err)
	}
	key := "{gptest:acme}:c"
	if n := srv.Client().ZCard(context.Background(), key).Val(); n != 1 {
		t.Fatalf("%s holds %d leases: want the one the held call took", key, n)
	}
	r.heartbeat(r.clock(), nil) // its script turn lets the held reply go
	if n := srv.Client().ZCard(context.Background(), key).Val(); n != 0 {
		t.Fatalf("%s holds %d leases after the heartbeat: want the lost call's released", key, n)
	}
	if _, d := admit(t, r, t0, acme); !d.Allowed {
		t.Fatalf("the next request: %+v, want it admitted", d)
	}
}
