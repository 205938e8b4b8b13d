package ratelimit

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/redistest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func benchTenants() []TenantConfig {
	ten := tenant("acme", Limits{RPM: 1e9, TPM: 1e12, MaxConcurrency: 1e6})
	ten.Keys = []KeyConfig{{ID: "k", SHA256: hashA, Limits: Limits{RPM: 1e9}}, {ID: "plain", SHA256: hashB}}
	ten.Models = map[string]Limits{"big": {TPM: 1e12, MaxConcurrency: 1e6}}
	return []TenantConfig{ten, tenant("beta", Limits{RPM: 60})}
}

// One admission plus its reconcile, tenant limits only (rpm, tpm, concurrency).
func BenchmarkLocalAdmit(b *testing.B) {
	l := newLocal(benchTenants())
	req := Request{Tenant: "acme", KeyID: "plain", Model: "small", EstTokens: 500}
	var d Decision
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		tk, _ := l.Admit(ctx, now, &req, &d)
		l.Reconcile(ctx, now, tk, 400)
	}
	if !d.Allowed {
		b.Fatal(d)
	}
}

// Admission only (no reconcile), tenant limits only.
func BenchmarkLocalAdmitOnly(b *testing.B) {
	l := newLocal([]TenantConfig{tenant("acme", Limits{RPM: 1e9, TPM: 1e12})})
	req := Request{Tenant: "acme", EstTokens: 1}
	var d Decision
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		l.Admit(ctx, now, &req, &d)
	}
	if !d.Allowed {
		b.Fatal(d)
	}
}

// Every level: tenant, key and model limits (seven buckets and counters).
func BenchmarkLocalAdmitAllLevels(b *testing.B) {
	l := newLocal(benchTenants())
	req := Request{Tenant: "acme", KeyID: "k", Model: "big", EstTokens: 500}
	var d Decision
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		tk, _ := l.Admit(ctx, now, &req, &d)
		l.Reconcile(ctx, now, tk, 400)
	}
	if !d.Allowed {
		b.Fatal(d)
	}
}

// A rejection (the tenant is out of requests).
func BenchmarkLocalReject(b *testing.B) {
	l := newLocal(benchTenants())
	req := Request{Tenant: "beta"}
	var d Decision
	ctx := context.Background()
	for range 60 {
		l.Admit(ctx, t0, &req, &d)
	}
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(ctx, t0, &req, &d)
	}
	if d.Allowed {
		b.Fatal(d)
	}
}

// Parallel admissions of one tenant (contention on its lock).
func BenchmarkLocalAdmitParallel(b *testing.B) {
	l := newLocal(benchTenants())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := Request{Tenant: "acme", KeyID: "plain", EstTokens: 500}
		var d Decision
		for pb.Next() {
			now := time.Now()
			tk, _ := l.Admit(ctx, now, &req, &d)
			l.Reconcile(ctx, now, tk, 400)
		}
	})
}

// What the proxy calls: Gate (wall clock, metrics) on the local backend.
func BenchmarkGateLocal(b *testing.B) {
	ts := benchTenants()
	m, err := newMetrics(prometheus.NewRegistry(), "local")
	if err != nil {
		b.Fatal(err)
	}
	g := newGate(newLocal(ts), m, 0)
	g.SetTenants(time.Now(), ts)
	req := Request{Tenant: "acme", KeyID: "plain", Model: "small", EstTokens: 500}
	var d Decision
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tk, _, _ := g.Admit(ctx, &req, &d)
		g.Reconcile(ctx, tk, 400)
	}
	if !d.Allowed {
		b.Fatal(d)
	}
}

func BenchmarkWriteHeaders(b *testing.B) {
	d := Decision{Allowed: true, Requests: Quota{600, 599, 100 * time.Millisecond}, Tokens: Quota{200000, 199000, 300 * time.Millisecond}}
	var h nopSetter
	b.ReportAllocs()
	for b.Loop() {
		d.WriteHeaders(h)
	}
}

// One Redis decision (admit script) and its reconcile (second script), on the
// server clock, against GOODPUT_REDIS_URL or miniredis. Reports p50 and p99 of
// the admission alone.
func BenchmarkRedisAdmit(b *testing.B) {
	url, prefix := redisTarget(b)
	ts := []TenantConfig{tenant("acme", Limits{RPM: 1e9, TPM: 1e12, MaxConcurrency: 1e6})}
	r := newTestRedis(b, url, prefix, ts, func(_ *BackendConfig, o *redisOptions) { o.ClientTime = false })
	req := Request{Tenant: "acme", EstTokens: 500}
	var d Decision
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		tk, err := r.Admit(ctx, start, &req, &d)
		lat = append(lat, time.Since(start))
		if err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
		if err := r.Reconcile(ctx, start, tk, 400); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// Decision latency against a private redis-server while the gateway's own
// CPUs are busy: 32 callers admit and reconcile at once, next to load
// goroutines that each burn `burst` of CPU then sleep 1ms, like the proxy's
// readers and writers handling events (burst 0: no load; "spin": goroutines
// that never block, one per CPU, the worst case for the Go scheduler). An
// admission's latency includes waiting for a CPU once Redis has answered,
// and past the timeout that wait alone fails the call. Reports p50, p99,
// p99.9 and the maximum, and how many decisions took longer than 50, 100 and
// 250 ms.
//
//	go test -run '^$' -bench RedisDecisionUnderCPULoad -benchtime 20000x ./ratelimit
func BenchmarkRedisDecisionUnderCPULoad(b *testing.B) {
	for _, load := range []struct {
		name  string
		n     int
		burst time.Duration // 0: spin
	}{{"idle", 0, 0}, {"events-64", 64, 50 * time.Microsecond}, {"events-256", 256, 50 * time.Microsecond}, {"spin-1xCPU", runtime.GOMAXPROCS(0), 0}} {
		b.Run(load.name, func(b *testing.B) {
			srv := redistest.Start(b)
			ts := []TenantConfig{tenant("acme", Limits{RPM: 1e9, TPM: 1e12, MaxConcurrency: 1e6})}
			r := newTestRedis(b, "redis://"+srv.Addr(), "gptest", ts, func(c *BackendConfig, o *redisOptions) {
				c.Redis.Timeout = cfgtypes.Duration(10 * time.Second) // measure, never time out
				o.ClientTime = false
			})
			stop := make(chan struct{})
			var loaders sync.WaitGroup
			for range load.n {
				loaders.Add(1)
				go func() {
					defer loaders.Done()
					buf := make([]byte, 1024)
					for {
						select {
						case <-stop:
							return
						default:
						}
						for start := time.Now(); load.burst == 0 || time.Since(start) < load.burst; {
							sha256.Sum256(buf)
							if load.burst == 0 {
								break
							}
						}
						if load.burst > 0 {
							time.Sleep(time.Millisecond)
						}
					}
				}()
			}
			const callers = 32
			var next atomic.Int64
			lats := make([][]time.Duration, callers)
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := Request{Tenant: "acme", EstTokens: 500}
					var d Decision
					ctx := context.Background()
					for next.Add(1) <= int64(b.N) {
						start := time.Now()
						tk, err := r.Admit(ctx, start, &req, &d)
						lats[i] = append(lats[i], time.Since(start))
						if err != nil || !d.Allowed {
							b.Error(err, d)
							return
						}
						if err := r.Reconcile(ctx, start, tk, 400); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(stop)
			loaders.Wait()
			lat := slices.Concat(lats...)
			slices.Sort(lat)
			if len(lat) == 0 {
				return
			}
			q := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(0.999), "p99.9-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
			for _, over := range []time.Duration{50, 100, 250} {
				n, _ := slices.BinarySearch(lat, over*time.Millisecond)
				b.ReportMetric(float64(len(lat)-n), fmt.Sprintf("over-%dms", over))
			}
		})
	}
}

// scaleTenants is a platform's tenants file: n tenants, each with tenant
// limits, 5 keys without limits of their own and models per-model limits.
func scaleTenants(n, models int) []TenantConfig {
	names := make([]string, models)
	for m := range names {
		names[m] = fmt.Sprintf("model-%02d", m)
	}
	ts := make([]TenantConfig, n)
	for i := range ts {
		ts[i] = tenant(fmt.Sprintf("tenant-%05d", i), Limits{RPM: 600, TPM: 200_000, MaxConcurrency: 32, Burst: 20})
		for k := range 5 {
			ts[i].Keys = append(ts[i].Keys, KeyConfig{ID: fmt.Sprintf("key-%05d-%d", i, k)})
		}
		ts[i].Models = make(map[string]Limits, models)
		for _, m := range names {
			ts[i].Models[m] = Limits{RPM: 300, TPM: 50_000}
		}
	}
	return ts
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// The local limiter of a platform's tenants file (20,000 tenants, 25
// per-model limits each): the heap it holds once built (built-MB), then
// once every tenant has sent one request, still in flight, to one model
// (used-MB); each iteration is a reload of the same file.
//
//	go test -run '^$' -bench LocalScale -benchtime 3x ./ratelimit
func BenchmarkLocalScale(b *testing.B) {
	ts := scaleTenants(20_000, 25)
	base := liveHeap()
	l := newLocal(ts)
	built := liveHeap()
	ctx := context.Background()
	var d Decision
	for i := range ts {
		req := Request{Tenant: ts[i].Name, KeyID: ts[i].Keys[0].ID, Model: "model-00", EstTokens: 100}
		if _, err := l.Admit(ctx, t0, &req, &d); err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
	}
	used := liveHeap()
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		now = now.Add(time.Second)
		l.SetTenants(now, ts)
	}
	runtime.KeepAlive(l)
	const mb = 1 << 20 // reported after the loop, whose start clears them
	b.ReportMetric(float64(built-base)/mb, "built-MB")
	b.ReportMetric(float64(used-base)/mb, "used-MB")
}

// The Redis backend of the same tenants file as BenchmarkLocalScale, on a
// private redis-server: the heap it holds once built (built-MB), then once
// every tenant has sent one request, still in flight (its lease held), to
// one model (used-MB); each iteration is a reload of the same file.
//
//	go test -run '^$' -bench RedisScale -benchtime 3x ./ratelimit
func BenchmarkRedisScale(b *testing.B) {
	srv := redistest.Start(b)
	ts := scaleTenants(20_000, 25)
	base := liveHeap()
	r := newTestRedis(b, "redis://"+srv.Addr(), "gptest", ts, nil)
	built := liveHeap()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var d Decision
			for i := int(next.Add(1) - 1); i < len(ts); i = int(next.Add(1) - 1) {
				req := Request{Tenant: ts[i].Name, KeyID: ts[i].Keys[0].ID, Model: "model-00", EstTokens: 100}
				if _, err := r.Admit(ctx, t0, &req, &d); err != nil || !d.Allowed {
					b.Error(err, d)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	used := liveHeap()
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		now = now.Add(time.Second)
		r.SetTenants(now, ts)
	}
	runtime.KeepAlive(r)
	const mb = 1 << 20 // reported after the loop, whose start clears them
	b.ReportMetric(float64(built-base)/mb, "built-MB")
	b.ReportMetric(float64(used-base)/mb, "used-MB")
}

// heartbeatBench is a replica holding one lease for each of 5,000 tenants
// on a private redis-server, and a client of that server whose SLOWLOG
// times every call.
func heartbeatBench(b *testing.B) (*Redis, *redis.Client) {
	srv := redistest.Start(b)
	ts := make([]TenantConfig, 5000)
	for i := range ts {
		ts[i] = tenant(fmt.Sprintf("tenant-%05d", i), Limits{MaxConcurrency: 10})
	}
	r := newTestRedis(b, "redis://"+srv.Addr(), "gptest", ts, func(_ *BackendConfig, o *redisOptions) { o.ClientTime = false })
	ctx := context.Background()
	for i := range ts {
		var d Decision
		if _, err := r.Admit(ctx, time.Now(), &Request{Tenant: ts[i].Name}, &d); err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 10 * time.Second})
	b.Cleanup(func() { c.Close() })
	for _, set := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "1000000"}} {
		if err := c.ConfigSet(ctx, set[0], set[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return r, c
}

// reportHeartbeat reads the SLOWLOG of n renewals of the heartbeat (and
// what else ran meanwhile) and reports the median and the longest script
// call as Redis timed it (p50-call-µs, max-call-µs; on a busy machine the
// longest is also the time Redis waited for a CPU), the script calls per
// renewal, and the longest a PING sent meanwhile on another connection
// waited (max-ping-µs: what any other client of a single-threaded Redis
// may wait).
func reportHeartbeat(b *testing.B, c *redis.Client, n int, maxPing time.Duration) {
	logs, err := c.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls []time.Duration
	for _, l := range logs {
		if len(l.Args) > 0 && strings.HasPrefix(strings.ToLower(l.Args[0]), "eval") {
			calls = append(calls, l.Duration)
		}
	}
	if len(calls) == 0 {
		b.Fatal("no script call in the SLOWLOG")
	}
	slices.Sort(calls)
	b.ReportMetric(float64(calls[len(calls)/2].Microseconds()), "p50-call-µs")
	b.ReportMetric(float64(calls[len(calls)-1].Microseconds()), "max-call-µs")
	b.ReportMetric(float64(len(calls))/float64(n), "calls/op")
	b.ReportMetric(float64(maxPing.Microseconds()), "max-ping-µs")
}

// pingMeanwhile sends PINGs on c until stop is closed, and returns the
// longest one's round trip.
func pingMeanwhile(c *redis.Client, stop chan struct{}) func() time.Duration {
	var longest time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if c.Ping(context.Background()).Err() == nil {
				longest = max(longest, time.Since(start))
			}
		}
	}()
	return func() time.Duration { <-done; return longest }
}

// The heartbeat of a replica holding one lease for each of 5,000 tenants on
// a single Redis: each iteration renews them all (ns/op: the whole
// renewal), in calls of heartbeatBatch keys, pipelined (see heartbeat);
// one-call is every lease in one call (as before the batches),
// pipelined-256 every call of 256 in one pipeline. See reportHeartbeat for
// the metrics.
//
//	go test -run '^$' -bench RedisHeartbeat -benchtime 20x ./ratelimit
func BenchmarkRedisHeartbeat(b *testing.B) {
	r, c := heartbeatBench(b)
	ctx := context.Background()
	if err := r.heartbeat(r.clock(), nil); err != nil { // the script loaded
		b.Fatal(err)
	}
	renew := func(b *testing.B, beat func() error) {
		if err := c.SlowLogReset(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		pinged := pingMeanwhile(anotherClient(b, c), stop)
		n := 0
		for b.Loop() {
			if err := beat(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		close(stop)
		reportHeartbeat(b, c, n, pinged())
	}
	for _, batch := range []int{math.MaxInt, 64, 256, 1024} {
		name := fmt.Sprintf("batch=%d", batch)
		if batch == math.MaxInt {
			name = "one-call"
		}
		b.Run(name, func(b *testing.B) {
			defer func(n int) { heartbeatBatch = n }(heartbeatBatch)
			heartbeatBatch = batch
			renew(b, func() error { return r.heartbeat(r.clock(), nil) })
		})
	}
	b.Run("pipelined-256", func(b *testing.B) {
		renew(b, func() error { return pipelinedHeartbeat(r, 256) })
	})
}

// pipelinedHeartbeat renews r's leases in calls of batch keys sent at once
// on one connection (a pipeline): the alternative to calls one after
// another that BenchmarkRedisHeartbeat measures.
func pipelinedHeartbeat(r *Redis, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	ttl := strconv.FormatInt(r.leaseTTL.Microseconds(), 10)
	pipe := r.client.Load().c.Pipeline()
	var keys []string
	var args []any
	flush := func() {
		if len(keys) > 0 {
			leaseScript.EvalSha(ctx, pipe, keys, args...)
		}
		keys, args = nil, []any{r.nowArg(r.clock()), ttl, ""}
	}
	flush()
	r.leaseMu.Lock()
	for tk := range r.leases {
		for _, k := range tk.keys[tk.ntok:] {
			keys, args = append(keys, k), append(args, "+", tk.lease)
		}
		if len(keys) >= batch {
			flush()
		}
	}
	r.leaseMu.Unlock()
	flush()
	_, err := pipe.Exec(ctx)
	return err
}

// anotherClient is another client of c's server.
func anotherClient(b *testing.B, c *redis.Client) *redis.Client {
	nc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, ReadTimeout: 10 * time.Second})
	b.Cleanup(func() { nc.Close() })
	return nc
}
